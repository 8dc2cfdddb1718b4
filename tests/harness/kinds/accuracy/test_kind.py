"""Accuracy suites: validation (exit 2 with the file and key), expansion into training cells, real-data paths,
resume of a killed training cell through the runner."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harness.core.faults
import harness.kinds.accuracy.cells
from harness.core.errors import SuiteError
from harness.core.files import sha256_file as _sha256
from harness.core.store import Store
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import CliResult

ACC: dict[str, Any] = {
    "name": "acc",
    "kind": "accuracy",
    "axes": {"attention": ["vanilla", "s3attention"], "task": ["listops", "text"], "seed": [0, 1]},
    "data": {"sizes": [32, 16, 16]},
    "train": {"steps": 4, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
              "dim": 16, "layers": 1, "mlp_dim": 32},
    "tasks": {"listops": {"seq_len": 64}, "text": {"seq_len": 64, "attention_config": {"s3*": {"r": 4}}}},
    "profiles": {"smoke": {}, "quick": {}, "paper": {"train": {"lr": 1.0e-3}}},
}


def _doc(**changes: Any) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(ACC)
    doc.update(changes)
    return doc


def test_expansion_resolves_task_settings(write_yaml: Callable[..., Path]) -> None:
    suite = load_suite(write_yaml(ACC), "paper")
    cells = suite.expand("cpu")
    assert len(cells) == 8 and len({c.key for c in cells}) == 8
    text_s3 = next(c for c in cells if c.params == {"attention": "s3attention", "task": "text", "seed": 0})
    assert text_s3.kind == "accuracy" and text_s3.config["r"] == 4 and text_s3.fixed["data"]["seq_len"] == 64
    assert not {"dim", "heads", "max_seq_len"} & set(text_s3.config)  # the shape lives in the train and data settings
    assert text_s3.fixed["train"]["dim"] == 16 and text_s3.fixed["train"]["lr"] == 1.0e-3
    listops_s3 = next(c for c in cells if c.params == {"attention": "s3attention", "task": "listops", "seed": 0})
    assert listops_s3.config["r"] == 8  # the override is the text task's only
    assert text_s3.fixed["data"] == {"dir": None, "seed": 0, "sizes": [32, 16, 16], "task": "text", "seq_len": 64,
                                     "gen": {}}


def test_default_lengths_are_lra(write_yaml: Callable[..., Path]) -> None:
    suite = load_suite(write_yaml(_doc(tasks={})), "smoke")
    lengths = {c.params["task"]: c.fixed["data"]["seq_len"] for c in suite.expand("cpu")}
    assert lengths == {"listops": 2000, "text": 4000}


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"kind": "accurcy"}, "kind"),
        ({"axes": {"attention": ["vanilla"], "task": ["listops"]}}, "axes.seed"),
        ({"axes": {"attention": ["vanilla"], "task": ["lisops"], "seed": [0]}}, "axes.task"),
        ({"axes": {"attention": ["vanilla"], "task": ["listops"], "seed": [-1]}}, "axes.seed"),
        ({"axes": {**ACC["axes"], "seq_len": [64]}}, "axes.seq_len"),
        ({"train": {"stepz": 3}}, "train.stepz"),
        ({"tasks": {"imagenet": {}}}, "tasks.imagenet"),
        ({"tasks": {"text": {"seq_len": 0}}}, "tasks.text.seq_len"),
        ({"tasks": {"text": {"bogus": 1}}}, "tasks.text.bogus"),
        ({"tasks": {"text": {"train": {"lrr": 1}}}}, "tasks.text.train.lrr"),
        ({"tasks": {"text": {"config": {"r": 7}}}}, "tasks.text"),
        ({"tasks": {"text": {"attention_config": {"nomatch*": {}}}}}, "tasks.text.attention_config.nomatch*"),
        ({"data": {"sizes": [10, 0, 5]}}, "data.sizes"),
        ({"data": {"dir": "/nonexistent/lra"}}, "data.dir"),
        ({"data": {"path": "x"}}, "data.path"),
    ],
)
def test_malformed_accuracy_suites(write_yaml: Callable[..., Path], changes: dict[str, Any], key: str) -> None:
    with pytest.raises(SuiteError, match=key.replace("*", r"\*").replace(".", r"\.")):
        load_suite(write_yaml(_doc(**changes)), "smoke")


def test_cli_data_dir_errors(cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tiny_suite: Path,
                             tmp_path: Path) -> None:
    path = write_yaml(ACC, "acc.yaml")
    missing = cli("run", path, "--out", tmp_path / "o", "--device", "cpu", "--data-dir", tmp_path / "nope")
    assert missing.code == 2 and len(missing.err_lines) == 1 and "--data-dir" in missing.err
    speed = cli("run", tiny_suite, "--out", tmp_path / "o", "--device", "cpu", "--data-dir", tmp_path)
    assert speed.code == 2 and "accuracy, approximation and forecasting suites read data" in speed.err
    empty = tmp_path / "empty"
    empty.mkdir()
    # an existing directory without LRA files: refused before any training, naming the file and the format
    result = cli("run", path, "--out", tmp_path / "o", "--device", "cpu", "--data-dir", empty)
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert "expected" in result.err


def test_real_lra_pickles_through_the_suite(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                            tmp_path: Path) -> None:
    data = tmp_path / "lra"
    data.mkdir()
    for split in ("train", "dev", "test"):
        rows = [{"input_ids_0": [1 + (i % 9)] * 20, "label": i % 10} for i in range(24)]
        (data / f"listops.{split}.pickle").write_bytes(pickle.dumps(rows))
    doc = _doc(axes={"attention": ["vanilla"], "task": ["listops"], "seed": [0]})
    result = cli("run", write_yaml(doc), "--profile", "smoke", "--out", tmp_path / "o", "--device", "cpu",
                 "--data-dir", data)
    assert result.code == 0, result.err
    with Store(tmp_path / "o" / "acc" / "smoke" / "results.db") as store:
        df = store.dataframe()
    assert list(df["status"]) == ["ok"]
    # every output names the files and their checksums, and is not marked as generated
    digests = [_sha256(data / f"listops.{split}.pickle") for split in ("dev", "test", "train")]
    sums = ", ".join(f"listops.{split}.pickle sha256:{d}" for split, d in zip(("dev", "test", "train"), digests,
                                                                              strict=True))
    assert df["data_source"].tolist() == [f"files in {data}: {sums}"]  # results.db: every digest in full
    out = tmp_path / "o" / "acc" / "smoke"
    # footers: 16 hex digits of each, marked as such
    short = ", ".join(f"listops.{split}.pickle sha256:{d[:16]}…" for split, d in zip(("dev", "test", "train"), digests,
                                                                                     strict=True))
    for name in ("table1.md", "table1.tex"):
        text = (out / name).read_text()
        assert f"Data: the user's files — files in {data}: {short} (sha256 digests: first 16 hex digits shown" in text
        assert "generated" not in text and digests[0] not in text
    for name in ("table1.csv", "results.csv", "curves.csv", "table1_diff.csv"):  # every CSV: in full
        assert pd.read_csv(out / name)["data_source"].eq(f"files in {data}: {sums}").all(), name


def test_generated_data_is_never_titled_as_lra(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                               tmp_path: Path) -> None:
    doc = _doc(axes={"attention": ["vanilla"], "task": ["text"], "seed": [0]})
    assert cli("run", write_yaml(doc), "--profile", "smoke", "--out", tmp_path, "--device", "cpu").code == 0
    out = tmp_path / "acc" / "smoke"
    source = pd.read_csv(out / "results.csv")["data_source"].iloc[0]
    assert source.startswith("generated stand-in (attnbench text stand-in v") and '"seq_len": 64' in source
    md, tex = (out / "table1.md").read_text(), (out / "table1.tex").read_text()
    assert md.startswith("### Table 1 — acc (generated stand-ins, not LRA)\n")
    for text in (md, tex):
        assert f"Data: generated stand-ins, not LRA — {source}" in text
    assert pd.read_csv(out / "table1.csv")["data_source"].eq(source).all()


def test_killed_training_cell_resumes_from_its_checkpoint(write_yaml: Callable[..., Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _doc(axes={"attention": ["s3attention"], "task": ["text"], "seed": [0]})
    suite = load_suite(write_yaml(doc), "smoke")
    reference = run_suite(suite, out=tmp_path / "ref", progress=False)
    assert reference.statuses == {"ok": 1}

    real = harness.core.faults.point

    def killed(name: str, detail: str = "") -> None:
        if name == "training.step" and detail == "step 3":  # dies in step 3, past the checkpoint at step 2
            raise KeyboardInterrupt("killed in step 3")

    monkeypatch.setattr(harness.core.faults, "point", killed)
    with pytest.raises(KeyboardInterrupt):
        run_suite(suite, out=tmp_path / "run", progress=False)
    assert list((tmp_path / "run" / "acc" / "smoke" / "checkpoints").glob("*.pt"))
    monkeypatch.setattr(harness.core.faults, "point", real)
    run_suite(suite, out=tmp_path / "run", progress=False)

    def final(out: Path) -> tuple[Any, ...]:
        with Store(out / "acc" / "smoke" / "results.db") as store:
            row = store.dataframe().iloc[0]
            curve = store.curves()[["step", "dev_acc", "train_loss"]].to_numpy().tolist()
        return row["test_acc"], row["best_dev_acc"], row["best_step"], curve

    assert final(tmp_path / "run") == final(tmp_path / "ref")
    with Store(tmp_path / "run" / "acc" / "smoke" / "results.db") as store:
        assert store.dataframe().iloc[0]["resumed_from_step"] == 2
    assert not list((tmp_path / "run" / "acc" / "smoke" / "checkpoints").glob("*.pt"))


def test_training_failure_is_a_status(write_yaml: Callable[..., Path], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def diverges(*args: Any, **kwargs: Any) -> Any:
        raise FloatingPointError("non-finite training loss at step 2")

    monkeypatch.setattr(harness.kinds.accuracy.cells, "train_and_evaluate", diverges)
    suite = load_suite(write_yaml(_doc(axes={"attention": ["vanilla"], "task": ["text"], "seed": [0, 1]})), "smoke")
    summary = run_suite(suite, out=tmp_path, progress=False)
    assert summary.statuses == {"nan": 2}
    assert (tmp_path / "acc" / "smoke" / "table1.md").is_file()


def test_isolated_training_cell(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    suite = load_suite(write_yaml(_doc(axes={"attention": ["vanilla"], "task": ["text"], "seed": [0]})), "smoke")
    summary = run_suite(suite, out=tmp_path, isolate=True, timeout_s=300, progress=False)
    assert summary.statuses == {"ok": 1}
    with Store(tmp_path / "acc" / "smoke" / "results.db") as store:
        assert len(store.curves()) == 2  # evaluations at steps 2 and 4 came back from the worker


def test_prepare_loads_each_dataset_once(write_yaml: Callable[..., Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = harness.kinds.accuracy.cells.load_task

    def counting(task: str, **kwargs: Any) -> Any:
        calls.append(task)
        return real(task, **kwargs)

    monkeypatch.setattr(harness.kinds.accuracy.cells, "load_task", counting)
    monkeypatch.setattr(harness.kinds.accuracy.cells, "_LOADED", {})
    suite = load_suite(write_yaml(ACC), "smoke")
    run_suite(suite, out=tmp_path, progress=False)
    assert sorted(calls) == ["listops", "text"]
