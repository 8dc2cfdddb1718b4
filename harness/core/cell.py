"""What every part of the harness shares: a cell (one measurement and its stable key), what a cell needs besides
itself, its result and statuses, its time limit, and how an exception becomes a status.

A cell ends in exactly one status of :data:`STATUSES`. Nothing here knows what kind of suite a cell belongs to:
:mod:`harness.kinds` maps ``Cell.kind`` to the code that builds, runs and reports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import resource
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .errors import EnvironmentFault, first_line
from .schema import STATUSES  # noqa: F401  (re-exported: every status, with the schema)

_OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "failed to allocate")


@dataclass(frozen=True)
class Cell:
    """One measurement: every input that determines the result, and its stable key.

    Attributes:
        suite: the suite's name.
        kind: the suite kind (a key of :data:`harness.kinds.KINDS`).
        params: the axis values, e.g. ``{"attention": "vanilla", "seq_len": 1024, ...}``.
        config: the attention's resolved config fields, except its shape (``dim``, ``heads``, ``max_seq_len``),
            which the cell's own shape gives (axes of a speed cell, the training and data settings of an accuracy
            cell), so that each value lives in one place.
        fixed: the kind's other settings (the train_step model; training and data settings).
        metrics: what to measure.
        timing: timing settings.
        device: "cpu", "cuda" or "cuda:N".
        code: the identity of the code that measures it (:func:`harness.core.provenance.code_identity`).
        threads: the intra-op thread count it is measured with (a different count is a different number).
        setting: the software it is measured with besides that code: torch's version and build, the numerical
            libraries' versions, the malloc settings (:func:`harness.core.provenance.software`).
        data: the SHA-256 of the user's data files it reads (their names and checksums), "" for generated data,
            which ``fixed`` and ``code`` already identify (:attr:`harness.core.suite.SuiteKind.data_identity`).
        skip_reason: why the cell is not run (a skip rule or a capability), decided when the suite is expanded.
        label: one line naming the cell in progress output and fault points.
        key: hash of every input above but ``skip_reason`` and ``label``, which decide whether and how a cell is
            shown, not what it measures.

    A cell's *identity* (:func:`harness.core.current.identity`) is what a table shows of it: its suite, axis values
    and device. Two keys of one identity are one cell measured twice, with other code, data or settings: the newer
    result stands for it (:mod:`harness.core.current`).
    """

    suite: str
    kind: str
    params: dict[str, Any]
    config: dict[str, Any]
    fixed: dict[str, Any]
    metrics: tuple[str, ...]
    timing: dict[str, Any]
    device: str
    code: str = ""
    threads: int = 0
    setting: dict[str, Any] = field(default_factory=dict)
    data: str = ""
    skip_reason: str | None = None
    label: str = field(default="", compare=False)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        payload = {k: v for k, v in self.to_json().items() if k not in ("skip_reason", "label")}
        blob = json.dumps(payload, sort_keys=True, default=str)
        object.__setattr__(self, "key", hashlib.sha256(blob.encode()).hexdigest()[:20])

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cell:
        data = dict(data)
        data["metrics"] = tuple(data["metrics"])
        return cls(**data)


@dataclass(frozen=True)
class Context:
    """What a cell needs besides itself: where its checkpoints and cached data go, limits, the GEMM peak."""

    workdir: Path
    cache_dir: Path | None = None
    gemm_peak_gflops: float | None = None
    timeout_s: float | None = None
    calibration_ms: float | None = None  # the reference kernel at the run's start (harness.measure.quiet)
    fresh: bool = False  # --fresh: redo cells that have results, resuming nothing a killed attempt left


@dataclass
class CellResult:
    """A cell's final status, its one-line message, its metrics, (training cells) its learning curve and (timed
    cells) its raw timing samples, ms per call, one per round."""

    status: str
    message: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    curve: list[dict[str, float]] | None = None
    samples: list[float] | None = None


class CellTimeout(Exception):
    """Raised inside a cell when its time limit fires."""


class NonFinite(Exception):
    """The workload produced NaN or Inf."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise CellTimeout in the main thread after ``seconds`` (SIGALRM; torch ops return to Python often)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: object) -> None:
        raise CellTimeout(f"cell exceeded its {seconds:g} s time limit")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _is_unsupported(exc: BaseException) -> bool:
    """``exc`` is the zoo's ``UnsupportedError``. Looked up where already imported, not imported here: the zoo's
    import registers every variant, which a process that never built one (the CLI's checks) should not pay for."""
    registry = sys.modules.get("attentions.registry")
    return registry is not None and isinstance(exc, registry.UnsupportedError)


def classify_exception(exc: BaseException) -> CellResult:
    """Map an exception raised by a cell to its status and a one-line message.

    Raises:
        EnvironmentFault: ``exc`` is the environment's (a full disk, an I/O error, ...; :meth:`EnvironmentFault.of`),
            which no cell result may record: it stops the run instead.
    """
    fault = EnvironmentFault.of(exc)
    if fault is not None:
        raise fault from exc
    first = first_line(exc)
    message = f"{type(exc).__name__}: {first}"
    if isinstance(exc, CellTimeout):
        return CellResult("timeout", first)
    if _is_unsupported(exc):  # the variant says it cannot compute this call here
        return CellResult("unsupported", first)
    if isinstance(exc, NonFinite | FloatingPointError):
        return CellResult("nan", first)
    if isinstance(exc, torch.OutOfMemoryError | MemoryError) or (
        isinstance(exc, RuntimeError) and any(m in first.lower() for m in _OOM_MARKERS)
    ):
        return CellResult("oom", message)
    return CellResult("error", message)


@contextlib.contextmanager
def cpu_memory_cap(fraction: float = 0.9) -> Iterator[None]:
    """Cap this process's address space so that what it may touch from now on fits ``fraction`` of available RAM.

    Without a cap, an n^2 cell that does not fit makes Linux's OOM killer end the whole sweep; with it the
    allocation fails inside torch ("can't allocate memory") and the cell is recorded as ``oom``.

    The cap is on address space, which memory handed back with ``malloc_trim`` (:func:`~harness.core.tunables.
    release_freed_memory`: its pages released, its addresses kept) does not leave: the heap can be touched again up to
    its mapped size without growing the address space. So the room granted for growth is ``fraction`` of available
    RAM less that mapped-but-not-resident part (VmSize − VmRSS), never below nothing: whatever the process touches,
    reused or new, stays within its resident memory now plus ``fraction`` of what is available.
    """
    try:
        with open("/proc/self/status") as f:
            status = {line.split(":")[0]: line.split()[1] for line in f if line.startswith(("VmSize:", "VmRSS:"))}
        vm_kb, rss_kb = int(status["VmSize"]), int(status["VmRSS"])
        with open("/proc/meminfo") as f:
            avail_kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, StopIteration, ValueError, KeyError):  # not Linux: run without a cap
        yield
        return
    growth_kb = max(0, int(avail_kb * fraction) - (vm_kb - rss_kb))
    cap = (vm_kb + growth_kb) * 1024
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def memory_cap(device: torch.device | str) -> contextlib.AbstractContextManager[None]:
    """:func:`cpu_memory_cap` on the CPU; nothing on CUDA (its allocator reports OOM itself)."""
    return cpu_memory_cap() if torch.device(device).type == "cpu" else contextlib.nullcontext()
