"""What a run prints while it runs: a progress bar on a terminal (elapsed time and ETA), in a log a progress line a
minute; a line for each cell that failed (error, OOM, NaN, time limit) either way; the cells that do not run here
(a profile's skip rule, a device, a capability) folded into one line per reason instead of one per cell; a busy
machine, once, as soon as a timed group shows it; and the files a run wrote, counted rather than listed (``attnbench
show DIR`` lists them).

The ETA counts the finished cells and, inside a timed group that takes minutes, the share of its timing rounds done
(:meth:`Console.group_progress`): counted only when a cell ends, a run of a few long groups showed one estimate for
many minutes while the elapsed time ran up to it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..core.errors import printable
from ..light import attnbench_command

#: Statuses printed as they happen: a result a reader must see.
NOTEWORTHY = ("error", "oom", "nan", "timeout")
#: Without a terminal (a log, CI), a progress line at most this often.
EVERY_S = 60.0
#: How often the heartbeat looks at the running cell.
HEARTBEAT_S = 5.0
#: Reasons listed one by one; more are counted together.
MAX_REASONS = 4
#: On a terminal, the bar is redrawn at most this often from inside a timed group.
REDRAW_S = 0.5
#: A busy machine is said from inside a timed group once the group has been timed this long (a shorter window's
#: load is a few clock ticks, too coarse to tell); a shorter group says it when its cells are recorded.
EARLY_BUSY_S = 10.0


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def reasons_line(what: str, reasons: Iterable[str]) -> str | None:
    """``what``: N cells (reason: n; ...), the commonest first, or None when there are none."""
    counts = Counter(r for r in reasons if r)
    if not counts:
        return None
    parts = [f"{reason} ({n})" for reason, n in counts.most_common(MAX_REASONS)]
    rest = sum(counts.values()) - sum(n for _, n in counts.most_common(MAX_REASONS))
    more = f"; {rest} more for {len(counts) - MAX_REASONS} other reasons (results.csv, column message)" if rest else ""
    return f"{what}: {sum(counts.values())} cells — " + "; ".join(parts) + more


def files_line(directory: Path, written: Sequence[Path]) -> str:
    """The files a run wrote, counted by kind: ``wrote 87 files: 22 .md, 21 .tex, ...``."""
    kinds = Counter(Path(p).suffix.lstrip(".") or "other" for p in written)
    counted = ", ".join(f"{n} .{k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return printable(f"results: {directory} — wrote {len(written)} files ({counted}); `{attnbench_command()} show "
                     f"{directory}` lists them")


def make_bar(total: int, desc: str, tty: bool) -> tqdm:
    """The terminal's progress bar (disabled without one): its text after the bar is the :class:`Console`'s (count,
    elapsed, ETA, the cell), so that the ETA can move inside a long group."""
    return tqdm(total=total, desc=desc, unit="cell", disable=not tty, dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {postfix}")


@dataclass
class Console:
    """The running count and what is printed per finished cell (see the module docstring)."""

    total: int
    tty: bool
    bar: Any  # tqdm, disabled without a terminal (:func:`make_bar`)
    require_quiet: bool = False  # --require-quiet: the busy warning says the load came while a group ran
    started: float = field(default_factory=lambda: time.perf_counter())
    done: int = 0
    last_line: float = float("-inf")  # any line (the heartbeat waits a minute after it)
    last_progress: float = float("-inf")  # a finished cell's line: the first is printed, then one a minute
    unsupported: Counter = field(default_factory=Counter)
    warned: Counter = field(default_factory=Counter)  # a cell's warnings -> cells that raised them
    running: dict[str, float] = field(default_factory=dict)  # the cells being measured (a timing group runs its
    # cells together), each since when
    fraction: float = 0.0  # of the running group's timing rounds done (:meth:`group_progress`)
    label: str = ""  # the cell named on the bar
    busy_said: bool = False
    _drawn: float = float("-inf")
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        # A cell can take minutes (Inductor compiling, a long training): the heartbeat keeps the console alive
        threading.Thread(target=self._heartbeat, name="attnbench-progress", daemon=True).start()

    def _heartbeat(self) -> None:
        """On a terminal, the bar's clock redrawn; in a log, a line a minute naming the cell still being measured."""
        while not self._stop.wait(HEARTBEAT_S):
            running, now = dict(self.running), time.perf_counter()
            if self.tty:
                self._redraw(now)
            elif running and now - self.last_line >= EVERY_S:
                self.last_line = now
                first = next(iter(running))
                what = first if len(running) == 1 else f"{len(running)} cells together (from {first})"
                self.write(f"... [{self.done}/{self.total}] {self._pace(now)}; still measuring {what}: "
                           f"{duration(now - min(running.values()))} so far")

    def starting(self, label: str) -> None:
        now = time.perf_counter()
        if not self.running:  # a new group: none of its rounds done yet
            self.fraction = 0.0
        self.running[label] = now
        self.label = label
        if self.tty:
            self._redraw(now)

    def group_progress(self, fraction: float) -> None:
        """The running group has done ``fraction`` of its timing rounds: the ETA counts that share of its cells."""
        self.fraction = min(max(fraction, 0.0), 1.0)
        now = time.perf_counter()
        if self.tty and now - self._drawn >= REDRAW_S:
            self._redraw(now)

    def group_elapsed(self) -> float:
        """Seconds since the running group's first cell started (0 when none runs)."""
        return time.perf_counter() - min(self.running.values()) if self.running else 0.0

    def busy(self, load_cores: float, cores: int) -> None:
        """Other processes used ``load_cores`` of this machine's ``cores`` while a group was timed: said once, with
        what it means for the run and how to avoid it."""
        if self.busy_said:
            return
        self.busy_said = True
        left = self._estimate(time.perf_counter())[1]
        rest = f" (about {duration(left)} left)" if left else ""
        how = ("--require-quiet waited for a quiet machine before the group; the load came while it ran"
               if self.require_quiet else
               "stop them, or run with --require-quiet (it waits before each timed group until the machine is quiet)")
        self.write(f"warning: the machine is busy: other processes used {load_cores:.2f} of its {cores} cores "
                   f"({100 * load_cores / max(cores, 1):.0f}%) while cells were timed. Every timing taken like this "
                   f"is flagged noisy (†), and so will the rest of this run be{rest} while the load lasts; {how}")

    def write(self, line: str) -> None:
        """Print ``line`` (above the bar on a terminal), its control characters escaped: it quotes cell labels and
        messages, which quote input."""
        line = printable(line)
        if self.tty:
            self.bar.write(line, file=sys.stderr)  # above the bar, which redraws below it
        else:
            print(line, file=sys.stderr, flush=True)

    def finished(self, label: str, status: str, message: str, described: str) -> None:
        """One cell done: count it, print it if it failed, print progress in a log now and then."""
        self.done += 1
        self.running.pop(label, None)
        self.bar.update()
        if self.tty:
            self._redraw(time.perf_counter())
        if status == "unsupported":
            self.unsupported[message] += 1
            return
        line = f"[{self.done}/{self.total}] {label}: {described}"
        if status in NOTEWORTHY:
            self.write(line)
            return
        now = time.perf_counter()
        if not self.tty and (now - self.last_progress >= EVERY_S or self.done == self.total):
            self.last_line = self.last_progress = now
            self.write(f"{line}  ·  {self._pace(now)}")

    def _estimate(self, now: float) -> tuple[float, float | None]:
        """(elapsed seconds, seconds left or None before anything is done): the cells done and the running group's
        share of rounds done, at the pace so far."""
        elapsed = now - self.started
        effective = self.done + self.fraction * len(self.running)
        return elapsed, (elapsed / effective * (self.total - effective) if effective > 0 else None)

    def _pace(self, now: float) -> str:
        """``59%, 13m06s elapsed, about 9m00s left`` (no estimate before anything is done)."""
        elapsed, left = self._estimate(now)
        effective = self.done + self.fraction * len(self.running)
        about = f", about {duration(left)} left" if left is not None else ""
        return f"{int(100 * effective / max(self.total, 1))}%, {duration(elapsed)} elapsed{about}"

    def _redraw(self, now: float) -> None:
        """The bar at the cells done plus the running group's share, with count, elapsed, ETA and the cell."""
        self._drawn = now
        elapsed, left = self._estimate(now)
        self.bar.n = self.done + self.fraction * len(self.running)
        clock = f"{duration(elapsed)}<{duration(left) if left is not None else '?'}"
        self.bar.set_postfix_str(printable(f"{self.done}/{self.total} [{clock}] {self.label}"), refresh=True)

    def close(self, announced: Iterable[str] = ()) -> None:
        """In a log, the count at the end; the cells that turned out unsupported while running (those announced up
        front left out); the cells that raised library warnings."""
        self._stop.set()
        if not self.tty and self.total and self.done == self.total:  # a stopped run says so itself
            self.write(f"[{self.done}/{self.total}] cells done in {duration(time.perf_counter() - self.started)}")
        known = set(announced)
        line = reasons_line("not run here", (m for m, n in self.unsupported.items() if m not in known
                                             for _ in range(n)))
        if line:
            self.write(line)
        if self.warned:
            first, n = self.warned.most_common(1)[0]
            self.write(f"library warnings: {sum(self.warned.values())} cells raised some, kept in results.csv (column "
                       f"warnings); the commonest, in {n}: {first}")
