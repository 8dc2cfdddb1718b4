"""Shared fixtures of the pipeline tests: a tiny valid suite, a YAML writer and a CLI runner.

Cells here are deliberately tiny (seq_len 16-32, batch 1, dim 16) and timed for milliseconds, so that a whole
sweep takes about a second on a loaded 2-core CPU; no test asserts a speed.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

import attentions
import harness.measure.group
import harness.run.runner
from attentions import registry
from harness.kinds import KINDS

REPO_ROOT = Path(__file__).resolve().parents[1]

TINY_TIMING: dict[str, Any] = {"min_run_time_s": 0.005, "min_repeats": 2, "warmup": 1}

# The tiny suite as data; tests derive malformed variants from a deep copy of it (see ``tiny_doc``).
TINY_SUITE: dict[str, Any] = {
    "name": "tiny",
    "description": "two attentions, two lengths, two modes",
    "axes": {
        "attention": ["vanilla", "s3attention"],
        "seq_len": [16, 32],
        "batch_size": [1],
        "heads": [2],
        "dim": [16],
        "mode": ["fwd", "fwd+bwd"],
        "dtype": ["float32"],
    },
    "metrics": ["time", "memory", "flops"],
    "timing": dict(TINY_TIMING),
    "report": {"baseline": "vanilla", "slope_min_seq_len": 16},
    "profiles": {"smoke": {}, "quick": {}, "paper": {"axes": {"seq_len": [64]}}},
}


def _work_tree_status() -> set[str] | None:
    """The files of the checkout that git does not know and does not ignore (what a stray ``--out`` or cache leaves),
    or None outside a git checkout. (Edits of tracked files are left to the developer's own ``git status``: a file
    being edited while the tests run would otherwise count.)"""
    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {line for line in proc.stdout.splitlines() if line.startswith("??")} if proc.returncode == 0 else None


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STATUS_BEFORE] = _work_tree_status()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The tests write under their temporary folders only: a file they leave in the work tree (a relative --out, a
    cache) fails the run, naming it. What was already untracked before the run is not counted."""
    before = session.config.stash.get(_STATUS_BEFORE, None)
    after = _work_tree_status()
    if before is None or after is None:
        return
    new = sorted(after - before)
    if new:
        session.config.get_terminal_writer().line(
            f"the test run left {len(new)} new file(s) in the work tree: {', '.join(new[:5])}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STATUS_BEFORE = pytest.StashKey[set[str] | None]()


@pytest.fixture(scope="session", autouse=True)
def _inductor_workers_end_with_the_session() -> Iterator[None]:
    """Shut Inductor's pool of compile worker processes down when the session ends: on a 16-core GPU machine pytest
    otherwise waited over 100 s after the last compile test for the pool to go (torch 2.11)."""
    yield
    module = sys.modules.get("torch._inductor.async_compile")
    if module is not None and hasattr(module, "shutdown_compile_workers"):
        module.shutdown_compile_workers()


def tiny_doc(**top: Any) -> dict[str, Any]:
    """A deep copy of the tiny suite with top-level keys replaced (``axes`` entries are merged per axis)."""
    doc = copy.deepcopy(TINY_SUITE)
    for key, value in top.items():
        if key == "axes":
            doc["axes"] = {**doc["axes"], **value}
        else:
            doc[key] = value
    return doc


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[..., Path]:
    """``write_yaml(text_or_doc, name="suite.yaml")`` writes YAML text (or dumps a document) into tmp_path."""

    def write(content: str | dict[str, Any] | list[Any], name: str = "suite.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else dump(content))
        return path

    return write


@pytest.fixture
def tiny_suite(write_yaml: Callable[..., Path]) -> Path:
    """Path of a valid suite: vanilla and s3attention, seq_len 16 and 32, fwd and fwd+bwd (8 cells)."""
    return write_yaml(TINY_SUITE, "tiny.yaml")


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """``cli("run", path, "--out", dir)``: call ``harness.cli.main`` in-process and capture its output."""
    from harness.cli import main

    def run(*argv: object) -> CliResult:
        capsys.readouterr()  # drop anything printed before
        # a run points TMPDIR and the caches under its --out: the test process gets its own back afterwards
        environ, temp = dict(os.environ), tempfile.tempdir
        try:
            code = main([str(a) for a in argv])
        finally:
            os.environ.clear()
            os.environ.update(environ)
            tempfile.tempdir = temp
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def fast_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the ~1 s GEMM peak and bandwidth measurements a run does before its first timed cell."""
    monkeypatch.setattr(harness.measure.group, "measure_gemm_peak_gflops", lambda device: 100.0)
    monkeypatch.setattr(harness.measure.group, "measure_memory_bandwidth_gbs", lambda device: 10.0)


def kill_in_step(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Make a training loop (accuracy or forecasting) die in ``step``, after its optimiser step, through its fault
    point, as a killed process would; ``monkeypatch.undo()`` lets the next run live."""
    import harness.core.faults

    def kill(name: str, detail: str = "") -> None:
        if name == "training.step" and detail == f"step {step}":
            raise KeyboardInterrupt(f"killed in step {step}")

    monkeypatch.setattr(harness.core.faults, "point", kill)


def patch_kind(monkeypatch: pytest.MonkeyPatch, kind: str, **changes: Any) -> None:
    """Replace parts of a suite kind (e.g. ``run=`` the function that runs one cell) for one test.

    The runner, the recorder and the workers look a kind up in ``harness.kinds.KINDS`` when they use it, so the
    replacement is seen everywhere in this process.
    """
    if "run" in changes:  # a replaced single-cell run replaces the kind's group run too
        changes.setdefault("run_group", None)
    monkeypatch.setitem(KINDS, kind, dataclasses.replace(KINDS[kind], **changes))


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Measure on one intra-op thread (also in --isolate workers).

    The test machine is small and shared: two spinning intra-op threads competing with other processes make a
    tiny cell take seconds instead of milliseconds. Pipeline tests need results, not representative speed.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(before)


class _Passthrough(nn.Module):
    """Identity mixer for throwaway registrations."""

    def __init__(self, cfg: attentions.AttentionConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return x


_throwaway_ids = itertools.count()


@pytest.fixture
def throwaway(request: pytest.FixtureRequest) -> Callable[..., attentions.AttentionSpec]:
    """Register a passthrough variant with the given capabilities under a unique test-only name.

    The finalizer removes every name it registered, so nothing leaks into registry-parametrised tests.
    """
    names: list[str] = []

    def unregister() -> None:
        for name in names:
            registry._REGISTRY.pop(name, None)

    request.addfinalizer(unregister)

    def make(**caps: object) -> attentions.AttentionSpec:
        name = f"_throwaway_{next(_throwaway_ids)}"
        names.append(name)
        caps.setdefault("causal_note", "a throwaway test variant")
        attentions.register(
            name, attentions.AttentionConfig, attentions.Capabilities(**caps), paper="https://example.org/throwaway"
        )(_Passthrough)
        return attentions.spec(name)

    return make
