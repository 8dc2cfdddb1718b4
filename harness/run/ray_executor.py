"""``--executor ray``: each group of cells is one Ray task, on this machine (embedded Ray) or on an existing cluster.

The driver (the ``attnbench run`` process) alone writes the store: it submits cells as tasks, waits for them
and records every result through the runner's recorder, so resume, ``--fresh`` and the reports behave exactly
as with the local executor. A task:

- runs one group of cells (:func:`harness.run.execute.groups`); if its worker dies or hangs, the group's cells
  are queued again one per task, so that the failure stays in its cell;
- reserves ``num_gpus=1`` for a CUDA group (a GPU to itself, so timings stay clean) and ``cpus_per_task`` CPUs
  for a CPU group (default: a whole node, so on one machine speed groups run one at a time), and runs with the
  cells' own thread count;
- starts its worker with ``GLIBC_TUNABLES`` (CPU cells: the timing malloc settings, which glibc reads only at
  process start; Ray's ``runtime_env`` sets them in the worker's initial environment), ``OMP_NUM_THREADS`` and
  the driver's ``ATTNBENCH_FAULT``, if any;
- is never retried (``max_retries=0``): a worker crash, a lost node or a lost object becomes an ``error`` cell
  whose message says how the task died, and the sweep goes on;
- yields a "started" marker before measuring, so ``--timeout`` counts from when the cell starts, not from when
  it was queued. The cell's own in-process limit fires first (as with the local executor); a task still
  running ``KILL_GRACE_S`` later (stuck in native code) is cancelled with ``force=True``, killing its worker.

Ray is an optional extra (``pip install 'attnbench[ray]'``) and is imported only inside these functions.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ..core.cell import Cell, CellResult, Context
from ..core.errors import EnvironmentFault, UserError, first_line
from ..measure.timing import GLIBC_TUNABLES_TIMING
from .execute import Recorder, execute_group
from .worker import FAULT

INSTALL_HINT = "install it with `pip install 'attnbench[ray]'` (in this checkout: `.venv/bin/pip install ray`)"
KILL_GRACE_S = 3.0  # after --timeout, how long a started task may take to stop by itself before it is killed
_STARTED = "started"

# Embedded Ray: loopback only, no token file under ~/.ray, no usage reporting. RAY_AUTH_MODE=disabled is safe
# only because nothing listens beyond 127.0.0.1; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is what makes Ray (2.x on
# Linux) bind and advertise the loopback address (a plain _node_ip_address="127.0.0.1" is resolved to the
# machine's address and its servers listen on every interface).
# RAY_worker_niceness=0: Ray runs workers at nice 15 by default, so on a machine with any other load a cell's
# worker is starved (importing torch alone takes many times longer beside a training run) and its timings
# measure the scheduler. A benchmark worker is the point of the run; it gets normal priority, like the local
# executor. On an existing cluster (--address) the cluster's own setting applies: start it with the same variable.
_LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_EMBEDDED_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", _LOOPBACK_VAR: "0",
                 "RAY_worker_niceness": "0"}


def default_cpus_per_task() -> int:
    """CPUs a CPU group reserves by default: a whole node (the driver's core count; the cluster is of one kind of
    node), so speed groups are timed one at a time per node while the runs keep a core free for everything else."""
    return os.cpu_count() or 1


def require_ray() -> ModuleType:
    """Import ray, or raise the exit-2 error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray: Ray is not installed; {INSTALL_HINT}") from None
    return ray


def describe(address: str | None, cpus_per_task: int | None) -> dict[str, Any]:
    """The run-environment fields of this executor."""
    ray = require_ray()
    return {"executor": "ray", "ray_version": ray.__version__, "ray_address": address or "embedded",
            "ray_cpus_per_task": cpus_per_task or default_cpus_per_task()}


def start_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to the cluster at ``address``, or start Ray embedded on this machine; reuse a running one.

    Returns whether this call started (or connected) Ray, i.e. whether the caller should shut it down.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False
    if address:
        check_address(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"--address {address}: cannot connect to a Ray cluster there ({first_line(exc, 300)}); "
                            "start one with `ray start --head` and pass the address it prints") from None
        return True
    from ray._private import ray_constants

    loopback_was = os.environ.get(_LOOPBACK_VAR), ray_constants.ENABLE_RAY_CLUSTER
    for key, value in _EMBEDDED_ENV.items():
        if key != "RAY_AUTH_MODE" or key not in os.environ:  # an explicit RAY_AUTH_MODE=token is respected
            os.environ[key] = value
    ray_constants.ENABLE_RAY_CLUSTER = False  # the driver reads it at call time, Ray's processes the variable
    try:
        # "local": a new instance, never RAY_ADDRESS or a cluster already running on this machine
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                 _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False)
    finally:
        # Only the loopback switch is undone (a later --address in this process must see the real address);
        # the GCS, raylet and workers already started with it. Auth and usage settings stay for the process.
        if loopback_was[0] is None:
            del os.environ[_LOOPBACK_VAR]
        else:
            os.environ[_LOOPBACK_VAR] = loopback_was[0]
        ray_constants.ENABLE_RAY_CLUSTER = loopback_was[1]
    _start_watchdog()
    return True


#: The watchdog's program: wait for the driver to die (its end of the pipe closes), then kill the embedded Ray's
#: processes that are still the ones started (a pid's start time, field 22 of /proc/PID/stat, guards against reuse).
_WATCHDOG_CODE = """
import os, signal, sys
sys.stdin.buffer.read()
for item in sys.argv[1:]:
    pid, start = item.split(":")
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[19] == start:
                os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError):
        pass
"""
_watchdog: subprocess.Popen | None = None


def _start_watchdog() -> None:
    """Ray's dashboard and runtime-env agents outlive a driver killed with SIGKILL by minutes (they notice the raylet
    is gone, then block publishing the error to the dead GCS): a watchdog process kills what embedded Ray started as
    soon as the driver dies. On Linux only (it reads /proc); a normal end stops it (:func:`stop_watchdog`)."""
    global _watchdog
    if not Path("/proc/self/stat").exists():
        return
    children: dict[int, list[tuple[int, str]]] = {}  # ppid -> (pid, start time) of every process
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
            children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    pids, parents = [], [os.getpid()]
    while parents:  # every descendant of this process
        for pid, start in children.get(parents.pop(), []):
            pids.append(f"{pid}:{start}")
            parents.append(pid)
    # its own session: a Ctrl-C of the driver's terminal must not end it before the driver
    _watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG_CODE, *pids], stdin=subprocess.PIPE,
                                 start_new_session=True)
    atexit.register(stop_watchdog)


def stop_watchdog() -> None:
    """Stop the watchdog without letting it kill anything (Ray was shut down in order)."""
    global _watchdog
    if _watchdog is not None:
        _watchdog.kill()
        _watchdog.wait()
        _watchdog.stdin.close()
        _watchdog = None


#: What an HTTP/2 client sends first (RFC 9113 §3.4): the preface and an empty SETTINGS frame. Ray's GCS, which
#: ``--address`` names, is a gRPC server, and every HTTP/2 server answers with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HANDSHAKE_S = 1.0  # a GCS answers in milliseconds (across a network, well under a second); ray.init: minutes


def check_address(address: str) -> None:
    """Refuse (exit 2, within :data:`HANDSHAKE_S` per step) an ``--address`` where no Ray cluster answers, before
    anything is written: ``HOST:PORT`` (the GCS) or ``ray://HOST:PORT`` (a Ray Client server, which needs Ray's
    client extra) where nobody listens, or something that is not a gRPC server does; ``auto`` where Ray finds no
    cluster on this machine; any other form.
    ``ray.init`` would retry for minutes, or fail only once the run's store exists."""
    hint = "start a cluster with `ray start --head` and pass the address it prints"
    if address.startswith("ray://"):
        try:  # Ray's own check of its client extra (a private helper: an older or newer Ray may lack it)
            from ray._private.utils import get_ray_client_dependency_error
        except ImportError:
            def get_ray_client_dependency_error() -> str | None:
                return None

        if get_ray_client_dependency_error() is not None:
            raise UserError(f"--address {address}: a Ray Client address needs `pip install 'ray[client]'`; install "
                            f"it, or give the cluster's HOST:PORT (the address `ray start --head` prints)")
    target = _auto_address(hint) if address == "auto" else address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if "://" in target or not host or not port.isdigit():
        raise UserError(f"--address {address}: not a Ray address; give HOST:PORT (the address `ray start --head` "
                        f"prints), ray://HOST:PORT or auto, or leave --address out to run Ray on this machine")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=HANDSHAKE_S) as conn:
            conn.sendall(_HTTP2_PREFACE)
            reply = conn.recv(9)  # a frame header: length (3 bytes), type, flags, stream id (4)
    except TimeoutError:
        raise UserError(f"--address {address}: something listens there but does not answer as a Ray cluster "
                        f"(no reply in {HANDSHAKE_S:g} s); {hint}") from None
    except OSError as exc:
        raise UserError(f"--address {address}: nothing answers there ({exc.strerror or exc}); {hint}") from None
    if len(reply) < 4 or reply[3] != 4:  # frame type 4 = SETTINGS
        raise UserError(f"--address {address}: what answers there is not a Ray cluster (not a gRPC server: it "
                        f"replied {reply[:9]!r}); {hint}")


def _auto_address(hint: str) -> str:
    """The HOST:PORT ``--address auto`` means, found as ``ray.init`` finds it (``RAY_ADDRESS``, the cluster ``ray
    start`` recorded, a GCS process on this machine), or the exit-2 error saying there is none."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        return canonicalize_bootstrap_address_or_die("auto")
    except (ConnectionError, ValueError) as exc:
        raise UserError(f"--address auto: no Ray cluster found on this machine ({first_line(exc, 200)}); "
                        f"{hint}") from None


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[ModuleType]:
    """Ray, started or connected for the block; shut down afterwards only if this block started it."""
    ray = require_ray()
    started = start_ray(address)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
            stop_watchdog()


def _cell_task(cells_json: list[dict[str, Any]], context: dict[str, Any]) -> Iterator[Any]:
    """The Ray task body (a streaming generator): yields ``_STARTED``, then ``asdict(CellResult)`` of each cell."""
    torch.set_num_threads(context["threads"])
    cells = [Cell.from_json(c) for c in cells_json]
    for cell in cells:
        if cell.device.startswith("cuda"):
            # Ray made the task's one GPU the only visible one. The key (computed above) stays the driver's, so an
            # accuracy cell's checkpoint keeps its name.
            object.__setattr__(cell, "device", "cuda")
    ctx = Context(Path(context["workdir"]), Path(context["cache_dir"]) if context["cache_dir"] else None,
                  context["gemm_peak_gflops"], context["timeout_s"], context["calibration_ms"])
    yield _STARTED
    try:
        yield [dataclasses.asdict(result) for result in execute_group(cells, ctx)]
    except EnvironmentFault as exc:  # the machine's, not the cells': the driver stops with it (nothing stored)
        yield {FAULT: str(exc)}


@dataclasses.dataclass
class _Task:
    cells: list[Cell]
    deadline: float | None = None  # set when the task reports that it started


def _death(ray: ModuleType, exc: BaseException) -> CellResult:
    """The ``error`` result of a task that raised or whose worker, node or object was lost."""
    cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
    if cause is not None:  # an exception outside execute_group (e.g. attnbench missing on that node)
        return CellResult("error", f"ray task failed: {type(cause).__name__}: {first_line(cause, 300)}")
    return CellResult("error", f"ray task died: {type(exc).__name__}: {first_line(exc, 300)}".rstrip(": "))


def _slots(ray: ModuleType, gpu: bool, cpus_per_task: int) -> int:
    """How many tasks the cluster runs at once; an exit-2 error if no node can run one."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", True)]
    kind, need = ("GPU", 1) if gpu else ("CPU", cpus_per_task)
    largest = max((n.get(kind, 0) for n in nodes), default=0)
    if largest < need:
        what = "has no GPU" if gpu else f"has {cpus_per_task} CPUs (largest: {largest:g})"
        fix = "run on a cluster with GPU nodes" if gpu else "lower --cpus-per-task or --threads"
        raise UserError(f"--executor ray: no node of the Ray cluster {what}; {fix}")
    return sum(int(n.get(kind, 0) // need) for n in nodes)


def run_groups(
    batches: list[list[Cell]],
    ctx: Context,
    record: Recorder,
    *,
    address: str | None = None,
    cpus_per_task: int | None = None,
) -> None:
    """Run each group of cells (:func:`harness.run.execute.groups`) as one Ray task and ``record`` each result as
    its group finishes (in completion order).

    ``record.starting(cell)`` runs when a group is submitted. Groups of skipped cells never reach a worker: they
    are recorded here, as the local executor records them.
    """
    threads = torch.get_num_threads()
    cpus = cpus_per_task or default_cpus_per_task()
    queue = []
    for cells in batches:
        if all(cell.skip_reason for cell in cells):
            for cell, result in zip(cells, execute_group(cells, ctx), strict=True):
                record.starting(cell)
                record(cell, result)
            record.group_done()
        else:
            queue.append(cells)
    if not queue:
        return
    context = {
        "workdir": str(Path(ctx.workdir).resolve()),
        "cache_dir": None if ctx.cache_dir is None else str(Path(ctx.cache_dir).resolve()),
        "gemm_peak_gflops": ctx.gemm_peak_gflops,
        "timeout_s": ctx.timeout_s,
        "calibration_ms": ctx.calibration_ms,
    }
    with ray_session(address) as ray:
        gpu = queue[0][0].device.startswith("cuda")
        limit = max(1, 2 * _slots(ray, gpu, cpus))
        # A task runs with the cells' own thread count (part of their keys); on CPU the CLI refuses a reservation
        # smaller than it. A CUDA task holds its GPU and one CPU (or --cpus-per-task).
        context["threads"] = threads
        env_vars = {"OMP_NUM_THREADS": str(context["threads"])}
        if not gpu:
            env_vars["GLIBC_TUNABLES"] = GLIBC_TUNABLES_TIMING
        if os.environ.get("ATTNBENCH_FAULT"):
            env_vars["ATTNBENCH_FAULT"] = os.environ["ATTNBENCH_FAULT"]
        task = ray.remote(_cell_task).options(
            num_cpus=(cpus_per_task or 1) if gpu else cpus, num_gpus=1 if gpu else 0, max_retries=0,
            retry_exceptions=False, num_returns="streaming", runtime_env={"env_vars": env_vars},
        )
        _schedule(ray, task, queue, context, record, limit, ctx.timeout_s)


def _schedule(ray: ModuleType, task: Any, queue: list[list[Cell]], context: dict[str, Any], record: Recorder,
              limit: int, timeout_s: float | None) -> None:
    """Keep up to ``limit`` tasks in flight, record each group's results as they arrive, cancel tasks past their
    deadline (the group's time limit: ``timeout_s`` per cell)."""
    pending: dict[Any, _Task] = {}
    queue = queue[::-1]  # popped from the end: submitted in the given order
    while queue or pending:
        while queue and len(pending) < limit:
            cells = queue.pop()
            for cell in cells:
                record.starting(cell)
            pending[task.remote([c.to_json() for c in cells], context)] = _Task(cells)
        deadlines = [t.deadline for t in pending.values() if t.deadline is not None]
        wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
        for gen in ready:
            entry = pending[gen]
            try:
                value = ray.get(next(gen))
            except StopIteration:
                results = [CellResult("error", "ray task ended without a result") for _ in entry.cells]
            except ray.exceptions.RayError as exc:
                if len(entry.cells) > 1:  # the group died with one of its cells: run each alone (see worker.py)
                    del pending[gen]
                    queue.extend([cell] for cell in reversed(entry.cells))
                    continue
                results = [_death(ray, exc)]
            else:
                if value == _STARTED:
                    if timeout_s:
                        entry.deadline = time.monotonic() + timeout_s * len(entry.cells) + KILL_GRACE_S
                    continue
                if isinstance(value, dict):
                    raise EnvironmentFault.relayed(value[FAULT])
                results = [CellResult(**v) for v in value]
            del pending[gen]
            for cell, result in zip(entry.cells, results, strict=True):
                record(cell, result)
            record.group_done()
        now = time.monotonic()
        for gen, entry in list(pending.items()):
            if entry.deadline is not None and entry.deadline <= now:
                ray.cancel(gen, force=True)  # kills the worker: the group is stuck in native code
                del pending[gen]
                if len(entry.cells) > 1:  # find the cell that hangs: each alone, with its own limit
                    queue.extend([cell] for cell in reversed(entry.cells))
                    continue
                for cell in entry.cells:
                    record(cell, CellResult(
                        "timeout", f"cell exceeded its {timeout_s:g} s time limit (Ray task cancelled)"))
                record.group_done()
