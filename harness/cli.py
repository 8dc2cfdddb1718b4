"""``attnbench``: list | run SUITE | report DIR | report --rank DIR... | compare A B | show DIR | env.

Bad input (missing file, YAML error, unknown key/attention/profile, bad value, unavailable device, unwritable
output) exits with code 2 and one line naming what is wrong and how to fix it. Every error and warning line is
printed through :func:`~harness.core.errors.printable`: the input it quotes cannot drive the terminal.

This module imports nothing heavy: ``--help`` and argument errors answer at once, ``list``, ``show`` and ``env`` on a
CPU build answer without torch (:mod:`harness.light`), and ``run`` re-executes itself with the timing malloc settings
before torch is imported, so torch is imported once. The other commands are :mod:`harness.commands`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from .core import faults
from .core.errors import RunFailed, Terminated, UserError, printable
from .core.files import CACHE, DATA_CACHE, refuse_links_outside
from .core.tunables import GLIBC_TUNABLES_TIMING, timing_env_active
from .run.overrides import check_set_axes


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit code 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # one prefix: the CLI prints "attnbench: error: ", so a subcommand's line names only the subcommand
        command = self.prog.removeprefix("attnbench").strip()
        where, help_of = (f"{command}: ", f"attnbench {command} --help") if command else ("", "attnbench --help")
        raise UserError(f"{where}{message} (see {help_of})")


def _version() -> str:
    """The installed distribution's version (no torch import: ``--version`` answers at once)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnbench")
    except PackageNotFoundError:
        return "unknown (not installed; run `make setup`)"


#: ``--highlight`` of ``run`` and ``report`` (harness.report.highlight.highlighting).
HIGHLIGHT_HELP = ("figures: colour the attentions matching these fnmatch patterns (comma-separated; repeatable) and "
                  "draw every other one thin and grey")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="attnbench", description="Benchmark efficient attention against softmax attention.")
    p.add_argument("--version", action="version", version=f"attnbench {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ls = sub.add_parser("list", help="registered attentions and their capabilities")
    ls.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 's3*'")
    ls.set_defaults(func="cmd_list")
    _add_run(sub)
    _add_readers(sub)
    return p


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a suite (resumes; --fresh to redo)")
    run.add_argument("suite", help="suite YAML file, e.g. suites/speed.yaml")
    run.add_argument("--profile", default="quick", help="smoke | quick | paper (or any profile in the file)")
    run.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
    run.add_argument("--out", default="results", help="output root (default: results)")
    run.add_argument("--only", action="append", help="attention patterns to keep, comma-separated")
    run.add_argument("--set", action="append", metavar="AXIS=V1,V2",
                     help="override an axis, e.g. seq_len=1024,2048 (given twice: both sets of values), or an "
                          "attention config field: config.dropout=0.1")
    redo = run.add_mutually_exclusive_group()
    redo.add_argument("--fresh", action="store_true", help="redo cells that already have a result")
    redo.add_argument("--retry-failed", action="store_true",
                      help="redo the cells whose latest result is error, oom, nan or timeout (keep the others)")
    run.add_argument("--isolate", action="store_true", help="one subprocess per cell")
    run.add_argument("--timeout", type=float, default=None, help="per-cell time limit in seconds")
    run.add_argument("--data-dir", default=None, help="accuracy suites: real LRA data instead of the generators")
    run.add_argument("--threads", type=int, default=None,
                     help="intra-op threads (default on the CPU: every core but one, see the README)")
    run.add_argument("--require-quiet", action="store_true",
                     help="before each timed group, wait until no other process keeps the CPU busy; stop with exit "
                          "1 after --quiet-timeout")
    run.add_argument("--quiet-timeout", type=float, default=600.0, help="seconds --require-quiet waits (600)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="local (this process; --isolate for subprocesses) or ray (one Ray task per cell)")
    run.add_argument("--address", default=None,
                     help="ray: address of an existing Ray cluster (default: start Ray on this machine)")
    run.add_argument("--cpus-per-task", type=int, default=None,
                     help="ray: CPUs each CPU cell reserves (default: the intra-op thread count)")
    run.add_argument("--highlight", action="append", metavar="PATTERNS", help=HIGHLIGHT_HELP)
    run.set_defaults(func="cmd_run")


def _add_readers(sub: argparse._SubParsersAction) -> None:
    """The commands that read results directories (report, compare, show) and the environment (env)."""
    rep = sub.add_parser("report", help="rewrite CSV/Markdown/LaTeX tables and plots from a results directory, or "
                                        "rank the variants across suites (--rank)")
    what = rep.add_mutually_exclusive_group(required=True)
    what.add_argument("dir", nargs="?", help="a directory holding results.db (or a parent of several)")
    what.add_argument("--rank", nargs="+", metavar="DIR",
                      help="suites' results directories (each holding results.db): one ranking of the variants "
                           "across them, z-scores per metric averaged within and then across suites")
    rep.add_argument("--out-dir", default=None,
                     help="--rank: where ranking.{md,tex,csv} go (default: the deepest directory holding every DIR)")
    rep.add_argument("--highlight", action="append", metavar="PATTERNS", help=HIGHLIGHT_HELP)
    rep.set_defaults(func="cmd_report")
    cmp = sub.add_parser("compare", help="compare two results directories (or two runs: DIR@RUN) cell by cell")
    cmp.add_argument("a", help="the reference: a suite's results directory, optionally @RUN (a run id)")
    cmp.add_argument("b", help="the results compared with it, likewise")
    cmp.add_argument("--threshold", default="5%", help="smallest change reported as a regression (default 5%%)")
    cmp.add_argument("--format", choices=("md", "csv", "json"), default="md", help="output format (default md)")
    basis = cmp.add_mutually_exclusive_group()
    basis.add_argument("--relative-to", metavar="NAME", default=None,
                       help="compare each cell's time ratio to NAME, timed in the same interleaved rounds, so drift of "
                            "the machine between A and B cancels (default: the suite's report.compare_reference, "
                            "else its report.baseline: vanilla_sdpa for suites/speed.yaml)")
    basis.add_argument("--absolute", action="store_true", help="compare the raw times (two machines, or the baseline)")
    cmp.add_argument("--only-changed", action="store_true", help="list only the cells that got slower or faster")
    cmp.add_argument("--fail-on-regression", action="store_true",
                     help="exit 1 when a cell got slower beyond the threshold, significantly")
    cmp.set_defaults(func="cmd_compare")
    show = sub.add_parser("show", help="what a results directory holds: runs and their ids, cells by status, noisy "
                                       "counts, files")
    show.add_argument("dir", help="a directory holding results.db (or a parent of several)")
    show.set_defaults(func="cmd_show")
    env = sub.add_parser("env", help="print the environment block stored with every run")
    env.add_argument("--device", default=None)
    env.set_defaults(func="cmd_env")


def _reexec_with_timing_env(argv: list[str]) -> None:
    """Re-run this command with the timing malloc settings: glibc reads GLIBC_TUNABLES at start only."""
    if argv[:1] == ["run"] and not timing_env_active() and not os.environ.get("ATTNBENCH_NO_REEXEC"):
        # TORCH_CPP_LOG_LEVEL: torch's C++ warnings (the profiler's "Memory block of unknown size ...", printed once
        # per memory measurement) would break the progress output; a level the user set is kept
        env = {**os.environ, "GLIBC_TUNABLES": GLIBC_TUNABLES_TIMING, "ATTNBENCH_NO_REEXEC": "1",
               "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
        os.execve(sys.executable, [sys.executable, "-m", "harness.cli", *argv], env)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def error(message: object) -> None:
    """The one-line error of a command on stderr, its control characters escaped."""
    print(f"attnbench: error: {printable(str(message))}", file=sys.stderr)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """Python's warning line, its message's control characters escaped (it may quote a file name or a label)."""
    (file or sys.stderr).write(warnings.formatwarning(printable(str(message)), category, filename, lineno, line))


def main(argv: list[str] | None = None) -> int:
    """Entry point. ``argv=None`` means the real command line (which may re-exec for timing settings)."""
    if argv is None:
        argv = sys.argv[1:]
        _reexec_with_timing_env(argv)
    in_main = threading.current_thread() is threading.main_thread()  # only there may a handler be set
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main else None
    # Ctrl-C is KeyboardInterrupt during a command, whatever a library (Ray's driver) or the caller left installed
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler) if in_main else None
    show_warning, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        args = build_parser().parse_args(argv)  # --help ends here, before anything heavy is imported
        args.argv = ["attnbench", *argv]  # the command as typed, for the store and the resume hint
        faults.check_environment()
        return _dispatch(args)
    except UserError as exc:
        error(exc)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM outside a run's cells (start-up, a report): nothing is
        # half-written (every file is replaced atomically, every cell stored in one transaction)
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"attnbench: {how}; nothing was half-written; run the command again", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    finally:
        warnings.showwarning = show_warning
        if in_main:
            signal.signal(signal.SIGTERM, previous)
            if previous_int is not None:  # None: a handler installed outside Python, which cannot be put back
                signal.signal(signal.SIGINT, previous_int)


#: The libraries' on-disk caches a run points under ``<out>/.cache``: environment variable -> folder there. By default
#: they live under $HOME or $TMPDIR: matplotlib's font cache (~/.config/matplotlib), Inductor's kernels
#: ($TMPDIR/torchinductor_<user>), Triton's cache (~/.triton/cache: the launcher modules its CUDA driver compiles when
#: torch first asks it about the GPU, and kernels) and its other folders (TRITON_HOME, ~/.triton), the CUDA driver's
#: cache of PTX it compiled (~/.nv/ComputeCache) and ATen's cache of NVRTC-compiled kernels (~/.cache/torch/kernels).
#: The GPU ones are written on a CUDA machine even by a ``--device cpu`` run: torch initialises CUDA there.
TEMP_DIR = "tmp"  # <out>/.cache/tmp: TMPDIR of a run
CACHE_DIRS = {
    "MPLCONFIGDIR": "matplotlib",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "TRITON_HOME": "triton_home",
    "CUDA_CACHE_PATH": "nv",
    "PYTORCH_KERNEL_CACHE_PATH": "torch_kernels",
}


#: A Unix socket's path holds at most 107 bytes; Ray puts its sockets about this deep under its temporary folder
#: (``ray/session_<date>_<pid>/sockets/plasma_store``).
RAY_SOCKET_DEPTH = 72


def _caches_under_out(out: str) -> None:
    """Point the libraries' on-disk caches (:data:`CACHE_DIRS`) under ``<out>/.cache`` unless the user chose a place
    (set the variable), and the temporary files of this process and its workers there too (``TMPDIR``,
    :data:`TEMP_DIR`, created when the run begins): a run writes nothing outside ``--out`` but its documented
    caches. Set before matplotlib and torch are imported (and CUDA initialised), which read them then. Ray's session
    folder follows only where its socket paths fit (:data:`RAY_SOCKET_DEPTH`); under a deep ``--out`` it stays in
    the system's temporary folder."""
    if not out.strip():
        return
    cache = os.path.join(out, CACHE)
    for variable, folder in CACHE_DIRS.items():
        os.environ.setdefault(variable, os.path.join(cache, folder))
    system_tmp = tempfile.gettempdir()
    os.environ["TMPDIR"] = os.path.join(cache, TEMP_DIR)  # a run's temporary files belong with the run
    ray_dir = os.path.abspath(os.path.join(cache, "ray"))
    os.environ.setdefault("RAY_TMPDIR", ray_dir if len(ray_dir) + RAY_SOCKET_DEPTH <= 107 else system_tmp)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again (once the folder exists: harness.run.runner)
    # A new --out builds matplotlib's font cache again, and matplotlib says so on stderr where that takes over 5 s (a
    # loaded machine): a line in the middle of a command's own messages, that only load produces.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; every expected failure is one line on stderr and an exit code."""
    if getattr(args, "out", None):
        for folder in (CACHE, DATA_CACHE):  # before anything (a library reading the variables) writes there
            refuse_links_outside(args.out, Path(args.out) / folder)
        _caches_under_out(args.out)
    if args.func == "cmd_run" and args.set:  # an axis the suite's kind lacks: exit 2 before torch is imported
        check_set_axes(args.suite, args.profile, args.set)
    from . import light

    if args.func in light.COMMANDS and (args.func != "cmd_env" or light.cpu_env_answers(args)):
        return _answer(lambda: light.COMMANDS[args.func](args))
    import attentions

    from . import commands
    from .core.schema import store_error

    try:
        return _answer(lambda: getattr(commands, args.func)(args))
    except UserError as exc:
        error(exc)
        return exc.exit_code
    except attentions.RegistryError as exc:
        error(exc)
        return 2
    except RunFailed as exc:
        error(exc)
        return exc.exit_code
    except sqlite3.DatabaseError as exc:  # the disk filled or failed while a run wrote its store
        error(store_error("the results store", exc))
        return 1
    except OSError as exc:  # the environment: a full disk, a read-only or vanished directory
        where = f"{exc.filename}: " if exc.filename else ""
        error(f"{where}{exc.strerror or exc}; free space or fix the permissions (or give another --out), then rerun: "
              f"finished cells are kept and the run resumes")
        return 1


def _answer(command: Callable[[], int]) -> int:
    """Run ``command``; a reader that closed the pipe (``attnbench list | head``) ends it quietly."""
    try:
        return int(command())
    except BrokenPipeError:
        # stdout is gone: point it at /dev/null so that the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
