"""How every report writes: numbers, the quantities shown (unit, orientation), Markdown and LaTeX (booktabs) tables,
marks for the best cells, the environment line, and the files themselves (each written atomically).

One renderer per format for every table of the harness, so a number, a failed cell or an escaped label reads the
same in Table 1, Table 4 and the study tables.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import pandas as pd

from .. import catalog
from ..core import datasource
from ..core.files import atomic_write, atomic_write_text
from ..core.suite import is_finite_number
from .latex import tex_comment, tex_escape, tex_float, tex_longtable, tex_text  # noqa: F401  (re-exported)
from .tabular import booktabs, footnote_row, heading_line  # noqa: F401  (re-exported)

Fmt = Literal["md", "tex"]
MIB = 2**20
_SIG_DIGITS = 3
#: A failed or absent cell: an em dash (``---`` in LaTeX, where the Unicode one needs font support).
MISSING: dict[str, str] = {"md": "—", "tex": "---"}
#: The multiplication sign of ×-multipliers, the spread sign and the mark of a value measured on a busy machine.
TIMES: dict[str, str] = {"md": "×", "tex": r"$\times$"}
PLUS_MINUS: dict[str, str] = {"md": "±", "tex": r"$\pm$"}
NOISY_MARK: dict[str, str] = {"md": "†", "tex": r"$^\dagger$"}
#: The mark of a CPU time that includes faulting memory in again on every call (:func:`refaults`).
REFAULT_MARK: dict[str, str] = {"md": "§", "tex": r"$^\S$"}
#: Bytes of a page fault: the 4 KiB pages of the x86-64 and arm64 Linux machines this harness runs on.
PAGE_BYTES = 4096
#: A timed cell re-faults its memory when the pages it faults in per call add up to this share of its peak memory
#: (or, without a memory measurement, to REFAULT_MIN_BYTES): memory the allocator gave back to the OS after each call
#: and the next call touched afresh. A cell that re-faults does so in a large share of its peak, one that does not
#: in a tiny one, so the threshold sits far from both (docs/measuring.md, "Page faults", and its example).
REFAULT_MIN_FRACTION = 0.1
REFAULT_MIN_BYTES = 64 * 2**20


def refaults(cell: Mapping[str, object]) -> bool:
    """Whether a timed cell's time includes faulting much of its memory in again on every call (its
    ``page_faults_per_call``; CPU cells only): the time then depends on the allocator and the VM, not the layer."""
    faults = cell.get("page_faults_per_call")
    if not is_finite_number(faults):
        return False
    peak = cell.get("peak_mem_bytes")
    limit = REFAULT_MIN_FRACTION * float(peak) if is_finite_number(peak) and float(peak) > 0 else REFAULT_MIN_BYTES
    return float(faults) * PAGE_BYTES >= limit


def time_marks(cell: Mapping[str, object], fmt: Fmt, also: Mapping[str, object] | None = None) -> str:
    """A timed cell's marks: † timed on a busy machine, § its memory faulted in again on every call. ``also``: a
    second timing the number rests on (a ratio's reference), whose marks it carries too (each mark once)."""
    cells = [cell] if also is None else [cell, also]
    noisy, faulted = any(c.get("noisy") is True for c in cells), any(refaults(c) for c in cells)
    return (NOISY_MARK[fmt] if noisy else "") + (REFAULT_MARK[fmt] if faulted else "")


FAILED_NOTE = "OOM = out of memory; — = failed or not run."
#: The mark of an accuracy that does not beat the no-mixing control (``attentions/none.py``) by its seed spread.
BELOW_CONTROL: dict[str, str] = {"md": "°", "tex": r"$^\circ$"}
CONTROL_NOTE = ("° = does not beat the `none` control (no token mixing) by more than the seed spread (the larger "
                "std over seeds of the two): such an entry does not show that the model used its attention.")


@functools.cache
def _displays() -> dict[str, str]:
    """Every registered name's display name, from the zoo's catalogue (no torch; the registry where it is stale)."""
    return {e["name"]: e.get("display") or e["name"] for e in catalog.entries()}


def display_name(name: str, overrides: Mapping[str, str] | None = None) -> str:
    """The name a paper prints for attention ``name``: the suite's ``report.row_names``, else the variant's own
    (``register(..., display=...)``), else the registry name (a name this zoo no longer has)."""
    return (overrides or {}).get(name) or _displays().get(name, name)


#: Benchmark modes in words, for titles.
MODE_NAMES: dict[str, str] = {"fwd": "forward", "fwd+bwd": "forward + backward", "train_step": "training step"}
#: The speed suites' compile axis in words.
COMPILE_NAMES: dict[str, str] = {"eager": "eager", "inductor": "torch.compile (Inductor)"}


def suite_title(suite: str) -> str:
    """A suite's name as a title's words: ``noise-robustness`` -> ``Noise robustness``; what follows the name (a data
    mark such as " (generated stand-ins, not LRA)") is kept as written."""
    name, space, rest = suite.strip().partition(" ")
    words = re.sub(r"[-_]+", " ", name).strip()
    return words[:1].upper() + words[1:] + space + rest


def dropped_text(names: Sequence[str], reasons: Sequence[str]) -> str:
    """The sentence naming the rows a table leaves out because they ran nowhere in it (unsupported or failed in every
    cell), with the statuses why: an empty row says nothing a paper wants to print."""
    return f"Not run here ({', '.join(sorted(set(reasons)))}): " + ", ".join(names) + "."


def dropped_note(names: Sequence[str], reasons: Sequence[str], n_columns: int) -> list[str]:
    """:func:`dropped_text` as the LaTeX footnote row of a tabular (the float writer sets it under the table)."""
    return footnote_row(dropped_text(names, reasons), n_columns)


def with_dropped(table: str, names: Sequence[str], reasons: Sequence[str], fmt: Fmt) -> str:
    """A rendered table with :func:`dropped_text` under it: a Markdown line, or a LaTeX footnote row in its tabular."""
    if not names:
        return table
    if fmt == "md":
        return f"{table}\n\n{dropped_text(names, reasons)}"
    head, _, tail = table.rpartition("\\bottomrule")
    n_columns = len(re.match(r"\\begin\{tabular\}\{([a-z]*)\}", table).group(1))  # type: ignore[union-attr]
    return head + " & ".join(dropped_note(list(names), reasons, n_columns)) + " \\\\\n\\bottomrule" + tail


def printed_rows(names: Sequence[str], rows: Sequence[str] | None, baseline: str | None = None) -> list[str]:
    """The rows of ``names`` a paper's table prints: those matching ``rows`` (registry names or fnmatch patterns:
    the suite's ``report.rows``, else the kind's default), and the ``baseline`` its multipliers are against; in the
    order of ``names``. Every row, where ``rows`` is None."""
    if rows is None:
        return list(names)
    return [n for n in names if n == baseline or any(fnmatch.fnmatchcase(n, p) for p in rows)]


def length_label(seq_len: int) -> str:
    """Formats a sequence length as the paper does: ``1K``, ``4K`` when divisible by 1024, else the number."""
    n = int(seq_len)
    return f"{n // 1024}K" if n > 0 and n % 1024 == 0 else str(n)


def format_value(value: float) -> str:
    """3 significant digits, in fixed notation (tables must not show ``1.23e+03``)."""
    if value == 0:
        return "0"
    # Decimals are chosen from the value rounded to 3 significant digits so that 9.996 → "10.0".
    rounded = float(f"{value:.{_SIG_DIGITS}g}")
    decimals = max(0, _SIG_DIGITS - 1 - math.floor(math.log10(abs(rounded))))
    return f"{value:.{decimals}f}"


#: The minus sign of a negative number in a table cell (a hyphen is not one).
MINUS: dict[str, str] = {"md": "−", "tex": "$-$"}


def with_minus(text: str, fmt: Fmt) -> str:
    """A number's text as a table shows it: a leading hyphen (Python's minus), and one after an opening ``[`` or
    ``(``, or a space, as a real minus sign."""
    return re.sub(r"(^|(?<=[\[( ]))-(?=[\d.])", lambda _: MINUS[fmt], text)


def number(value: float, fmt: Fmt) -> str:
    """:func:`format_value` with a real minus sign: the text of a measured value in every table cell."""
    return with_minus(format_value(value), fmt)


def signed(value: float, fmt: Fmt, decimals: int = 2) -> str:
    """A difference with its sign always shown, ``+1.23`` or ``−1.23`` (``$-$1.23`` in LaTeX)."""
    return with_minus(f"{value:+.{decimals}f}", fmt)


def escape(text: str, fmt: Fmt) -> str:
    """A label made safe for a Markdown table cell (``|`` would end the cell; ``<`` and ``>`` as entities, so that no
    raw HTML a suite's name holds reaches a page that renders the Markdown) or LaTeX."""
    if fmt != "md":
        return tex_escape(text)
    return text.replace("|", r"\|").replace("<", "&lt;").replace(">", "&gt;")


def failed_text(statuses: set[str] | None, fmt: Fmt) -> str:
    """``OOM`` when every run behind a cell ran out of memory (a result in itself), else the missing mark."""
    return "OOM" if statuses == {"oom"} else MISSING[fmt]


def rank_marks(values: Sequence[float | None], depth: int = 1) -> list[int | None]:
    """0 for the best, 1 for the second best, ... (up to ``depth``) of ``values`` as displayed with 2 decimals.

    Comparing the displayed numbers makes cells that read the same share a mark; None values get none.
    """
    shown = [None if v is None else float(f"{v:.2f}") for v in values]
    top = sorted({v for v in shown if v is not None}, reverse=True)[:depth]
    return [top.index(v) if v in top else None for v in shown]


def mark(text: str, rank: int | None, fmt: Fmt) -> str:
    """Bold for rank 0 (best) and underline for rank 1 (second best), as the paper marks them."""
    if rank == 0:
        return f"**{text}**" if fmt == "md" else rf"\textbf{{{text}}}"
    if rank == 1:
        return f"<u>{text}</u>" if fmt == "md" else rf"\underline{{{text}}}"
    return text


# ---------------------------------------------------------------------------------------------------------------------
# Tables


def sub_tables(parts: Sequence[tuple[str, str]], fmt: Fmt) -> str:
    """Several tables under headings (prose): Markdown ``####`` lines, LaTeX one tabular each after its heading line,
    which the float shows over it."""
    if fmt == "md":
        return "\n\n".join(f"#### {heading}\n\n{body}" for heading, body in parts)
    return "\n\n".join(f"{heading_line(tex_text(heading))}\n{body}" for heading, body in parts)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], n_left: int = 1) -> str:
    """GitHub Markdown table, padded for legibility; the first ``n_left`` columns are left-aligned."""
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) if i < n_left else c.rjust(w)
                  for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "| " + " | ".join(padded) + " |"

    rule = [":" + "-" * (w + 1) if i < n_left else "-" * (w + 1) + ":" for i, w in enumerate(widths)]
    return "\n".join([line(header), "|" + "|".join(rule) + "|", *map(line, rows)])


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], fmt: Fmt) -> str:
    """A GitHub Markdown table or a booktabs ``tabular`` (first column left, the others centred)."""
    if fmt == "md":
        return md_table(header, rows)
    return booktabs(f"l{'c' * (len(header) - 1)}", [" & ".join(header) + r" \\"], rows)


def env_summary(env: Mapping[str, object]) -> str:
    """One line: the machine and software, and the runs the numbers come from (or the commit and time of one)."""
    def get(key: str) -> object:
        value = env.get(key)
        return "n/a" if value in (None, "") else value

    where = f"{get('device_name')} · torch {get('torch_version')} · CUDA {get('cuda_version')}"
    data = f"{env['data']}. " if env.get("data") else ""  # what the numbers were measured on, first
    if env.get("runs"):
        return f"{data}{where} · {env['runs']}"
    return f"{data}{where} · {threads_text(get('threads'))} · commit {get('git_commit')} · {get('time_utc')}"


def threads_text(threads: object) -> str:
    """``1 thread``, ``4 threads``."""
    return f"{threads} thread" + ("" if str(threads) == "1" else "s")


def with_data(env: Mapping[str, object], df: pd.DataFrame, real: str) -> dict[str, object]:
    """``env`` with ``data``: the line saying what the cells of ``df`` were measured on (their ``data_source``),
    which every table's footer then shows (:func:`env_summary`); ``real`` names the data stand-ins stand in for."""
    values = datasource.of_ok_cells(df)  # a failed cell measured nothing
    return {**env, "data": datasource.data_line(values, real)} if values else dict(env)


def shown_env(runs: pd.DataFrame) -> dict[str, object]:
    """The environment of the runs whose results a report shows: the newest run's environment, and ``runs``, one
    line naming every run (id, commit, start, threads), so a footer says where each shown number comes from."""
    if runs.empty:
        return {}
    env = dict(runs.iloc[-1]["env"])
    env["runs"] = "; ".join(f"run {r.run_id} (commit {_short(r.commit)}, {r.started_utc}, "
                            f"{threads_text(r.env.get('threads'))})" for r in runs.itertuples())
    return env


def _short(commit: object) -> str:
    """A commit as 12 hex digits, keeping the ``-dirty`` mark of uncommitted changes."""
    if not commit:
        return "n/a"
    text = str(commit)
    return text[:12] + ("-dirty" if text.endswith("-dirty") else "")


def sig2(value: float) -> str:
    """Two significant digits in fixed notation: 1.4, 0.043, 12, 120 (a multiplier never reads 0.0×)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    rounded = float(f"{value:.2g}")
    return f"{rounded:.{max(0, 1 - math.floor(math.log10(abs(rounded))))}f}"


# ---------------------------------------------------------------------------------------------------------------------
# Files


def write_table_files(out_dir: Path, stem: str, *, title: str, note: str, md_body: str, tex_body: str,
                      env: Mapping[str, object], tex_full: str | None = None, keys: int | None = None,
                      tex_note: str | None = None) -> list[Path]:
    """``<stem>.md`` (title, table, note, environment) and ``<stem>.tex``: a complete table float (caption = the
    title, the note under the table, label ``tab:<stem>``, the packages it needs;
    :func:`harness.report.latex.tex_float`), where it was measured as a comment (the full environment is in
    ``env.json``). With ``tex_full`` (the table with every row, where ``tex_body`` prints the paper's rows only), also
    ``<stem>_full.tex``, a long table for a supplement (:func:`harness.report.latex.tex_longtable`). ``keys``: the
    label columns a tabular split by columns repeats (default: the left-aligned ones); ``tex_note``: the LaTeX
    table's note where it differs from the Markdown's."""
    md = f"### {title}\n\n{md_body}\n\n{note}\n\n_Environment: {env_summary(env)}_\n"
    full_line = f"Every row: {stem}_full.tex (a long table for a supplement)."
    comments = (env_summary(env), *([full_line] if tex_full else []))
    layout = {"caption": title, "notes": note if tex_note is None else tex_note, "comments": comments, "keys": keys}
    written = [atomic_write_text(out_dir / f"{stem}.md", md),
               atomic_write_text(out_dir / f"{stem}.tex", tex_float(tex_body, label=stem, **layout))]
    if tex_full is not None:
        full = tex_longtable(tex_full, label=f"{stem}_full", **{**layout, "caption": f"{title}: every row",
                                                                 "comments": comments[:1]})
        written.append(atomic_write_text(out_dir / f"{stem}_full.tex", full))
    return written


#: Leading characters a spreadsheet reads as a formula (OWASP's CSV injection list): a cell starting with one is
#: written with a leading apostrophe, which spreadsheets show as text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: object) -> object:
    """A text cell that a spreadsheet would run as a formula (``=cmd|' /C calc'!A0``) made inert; anything else
    as it is (numbers are numbers: a negative one is not text)."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """``df`` as CSV at full precision (float_format unset: pandas writes round-trippable reprs), every text cell and
    header through :func:`csv_safe`."""
    safe = df.rename(columns=lambda c: csv_safe(str(c)) if isinstance(c, str) else c)
    text = [c for c in safe.columns if pd.api.types.is_object_dtype(safe[c]) or pd.api.types.is_string_dtype(safe[c])]
    if text:
        safe = safe.assign(**{c: safe[c].map(csv_safe) for c in text})
    return atomic_write(path, lambda tmp: safe.to_csv(tmp, index=False))


#: Accuracies the store keeps as fractions, and the names under which every CSV file gives them in percent.
PERCENT_COLUMNS: dict[str, str] = {"test_acc": "test_acc_pct", "best_dev_acc": "best_dev_acc_pct",
                                   "train_acc": "train_acc_pct", "dev_acc": "dev_acc_pct"}
#: The columns of accuracy summaries (mean and std over seeds, already in percent) as CSV files name them.
SUMMARY_PERCENT_COLUMNS: dict[str, str] = {"mean": "acc_mean_pct", "std": "acc_std_pct", "diff": "acc_diff_pp"}


def in_percent(df: pd.DataFrame, names: Mapping[str, str] = PERCENT_COLUMNS) -> pd.DataFrame:
    """``df`` as a CSV file gives it: the accuracy columns renamed to say their unit (``names``), fractions of
    :data:`PERCENT_COLUMNS` times 100, so that a CSV agrees with the tables and figures (accuracy in %)."""
    present = {c: n for c, n in names.items() if c in df.columns}
    scale = {c: 100.0 * df[c].astype(float) for c in present if c in PERCENT_COLUMNS}
    return df.assign(**scale).rename(columns=present)


def write_raw(df: pd.DataFrame, out_dir: Path, env: Mapping[str, object]) -> list[Path]:
    """``results.csv`` (every row and column at full precision) and ``env.json`` — written before any table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_csv(df, out_dir / "results.csv"),
            atomic_write_text(out_dir / "env.json", json.dumps(env, indent=2) + "\n")]
