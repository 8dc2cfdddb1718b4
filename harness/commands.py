"""The commands of ``attnbench`` (:mod:`harness.cli` parses the command line and imports this module only once it
knows it has a command to run, so ``--help`` and the re-exec for the timing settings never import torch)."""

from __future__ import annotations

import argparse
import difflib
import errno
import json
import os
import shlex
import sys
from pathlib import Path

import torch

import attentions

from .core.envinfo import collect_env
from .core.errors import Terminated, UserError, printable
from .core.files import refuse_symlinks
from .core.store import Store
from .core.suite import Suite, expand_patterns
from .light import attnbench_command, default_cpu_threads
from .report.compare import compare, counts_as_regression, parse_side, render, suite_baseline
from .report.compositional import default_out_dir, load_suite_results, rank
from .report.export import write_suite_reports
from .report.highlight import highlighting, split_patterns
from .report.ranking import profiles_text, write_ranking
from .run.execute import RunSummary
from .run.progress import duration, files_line
from .run.ray_executor import check_address, default_cpus_per_task, require_ray
from .run.runner import run_suite, suite_dir
from .run.suitefile import load_suite, parse_set
from .show import stores_under

#: The longest time limit a flag takes: a year (the kernel's interval timer refuses some longer ones; a cell stored
#: as an OverflowError was the result).
MAX_TIMEOUT_S = 365 * 24 * 3600.0
#: The most intra-op threads ``--threads`` takes on a machine with fewer CPUs (a Ray cluster's nodes may have more
#: than the driver's); torch's own limit is a C int, and past a few thousand threads OpenMP fails to start them.
MAX_THREADS = 1024

def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(f"--device {device!r}: not a device; use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise UserError(f"--device {device!r}: unsupported device type; use cpu, cuda or cuda:N")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    return device


def check_out_dir(out: str | Path, flag: str = "--out") -> Path:
    """The output root, checked: not empty (which would write into the working directory), no dangling or looping
    symlink on the way, its nearest existing ancestor a writable directory, and the folders missing below it
    creatable (:func:`_creatable`)."""
    if not str(out).strip():
        raise UserError(f"{flag} '': empty; give an output directory such as results")
    path = Path(out)
    probe = path
    while not os.path.exists(probe):  # os.path: a name too long is "not there" here, and refused below
        if os.path.islink(probe):  # exists() follows links: a link to nowhere (or to itself) lands here
            raise UserError(f"{flag} {out}: {probe} is a dangling or looping symlink; fix it or choose another "
                            f"output directory")
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise UserError(f"{flag} {out}: {probe} is not a writable directory; choose another output directory")
    if probe != path:
        _creatable(path, probe, f"{flag} {out}")
    return path


def _creatable(path: Path, probe: Path, flag: str) -> None:
    """Refuse (exit 2) folders below the existing ``probe`` that cannot be made: a name longer than the file system
    takes, or a place where nothing can be created (``/proc``), which ``os.access`` does not see for root. The first
    missing folder is made and removed again, so that a run fails here rather than as a full disk after its checks."""
    limit = os.pathconf(probe, "PC_NAME_MAX")
    missing = path.relative_to(probe).parts
    for name in missing:
        if len(os.fsencode(name)) > limit:
            raise UserError(f"{flag}: a folder name of {len(os.fsencode(name))} bytes, more than this file system's "
                            f"{limit}; choose a shorter output directory")
    first = probe / missing[0]
    try:
        first.mkdir()
    except FileExistsError:  # made meanwhile (another run): a directory there is fine
        return
    except OSError as exc:
        fix = "a shorter" if exc.errno == errno.ENAMETOOLONG else "another"
        raise UserError(f"{flag}: {first} cannot be created or written ({exc.strerror}); choose {fix} output "
                        f"directory") from None
    first.rmdir()


def check_executor(args: argparse.Namespace) -> None:
    """``--isolate`` is local-only; ``--address`` and ``--cpus-per-task`` are Ray-only; Ray must be installed."""
    if args.executor != "ray":
        for flag, value in (("--address", args.address), ("--cpus-per-task", args.cpus_per_task)):
            if value is not None:
                raise UserError(f"{flag} is an option of the Ray executor; add --executor ray")
        return
    if args.isolate:
        raise UserError("--isolate is for the local executor; Ray already runs each cell in its own worker "
                        "process (drop --isolate)")
    if args.cpus_per_task is not None and args.cpus_per_task < 1:
        raise UserError(f"--cpus-per-task {args.cpus_per_task}: must be a positive number of CPUs")
    cores = default_cpus_per_task()  # embedded Ray's node is this machine; a cluster's nodes are counted when it runs
    if not args.address and args.cpus_per_task is not None and args.cpus_per_task > cores:
        raise UserError(f"--cpus-per-task {args.cpus_per_task}: more than the {cores} CPUs of this machine, where Ray "
                        f"runs without --address; lower it (or give a cluster's --address)")
    require_ray()
    if args.address:
        check_address(args.address)


def cmd_run(args: argparse.Namespace) -> int:
    device, out = _check_run_flags(args)
    suite = load_suite(args.suite, args.profile, parse_set(args.set or []), data_dir=args.data_dir)
    only = _only(args.only, suite)
    try:
        with highlighting(highlight_patterns(args)):  # the run's reports draw the figures
            summary = run_suite(
                suite, out=out, device=device, fresh=args.fresh, isolate=args.isolate, timeout_s=args.timeout,
                only=only or None, argv=args.argv, executor=args.executor, address=args.address,
                cpus_per_task=args.cpus_per_task, quiet_limit_s=args.quiet_timeout if args.require_quiet else None,
                retry_failed=args.retry_failed,
            )
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.cli): the run's end is recorded, say how to resume
        db = suite_dir(out, suite) / "results.db"
        if not db.is_file():
            raise  # stopped before the run began: nothing stored (harness.cli says so)
        stored = getattr(exc, "stored_cells", None)  # None: stopped before the first cell was measured
        count = "the finished cells" if stored is None else f"{stored} cells"
        resume = " ".join([attnbench_command(), *(shlex.quote(a) for a in args.argv[1:])])
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(printable(f"attnbench: {how}; {count} of {suite.name}/{suite.profile} are stored in "
                        f"{suite_dir(out, suite)}; resume with: {resume}"), file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    _print_summary(suite.name, suite.profile, summary)
    if summary.statuses and "ok" not in summary.statuses:
        print(printable(f"attnbench: error: no cell of this run finished ok ({', '.join(summary.statuses)}); see the "
                        f"message column of {summary.out_dir / 'results.csv'}"), file=sys.stderr)
        return 1
    return 0


def _check_run_flags(args: argparse.Namespace) -> tuple[str, Path]:
    """``run``'s flags, checked before the suite is read: (the device, the output root); sets the thread count."""
    if args.timeout is not None and not 0 < args.timeout <= MAX_TIMEOUT_S:  # also rejects nan
        raise UserError(f"--timeout {args.timeout:g}: must be a positive number of seconds, at most {MAX_TIMEOUT_S:g} "
                        "(a year)")
    check_executor(args)
    device = check_device(args.device or default_device())
    out = check_out_dir(args.out)
    cores = os.cpu_count() or 1
    if args.threads is not None and not 1 <= args.threads <= max(cores, MAX_THREADS):
        raise UserError(f"--threads {args.threads}: must be a positive number of intra-op threads, at most "
                        f"{max(cores, MAX_THREADS)} (this machine has {cores} CPUs)")
    if args.quiet_timeout is not None and not 0 < args.quiet_timeout <= MAX_TIMEOUT_S:
        raise UserError(f"--quiet-timeout {args.quiet_timeout}: must be a positive number of seconds")
    threads = args.threads or default_threads(device)
    if args.cpus_per_task is not None and device.startswith("cpu") and args.cpus_per_task < threads:
        raise UserError(f"--cpus-per-task {args.cpus_per_task}: fewer CPUs than the {threads} intra-op threads a cell "
                        f"runs with; raise it or lower --threads")
    torch.set_num_threads(threads)  # recorded in the run's environment, in every cell and its key
    os.environ["OMP_NUM_THREADS"] = str(threads)  # --isolate workers inherit it
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise UserError(f"--data-dir {args.data_dir}: no such directory; give the folder holding the LRA files (for "
                        f"a forecasting suite: the CSV files; for an approximation suite: an accuracy run's results "
                        f"directory)")
    return device, out


def _only(values: list[str] | None, suite: Suite) -> list[str]:
    """``--only``'s patterns, each matching an attention of the suite: one that matches none would be dropped without
    a word (``--only vanilla,NAME`` running vanilla alone)."""
    only = attention_patterns("--only", values, "'s3*,vanilla'")  # `--only ''` would otherwise run everything
    names = suite.attentions()
    for pattern in only:
        if not set(expand_patterns([pattern])) & set(names):
            raise UserError(f"--only {pattern}: matches none of this suite's attentions ({', '.join(names)}); drop it, "
                            f"or add it to the suite (--set attention=...)")
    return only


def _print_summary(name: str, profile: str, summary: RunSummary) -> None:
    counts = ", ".join(f"{k}={v}" for k, v in sorted(summary.statuses.items())) or "nothing to run"
    again = f" (incl. {summary.references} baseline cells timed again for paired ratios)" if summary.references else ""
    print(f"{name}/{profile}: {summary.total} cells, {summary.skipped_done} already done, "
          f"ran: {counts}{again}; {duration(summary.wall_s)}")
    print(files_line(summary.out_dir, summary.written))  # counted; `attnbench show` lists them
    if summary.noisy:
        print(printable(f"warning: {len(summary.noisy)} cells were timed while the machine was busy (column "
                        f"noisy_reason), e.g. {summary.noisy[0]}; rerun them on a quiet machine with --fresh, or use "
                        f"--require-quiet"), file=sys.stderr)


def default_threads(device: str) -> int:
    """Intra-op threads when --threads is not given: on the CPU, every core but one.

    With as many threads as cores, one other busy process makes cells several times slower (an OpenMP team waits
    for its slowest thread, and one of them shares a core); with a core left free, a few percent (docs/measuring.md,
    "Threads", links the figures). On CUDA the threads only launch kernels, and torch's default stays.
    """
    return default_cpu_threads() if device.startswith("cpu") else torch.get_num_threads()


def cmd_report(args: argparse.Namespace) -> int:
    if args.rank:
        return cmd_rank(args)
    if args.out_dir is not None:
        raise UserError("--out-dir is where --rank writes its ranking; add --rank DIR [DIR ...]")
    highlight = highlight_patterns(args)
    dbs = stores_under(Path(args.dir), "report")
    directory = Path(args.dir) if Path(args.dir).is_dir() else Path(args.dir).parent
    refused = []
    for db in dbs:
        try:  # a damaged store among several is named at the end; the others are reported
            refuse_symlinks(directory, db.parent)  # the reports are written beside the store
            with Store(db, read_only=True) as store, highlighting(highlight):
                written = write_suite_reports(store)
        except UserError as exc:
            if len(dbs) == 1:
                raise
            refused.append(str(exc))
            continue
        print(files_line(db.parent, written))
    if refused:
        raise UserError(f"{len(refused)} of {len(dbs)} stores not reported: {refused[0]}"
                        + (f" (and {len(refused) - 1} more: {'; '.join(refused[1:3])})" if len(refused) > 1 else ""))
    return 0


def attention_patterns(flag: str, values: list[str] | None, example: str) -> list[str]:
    """The patterns of a flag given once or more, comma-separated (``--only``, ``--highlight``), each checked to
    match a registered attention: an empty one or a typo is exit 2 with the closest names."""
    patterns = split_patterns(values)
    if values is not None and not patterns:
        raise UserError(f"{flag} '': names no attention; give a name or pattern such as {flag} {example}")
    for pattern in patterns:
        if not attentions.list_attentions(pattern):
            close = difflib.get_close_matches(pattern, attentions.list_attentions(), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UserError(f"{flag} {pattern!r}: matches no registered attention; {hint}see `attnbench list`")
    return patterns


def highlight_patterns(args: argparse.Namespace) -> list[str]:
    """``--highlight``'s patterns, checked (a typo would grey every line)."""
    return attention_patterns("--highlight", getattr(args, "highlight", None), "'s3*'")


def cmd_rank(args: argparse.Namespace) -> int:
    """``report --rank DIR...``: one ranking of the variants across the suites' stores (a compositional index,
    :mod:`harness.report.compositional`)."""
    out_dir = check_out_dir(args.out_dir or default_out_dir(args.rank), "--out-dir")
    ranking = rank([load_suite_results(d) for d in args.rank])
    written = write_ranking(ranking, out_dir)
    if ranking.mixed_profiles:
        print(printable(f"attnbench: warning: {profiles_text(ranking).replace('**', '')}"), file=sys.stderr)
    idle = len(ranking.suites) - len(ranking.contributing)
    shown = len(ranking.table) - len(ranking.controls)
    print(f"ranked {shown} variants over {len(ranking.contributing)} suites"
          + (f" ({idle} more gave no metric: see the method)" if idle else "")
          + (f"; {len(ranking.controls)} controls shown apart, not ranked" if ranking.controls else "")
          + f"; wrote {len(written)} files:")
    for path in written:
        print(printable(f"  {path}"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    threshold = _percent(args.threshold)
    a, b = parse_side(args.a), parse_side(args.b)
    baseline = None if args.absolute else args.relative_to or suite_baseline(a)
    result = compare(a, b, threshold, baseline)
    if baseline and not result.empty and (result["verdict"] != "baseline").sum() == 0:
        result = result.iloc[0:0]  # only the baseline itself: nothing was compared
    if result.empty:
        hint = (f"; relative to `{baseline}`, a cell needs `{baseline}` timed in its rounds on both sides: "
                "--relative-to another variant, or --absolute" if baseline else "")
        raise UserError(f"compare {a.label} {b.label}: no cell was timed (with stored samples) in both{hint}; "
                        "compare results of the same suite, written by this version of attnbench")
    sys.stdout.write(render(result, a, b, threshold, args.format, baseline, only_changed=args.only_changed))
    regressions = int(counts_as_regression(result).sum())
    return 1 if args.fail_on_regression and regressions else 0


def _percent(text: str) -> float:
    """``5%``, ``5`` (percent) or ``0.05`` -> 0.05."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise UserError(f"--threshold {text}: give a percentage such as 5%") from None
    value = value / 100 if text.endswith("%") or value >= 1 else value
    if not 0 < value < 10:
        raise UserError(f"--threshold {text}: must be a positive percentage such as 5%")
    return value


def cmd_env(args: argparse.Namespace) -> int:
    """The environment block with torch (a CUDA build or device; :func:`harness.light.cmd_env` answers the rest)."""
    device = check_device(args.device or default_device())
    if device.startswith("cpu"):
        torch.set_num_threads(default_threads(device))  # the block a run would store
    print(json.dumps(collect_env(torch.device(device)), indent=2))
    return 0
