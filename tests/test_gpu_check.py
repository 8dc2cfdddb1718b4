"""``make gpu-check`` (tools.gpu_check) without a GPU: its refusal, and each part's verdict and summary line
from the outputs its commands leave (the commands themselves are faked: they need CUDA)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

import tools.gpu_check as gpu_check


def test_without_a_gpu_it_says_so_and_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "run it on a GPU machine" in err
    assert not (tmp_path / "out").exists()  # nothing written before the refusal


def test_the_speed_line_gives_s3attention_against_sdpa_per_length() -> None:
    df = pd.DataFrame({
        "attention": ["s3attention", "vanilla_sdpa", "s3attention", "vanilla_sdpa", "linformer"],
        "seq_len": [1024, 1024, 4096, 4096, 1024], "status": ["ok"] * 5,
        "time_ms_median": [3.0, 1.0, 2.0, 4.0, 9.0], "graph_time_ms_median": [1.5, 0.5, 1.0, 2.0, 9.0],
        "cuda_kernels_per_call": [58.0, 24.0, 58.0, 24.0, 30.0], "gpu_busy_fraction": [0.5, 0.9, 0.8, 0.95, 0.5],
        "peak_mem_bytes": [2e6, 1e6, 3e6, 6e6, 1e6]})
    line = gpu_check.s3_against_sdpa(df)
    assert line == ("S3Attention / vanilla_sdpa: n=1024: 3.00x, graph 3.00x, 58 kernels, busy 50%, memory 2.00x; "
                    "n=4096: 0.50x, graph 0.50x, 58 kernels, busy 80%, memory 0.50x")
    failed = df.assign(status=["ok", "error", "ok", "ok", "ok"])
    assert gpu_check.s3_against_sdpa(failed).startswith("S3Attention / vanilla_sdpa: n=4096")  # no pair at 1K
    assert gpu_check.s3_against_sdpa(df.iloc[4:]).endswith("no pair of ok cells")


def _fake_run(outputs: dict[str, tuple[int, str]], statuses: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    """A stand-in for gpu_check._run: the exit code and output per command's first distinctive word, and for a suite
    run the results.csv it would have left."""

    def run(cmd: list[str], log: Path, env: dict[str, str]) -> tuple[int, str, float]:
        if "pytest" in cmd:
            return (*outputs["pytest"], 1.0)
        suite = Path(cmd[cmd.index("run") + 1]).stem
        out = Path(cmd[cmd.index("--out") + 1])
        profile = cmd[cmd.index("--profile") + 1]
        path = out / suite / profile / "results.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"status": statuses.get(suite, ["ok"])}).to_csv(path, index=False)
        return (*outputs.get(suite, (0, "")), 1.0)

    return run


def test_each_part_passes_or_fails_on_what_its_commands_left(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.setattr(gpu_check, "_run", _fake_run({"pytest": (0, "== 220 passed, 3 skipped in 80.1s ==")}, {}))
    ok, line = gpu_check.part_tests(tmp_path, {})
    assert ok and line.startswith("220 passed, 3 skipped in 80.1s")
    ok, line = gpu_check.part_smoke(tmp_path, {}, "cuda")
    assert ok and line.startswith(f"{len(gpu_check.SUITES)} suites; cells ok {len(gpu_check.SUITES)}")
    monkeypatch.setattr(gpu_check, "_run", _fake_run({"pytest": (1, "== 1 failed, 219 passed in 80s ==")},
                                                     {"accuracy": ["ok", "error"]}))
    ok, line = gpu_check.part_tests(tmp_path, {})
    assert not ok and line.startswith("1 failed, 219 passed")
    ok, line = gpu_check.part_smoke(tmp_path / "second", {}, "cuda")
    assert not ok and line.startswith("failed: accuracy (exit 0, 1 error)")


def test_one_summary_line_per_part_and_the_exit_code(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(gpu_check, "part_tests", lambda out, env: (True, "220 passed"))
    monkeypatch.setattr(gpu_check, "part_smoke", lambda out, env, device: (False, "failed: speed"))
    monkeypatch.setattr(gpu_check, "part_speed", lambda out, env, device: (True, "S3Attention / vanilla_sdpa: ..."))
    assert gpu_check.main(["--out", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu-check: Fake GPU | torch ")
    assert [line.split()[1:3] for line in lines[1:4]] == [["tests", "ok"], ["smoke", "FAIL"], ["speed", "ok"]]
    assert lines[4].startswith("gpu-check: FAILED in ")
    assert gpu_check.main(["--out", str(tmp_path), "--parts", "tests"]) == 0
