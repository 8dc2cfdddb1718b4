"""Tests of ``--executor ray`` (harness.run.ray_executor): same results as the local executor, resume, a worker that
dies, ``--timeout``, the exit-2 errors, and an embedded start that stays on loopback and writes no token.

Ray starts once for the module (through the executor's own ``start_ray``, with HOME pointing at a temporary
directory); the runs reuse it, as they reuse a cluster that is already initialised.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.core.errors import UserError
from harness.core.store import Store
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult, tiny_doc

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")

ONE_CELL = ["--only", "vanilla", "--set", "seq_len=16", "--set", "mode=fwd"]


@pytest.fixture(scope="module")
def ray_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Ray started embedded by the executor for this module, with HOME in a temporary directory."""
    ray = pytest.importorskip("ray")
    from harness.run.ray_executor import start_ray

    if ray.is_initialized():
        ray.shutdown()
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED"):  # start_ray sets them; undo after the module
            mp.delenv(name, raising=False)
        assert start_ray(num_cpus=2)
        try:
            yield home
        finally:
            ray.shutdown()


def _frame(out: Path, suite: str = "tiny", profile: str = "quick") -> pd.DataFrame:
    with Store(out / suite / profile / "results.db") as store:
        return store.dataframe().set_index("key").sort_index()


def _run(cli: Callable[..., CliResult], suite: Path, out: Path, *flags: object, code: int = 0) -> CliResult:
    result = cli("run", suite, "--out", out, "--device", "cpu", "--executor", "ray", *flags)
    assert result.code == code, result.err
    return result


def test_ray_gives_the_cells_of_the_local_executor(
    ray_home: Path, cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path
) -> None:
    local = cli("run", tiny_suite, "--out", tmp_path / "local", "--device", "cpu")
    assert local.code == 0, local.err
    _run(cli, tiny_suite, tmp_path / "ray")
    a, b = _frame(tmp_path / "local"), _frame(tmp_path / "ray")
    assert list(a.index) == list(b.index)
    assert (b["status"] == "ok").all(), b["message"].tolist()
    assert (a["status"] == b["status"]).all()
    # allocator-exact memory and counted FLOPs do not depend on the executor
    assert (a["peak_mem_bytes"] == b["peak_mem_bytes"]).all() and (a["gflops"] == b["gflops"]).all()
    assert (b["threads"] == 1).all()  # the driver's thread count, applied in the workers
    directory = tmp_path / "ray" / "tiny" / "quick"
    assert (directory / "results.csv").is_file() and list(directory.glob("table4_*.md"))
    with Store(directory / "results.db") as store:
        env = store.latest_env()
    assert env["executor"] == "ray" and env["ray_address"] == "embedded" and env["ray_version"]


def test_resume_and_fresh(ray_home: Path, cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _run(cli, tiny_suite, out, "--only", "vanilla")
    assert "0 already done, ran: ok=4" in first.out
    before = _frame(out)
    again = _run(cli, tiny_suite, out, "--only", "vanilla")
    assert "4 already done, ran: nothing to run" in again.out
    assert (_frame(out)["finished_utc"] == before["finished_utc"]).all()
    fresh = _run(cli, tiny_suite, out, "--only", "vanilla", "--fresh")
    assert "0 already done, ran: ok=4" in fresh.out
    after = _frame(out)
    assert list(after.index) == list(before.index)
    assert (after["finished_utc"] > before["finished_utc"]).all()


@pytest.mark.parametrize("grace", [None, -1.5])
def test_timeout(ray_home: Path, cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grace: float | None) -> None:
    """A cell over --timeout is a ``timeout``: stopped by its own limit, or (grace < 0: the driver's deadline
    comes first, as for a cell stuck in native code) by cancelling the task."""
    import harness.run.ray_executor

    if grace is not None:
        monkeypatch.setattr(harness.run.ray_executor, "KILL_GRACE_S", grace)
    slow = write_yaml(tiny_doc(timing={"min_run_time_s": 30.0, "min_repeats": 2, "warmup": 1}), "slow.yaml")
    result = _run(cli, slow, tmp_path, "--timeout", "2", *ONE_CELL, code=1)  # no cell ok: exit 1
    assert "ran: timeout=1" in result.out
    row = _frame(tmp_path).iloc[0]
    assert row["status"] == "timeout" and "2 s time limit" in row["message"]
    assert ("Ray task cancelled" in row["message"]) == (grace is not None)


# a segfaulting worker outside Ray is in tests/harness/test_faults.py; here one start of Ray's worker costs seconds
@pytest.mark.parametrize("action", ["exit", pytest.param("segv", marks=pytest.mark.slow)])
def test_a_worker_that_dies_is_an_error_cell(
    ray_home: Path, cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, action: str,
) -> None:
    victim = "s3attention n=32 b=1 fwd+bwd"
    monkeypatch.setenv("ATTNBENCH_FAULT", f"measure.cell:1:{action}:{victim}")
    result = _run(cli, tiny_suite, tmp_path, "--only", "s3attention", "--set", "seq_len=32")
    # each group gets the baseline (vanilla) beside it; the group whose worker died is run again cell by cell, so
    # only the cell that killed it fails
    assert "ran: error=1, ok=3 (incl. 2 baseline cells timed again for paired ratios)" in result.out
    df = _frame(tmp_path)
    df = df[df["attention"] == "s3attention"]
    dead = df[df["status"] == "error"]
    assert len(dead) == 1 and dead["attention"].iloc[0] == "s3attention" and dead["mode"].iloc[0] == "fwd+bwd"
    message = dead["message"].iloc[0]
    assert message.startswith("ray task died:") and "died" in message.removeprefix("ray task died:"), message
    assert "\n" not in message


def test_embedded_ray_is_loopback_only_and_writes_no_token(ray_home: Path) -> None:
    import ray

    # Ray 2.x writes ~/.ray/auth_token for a new local cluster unless RAY_AUTH_MODE=disabled
    assert not (ray_home / ".ray" / "auth_token").exists()
    assert not (ray_home / ".ray").exists()
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")


def test_embedded_workers_run_at_normal_priority(ray_home: Path) -> None:
    """Ray's default worker nice 15 lets any other load starve a cell (and its timings)."""
    import ray

    assert ray.get(ray.remote(lambda: os.nice(0)).remote()) == 0


# ---------------------------------------------------------------------------------------------------
# Exit-2 errors (no Ray needed)


def test_missing_ray_is_an_exit_2_error_with_the_install_hint(
    cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = cli("run", tiny_suite, "--out", tmp_path, "--executor", "ray")
    assert result.code == 2 and len(result.err_lines) == 1
    assert "attnbench[ray]" in result.err and "pip install ray" in result.err
    assert not (tmp_path / "tiny").exists()


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--isolate", "--executor", "ray"], "--isolate"),
        (["--address", "127.0.0.1:6379"], "--executor ray"),
        (["--cpus-per-task", "2"], "--executor ray"),
        (["--executor", "ray", "--cpus-per-task", "0"], "--cpus-per-task 0"),
        (["--executor", "ray", "--cpus-per-task", "1", "--threads", "2"], "fewer CPUs than the 2 intra-op threads"),
        (["--executor", "dask"], "invalid choice"),
    ],
)
def test_executor_flag_errors(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path,
                              flags: list[str], needle: str) -> None:
    result = cli("run", tiny_suite, "--out", tmp_path, *flags)
    assert result.code == 2 and len(result.err_lines) == 1 and needle in result.err, result.err


def test_an_address_where_nothing_listens_is_an_exit_2_error(
    cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    result = cli("run", tiny_suite, "--out", tmp_path, "--executor", "ray", "--address", "127.0.0.1:1")
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert "--address 127.0.0.1:1: nothing answers there" in result.err and "ray start --head" in result.err
    assert not (tmp_path / "tiny").exists()


@pytest.mark.parametrize(("flags", "needle"), [
    pytest.param(["--address", "auto"], "--address auto: no Ray cluster found on this machine", id="auto-no-cluster"),
    pytest.param(["--address", "ray://127.0.0.1:1"], "--address ray://127.0.0.1:1: ", id="ray-client-address"),
    pytest.param(["--address", "http://127.0.0.1:8265"], "not a Ray address", id="not-an-address"),
    pytest.param(["--cpus-per-task", str((os.cpu_count() or 1) + 2), "--threads", "1"],
                 f"more than the {os.cpu_count()} CPUs of this machine", id="cpus-per-task-beyond-this-machine"),
])
def test_ray_refusals_come_before_anything_is_written(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                                      needle: str) -> None:
    """Refused in a second, one line, no store and no run row: not after Ray started and the run began."""
    pytest.importorskip("ray")
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # `auto` finds no cluster, whatever else runs on this machine
    monkeypatch.setattr(services, "find_gcs_addresses", functools.lru_cache(lambda: []))  # Ray clears its cache
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir=None: None)
    result = cli("run", tiny_suite, "--out", tmp_path, "--device", "cpu", "--executor", "ray", *ONE_CELL, *flags)
    assert result.code == 2 and len(result.err_lines) == 1 and needle in result.err, result.err
    assert not (tmp_path / "tiny").exists()


def test_run_suite_refuses_isolate_with_ray(tiny_suite: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--isolate"):
        run_suite(load_suite(tiny_suite), out=tmp_path, executor="ray", isolate=True, progress=False)


def test_ray_is_imported_only_inside_functions() -> None:
    """Ray is an optional extra: no module of the harness imports it at module level."""
    for path in sorted((REPO_ROOT / "harness").glob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module-level statements only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "ray" or n.startswith("ray.") for n in names), f"{path.name}: {names}"


@pytest.mark.slow
def test_embedded_run_from_the_command_line(tiny_suite: Path, tmp_path: Path) -> None:
    """A real ``attnbench run --executor ray`` process: starts Ray on loopback, shuts it down, leaves no token."""
    pytest.importorskip("ray")
    home = tmp_path / "home"
    home.mkdir()
    env: dict[str, Any] = {**os.environ, "HOME": str(home), "OMP_NUM_THREADS": "1"}
    for name in ("RAY_AUTH_MODE", "RAY_ADDRESS"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(tiny_suite), "--out", str(tmp_path / "out"),
         "--device", "cpu", "--threads", "1", "--executor", "ray", *ONE_CELL],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ran: ok=1" in proc.stdout
    assert not (home / ".ray" / "auth_token").exists()
