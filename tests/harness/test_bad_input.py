"""The catalogue of bad input: every malformed suite file, flag or environment problem makes ``attnbench run`` exit
with code 2 and print ONE line naming the file or flag, the key (where there is one) and a fix, before anything is
written or run.

This is the single table of bad inputs; tests/harness/test_suite.py and test_cli.py check more variants of some of
them (and the messages' wording in more detail).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from harness.core.errors import printable
from tests.conftest import REPO_ROOT, CliResult, dump, tiny_doc
from tests.harness.kinds.accuracy.test_kind import ACC
from tests.harness.kinds.accuracy.test_loaders import BAD_DATA
from tests.harness.kinds.accuracy.test_release import write_pathfinder
from tests.harness.kinds.forecasting.test_kind import _exchange_like as exchange_like
from tests.harness.kinds.forecasting.test_kind import _ili_like as ili_like

# Every cell skipped: should a bad input slip through, the run costs nothing (and the test still fails).
SKIP_ALL = [{"when": {"seq_len": {"ge": 1}}, "reason": "never measured in this test"}]


def _duplicate_axis() -> str:
    """The tiny suite with ``seq_len`` given twice under ``axes`` (PyYAML alone keeps the last one silently)."""
    text = dump(tiny_doc(metrics=["time"], skip=SKIP_ALL))
    assert "\naxes:\n" in text
    return text.replace("\naxes:\n", "\naxes:\n  seq_len:\n  - 64\n", 1)


def _alias_bomb(key: str) -> str:
    """The tiny suite with a billion-laughs alias bomb (9**9 strings once expanded, ~700 bytes) under ``key``.

    ``key`` is ``description`` or ``skip``; in a skip rule the bomb is the condition of ``seq_len``.
    """
    doc = tiny_doc()
    doc.pop(key, None)
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{cur}: &{cur} [{', '.join([f'*{prev}'] * 9)}]"  # each level lists the previous one 9 times
              for prev, cur in zip("abcdefgh", "bcdefghi", strict=True)]
    if key == "description":
        return dump(doc) + "description:\n" + "".join(f"  {line}\n" for line in lines)
    return dump(doc) + "skip:\n- reason: x\n  when:\n    seq_len:\n" + "".join(f"      {line}\n" for line in lines)


def _acc(**changes: Any) -> dict[str, Any]:
    """The accuracy suite of the accuracy-kind tests with ``changes`` merged into its top-level mappings."""
    doc = copy.deepcopy(ACC)
    for key, value in changes.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and isinstance(doc.get(key), dict) else value
    return doc


#: A small approximation suite; ``_approx`` changes it.
APPROX: dict[str, Any] = {
    "name": "ap", "kind": "approximation", "axes": {"attention": ["vanilla_sdpa", "performer"], "seq_len": [64]},
    "budgets": {"performer": {"nb_features": [16, 64]}}, "profiles": {"smoke": {}, "quick": {}, "paper": {}},
}


def _approx(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(APPROX)
    doc.update(changes)
    return doc


def _garbage_probe(tmp: Path) -> None:
    (tmp / "probes").mkdir()
    (tmp / "probes" / "x.pt").write_bytes(b"not a torch file")


def _dangling_link(tmp: Path) -> None:
    (tmp / "dangling").symlink_to(tmp / "nowhere")


def _looping_link(tmp: Path) -> None:
    (tmp / "loop").symlink_to(tmp / "loop")


def _file_in_the_way(tmp: Path) -> None:
    (tmp / "file.txt").write_text("not a directory")


def _read_only_dir(tmp: Path) -> None:
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o555)


@dataclass(frozen=True)
class Bad:
    """One bad input. ``{suite}`` and ``{tmp}`` in args and expectations stand for the suite file and tmp_path.

    Attributes:
        suite: the suite file's text, or its bytes (written as they are), or a document dumped as YAML, or None for
            a file that does not exist, or a function of what ``setup`` returned giving one of those.
        args: arguments after ``run SUITE --out {tmp}/out --device cpu`` (a later --out or --device wins).
        where: the file or flag the line must name.
        key: the key or value the line must name (None where the whole input is wrong).
        fix: the part of the line that says how to fix it.
        setup: prepares tmp_path before the run.
        skip: a reason why this machine cannot show the case, or None.
        never: a path (under tmp_path) that must not exist afterwards: what the bad input must not have done.
    """

    suite: str | bytes | dict[str, Any] | Callable[[Any], dict[str, Any]] | None
    args: tuple[str, ...] = ()
    where: str = "{suite}"
    key: str | None = None
    fix: str = ""
    setup: Callable[[Path], Any] | None = None
    skip: str | None = None
    never: str | None = None


CUDA = "CUDA is available here" if torch.cuda.is_available() else None
ROOT = "root writes into read-only directories" if hasattr(os, "geteuid") and os.geteuid() == 0 else None

CASES = [
    # the file
    pytest.param(Bad(None, key=None, fix="give a path such as suites/speed.yaml"), id="missing-suite-file"),
    pytest.param(Bad("name: tiny\naxes: {attention: [vanilla\n", key="line 3", fix="fix the syntax"),
                 id="yaml-syntax"),
    pytest.param(Bad("- vanilla\n- s3attention\n", fix="must be a mapping of keys, got list"), id="list-document"),
    pytest.param(Bad("just some text\n", fix="must be a mapping of keys, got str"), id="scalar-document"),
    pytest.param(Bad("name: !!python/object/apply:os.system ['touch {tmp}/pwned']\n",
                     key="python/object/apply:os.system", fix="remove the tag", never="pwned"), id="python-tag"),
    pytest.param(Bad(_duplicate_axis(), key="duplicate key 'seq_len'", fix="each key once per mapping"),
                 id="duplicate-axis"),
    pytest.param(Bad(_alias_bomb("description"), key="aliases expand to more than 100000 values",
                     fix="write the values out instead of nesting aliases"), id="yaml-alias-bomb-in-description"),
    pytest.param(Bad(_alias_bomb("skip"), key="aliases expand to more than 100000 values",
                     fix="write the values out instead of nesting aliases"), id="yaml-alias-bomb-in-skip-when"),
    pytest.param(Bad(dump(tiny_doc()) + "config: " + "[" * 50_000 + "]" * 50_000 + "\n",
                     key="nested more than 100 levels deep", fix="flatten it"), id="yaml-nested-50000-deep"),
    pytest.param(Bad(dump(tiny_doc()) + "config: &c [*c]\n", key="alias *c inside the node it names (a cycle)",
                     fix="remove the alias"), id="yaml-alias-cycle"),
    pytest.param(Bad("name: tiny\n? [a, b]\n: 1\n", key="found unhashable key", fix="fix the syntax"),
                 id="yaml-list-as-key"),
    # the text itself: dump() would escape the é as "\xE9", which is ASCII
    pytest.param(Bad(dump(tiny_doc(skip=SKIP_ALL)).replace("two modes", "caf\u00e9").encode("latin-1"),
                     key="line 2: not UTF-8 text (byte 0xe9)", fix="save it as UTF-8"), id="suite-not-utf8"),
    # keys and values
    pytest.param(Bad(tiny_doc(colour="blue"), key="colour", fix="unknown key; valid keys here"),
                 id="unknown-top-level-key"),
    pytest.param(Bad(tiny_doc(axes={"seqlen": [16]}), key="axes.seqlen", fix="valid axes: attention"),
                 id="unknown-axis"),
    pytest.param(Bad(tiny_doc(axes={"seq_len": []}), key="axes.seq_len", fix="give at least one of positive integers"),
                 id="empty-axis"),
    pytest.param(Bad(tiny_doc(axes={"seq_len": ["long"]}), key="axes.seq_len",
                     fix="bad value 'long'; expected positive integers"), id="string-seq-len"),
    pytest.param(Bad(tiny_doc(axes={"heads": [True]}), key="axes.heads", fix="bad value True; expected positive"),
                 id="bool-heads"),
    pytest.param(Bad(tiny_doc(axes={"seq_len": [16, -32]}), key="axes.seq_len", fix="bad value -32; expected positive"),
                 id="negative-seq-len"),
    pytest.param(Bad(tiny_doc(axes={"batch_size": [0]}), key="axes.batch_size", fix="bad value 0; expected positive"),
                 id="zero-batch-size"),
    pytest.param(Bad(tiny_doc(axes={"attention": ["vanila"]}), key="axes.attention",
                     fix="unknown attention 'vanila'. Did you mean vanilla"), id="unknown-attention"),
    pytest.param(Bad(tiny_doc(axes={"attention": ["nosuch*"]}), key="axes.attention",
                     fix="'nosuch*' matches no registered attention; see `attnbench list`"),
                 id="pattern-matches-nothing"),
    pytest.param(Bad(tiny_doc(config={"rank": 4}), key="config", fix="unknown config field(s) rank; valid fields"),
                 id="unknown-config-field"),
    pytest.param(Bad(tiny_doc(name="../escape"), key="name", fix="must be letters, digits, '-' or '_'",
                     never="escape"),
                 id="name-escapes-the-output-dir"),
    pytest.param(Bad(tiny_doc(timing={"flush_l2": "yes"}), key="timing.flush_l2", fix="must be true or false"),
                 id="flush-l2-not-a-bool"),
    # numbers: every one checked when the suite loads, not as a hang, an error cell or a traceback after the sweep
    pytest.param(Bad(tiny_doc(axes={"seq_len": [9999999999999999999999]}), key="axes.seq_len",
                     fix="too large; give at most 2147483647"), id="axis-seq-len-huge"),
    pytest.param(Bad(tiny_doc(timing={"min_run_time_s": float("nan")}), key="timing.min_run_time_s",
                     fix="must be a finite positive number"), id="timing-min-run-time-nan"),
    pytest.param(Bad(tiny_doc(timing={"min_run_time_s": float("inf")}), key="timing.min_run_time_s",
                     fix="must be a finite positive number"), id="timing-min-run-time-inf"),
    pytest.param(Bad(tiny_doc(timing={"min_repeats": 2.5}), key="timing.min_repeats",
                     fix="must be a non-negative integer"), id="timing-min-repeats-fraction"),
    pytest.param(Bad(tiny_doc(timing={"warmup": 0.5}), key="timing.warmup", fix="must be a non-negative integer"),
                 id="timing-warmup-fraction"),
    pytest.param(Bad(tiny_doc(fixed={"layers": -1}), key="fixed.layers", fix="must be a positive integer"),
                 id="fixed-layers-negative"),
    pytest.param(Bad(tiny_doc(fixed={"vocab_size": 0}), key="fixed.vocab_size", fix="must be a positive integer"),
                 id="fixed-vocab-size-0"),
    pytest.param(Bad(tiny_doc(fixed={"mlp_dim": 2**31}), key="fixed.mlp_dim",
                     fix="must be a positive integer (at most 2147483647)"), id="fixed-mlp-dim-huge"),
    pytest.param(Bad(tiny_doc(fixed={"num_classes": 1.5}), key="fixed.num_classes", fix="must be a positive integer"),
                 id="fixed-num-classes-fraction"),
    pytest.param(Bad(tiny_doc(fixed={"seed": "abc"}), key="fixed.seed", fix="must be a non-negative integer"),
                 id="fixed-seed-text"),
    pytest.param(Bad(tiny_doc(report={"slope_min_seq_len": "abc"}), key="report.slope_min_seq_len",
                     fix="must be a positive integer"), id="report-slope-min-seq-len-text"),
    pytest.param(Bad(tiny_doc(report={"baseline": ["a", "b"]}), key="report.baseline",
                     fix="must be a non-empty string, got ['a', 'b']"), id="report-baseline-list"),
    pytest.param(Bad(tiny_doc(report={"compare_reference": 3}), key="report.compare_reference",
                     fix="must be a registered attention's name, or null"), id="report-compare-reference-number"),
    pytest.param(Bad(tiny_doc(report={"tables": "table4"}), key="report.tables", fix="must be a list of table4"),
                 id="report-tables-not-a-list"),
    pytest.param(Bad(tiny_doc(train={"steps": 4}), key="train", fix="only accuracy suites have this key"),
                 id="accuracy-key-in-a-speed-suite"),
    pytest.param(Bad(_acc(metrics=["time"]), key="metrics", fix="only speed suites have this key"),
                 id="speed-key-in-an-accuracy-suite"),
    # training and data settings: every field checked at load time, not as a ZeroDivisionError in every cell
    pytest.param(Bad(_acc(train={"batch_size": 0}), key="train.batch_size", fix="must be a positive integer, got 0"),
                 id="train-batch-size-0"),
    pytest.param(Bad(_acc(train={"eval_every": 0}), key="train.eval_every", fix="must be a positive integer, got 0"),
                 id="train-eval-every-0"),
    pytest.param(Bad(_acc(train={"steps": -1}), key="train.steps", fix="must be a non-negative integer"),
                 id="train-steps-negative"),
    pytest.param(Bad(_acc(train={"pooling": "max"}), key="train.pooling",
                     fix="must be one of mean, cls, mean_all, got 'max'"), id="train-pooling-max"),
    pytest.param(Bad(_acc(report={"row_names": ["Transformer"]}), key="report.row_names",
                     fix="must map attention names to row names"), id="report-row-names-not-a-mapping"),
    pytest.param(Bad(_acc(train={"recipe": "paper"}), key="train.recipe",
                     fix="must be one of harness, released, got 'paper'"), id="train-recipe-unknown"),
    pytest.param(Bad(_acc(train={"lr": "1e-3"}), key="train.lr", fix="write 1.0e-3, not 1e-3"),
                 id="train-lr-as-yaml-text"),
    pytest.param(Bad(_acc(train={"dropout": 1.0}), key="train.dropout", fix="must be a number in [0, 1)"),
                 id="train-dropout-1"),
    pytest.param(Bad(_acc(tasks={"text": {"seq_len": 64, "train": {"warmup_steps": -1}}}),
                     key="tasks.text.train.warmup_steps", fix="must be a non-negative integer"),
                 id="task-train-negative-warmup"),
    pytest.param(Bad(_acc(train={"dim": 10, "heads": 4}), key="train.heads", fix="must divide dim = 10"),
                 id="train-heads-do-not-divide-dim"),
    pytest.param(Bad(_acc(data={"seed": -1}), key="data.seed", fix="must be a non-negative integer"),
                 id="data-seed-negative"),
    pytest.param(Bad(_acc(probes={"examples": 0}), key="probes.examples", fix="must be a positive integer, got 0"),
                 id="probes-examples-0"),
    pytest.param(Bad(_acc(data={"sizes": [10, 0, 5]}), key="data.sizes", fix="three positive integers"),
                 id="data-size-0"),
    # sizes beyond the machine's memory: one line now, not a minute of generating and an OOM
    pytest.param(Bad(_acc(data={"sizes": [2147483647, 16, 16]}), key="data.sizes",
                     fix="more than half of this machine's"), id="data-sizes-beyond-memory"),
    pytest.param(Bad(_acc(tasks={"text": {"seq_len": 64, "sizes": [10**9, 16, 16]}}), key="tasks.text.sizes",
                     fix="make it smaller"), id="task-sizes-beyond-memory"),
    pytest.param(Bad(_acc(tasks={"text": {"seq_len": 64, "sizes": [16, 16]}}), key="tasks.text.sizes",
                     fix="must be three positive integers"), id="task-sizes-two-numbers"),
    # approximation suites: budgets, inputs, fixed shape
    pytest.param(Bad(_approx(budgets={"performer": {"nb_features": 64}}), key="budgets.performer.nb_features",
                     fix="must be a list of distinct values"), id="approx-budget-not-a-list"),
    pytest.param(Bad(_approx(budgets={"performer": {"nb_feature": [64]}}), key="budgets (nb_feature=64)",
                     fix="unknown config field(s) nb_feature"), id="approx-budget-unknown-field"),
    pytest.param(Bad(_approx(inputs={"x": {"kind": "uniform"}}), key="inputs.x.kind",
                     fix="must be one of gaussian, trained"), id="approx-input-kind-unknown"),
    pytest.param(Bad(_approx(inputs={"t": {"kind": "trained", "attention": "vanilla", "seed": 0}}), key="inputs.t",
                     fix="a trained input needs attention, seed, task"), id="approx-trained-input-without-task"),
    pytest.param(Bad(_approx(axes={"attention": ["performer"], "seq_len": [64], "input": ["noise"]}),
                     key="axes.input", fix="unknown input 'noise'; defined under `inputs`: gaussian"),
                 id="approx-unknown-input-label"),
    pytest.param(Bad(_approx(data={"dir": "{tmp}/nonexistent"}), key="data.dir",
                     fix="is not a directory; give the results directory of an accuracy run"),
                 id="approx-data-dir-missing"),
    pytest.param(Bad(_approx(data={"dir": "{tmp}"}, inputs={"t": {"kind": "trained", "attention": "vanilla",
                                                                   "task": "text", "seed": 0}}),
                     key="{tmp}/probes/x.pt is not a readable probe", fix="delete it or rerun the accuracy suite",
                     setup=_garbage_probe), id="approx-probe-unreadable"),
    pytest.param(Bad(_approx(fixed={"matrix_max_seq_len": 0}), key="fixed.matrix_max_seq_len",
                     fix="must be a positive integer, got 0"), id="approx-fixed-zero"),
    # profiles
    pytest.param(Bad(tiny_doc(), ("--profile", "nosuch"), key="unknown profile 'nosuch'",
                     fix="choose one of smoke, quick, paper"), id="unknown-profile"),
    pytest.param(Bad(tiny_doc(profiles={"smoke": [1], "quick": {}, "paper": {}}), key="profiles.smoke",
                     fix="must be a mapping"), id="profile-not-a-mapping"),
    # a profile names the output folder <out>/<suite>/<profile>, like the suite's name
    pytest.param(Bad(tiny_doc(profiles={"smoke": {}, "quick": {}, "paper": {}, "../../escape": {}}),
                     ("--profile", "../../escape"), key="profiles.../../escape",
                     fix="must be letters, digits, '-' or '_'", never="escape"), id="profile-escapes-the-output-dir"),
    pytest.param(Bad(tiny_doc(profiles={"smoke": {}, "quick": {}, "paper": {}, "{tmp}/abs": {}}),
                     ("--profile", "{tmp}/abs"), key="profiles.{tmp}/abs", fix="must be letters, digits, '-' or '_'",
                     never="abs"), id="profile-absolute-path"),
    pytest.param(Bad(tiny_doc(profiles={"smoke": {}, "quick": {}, "paper": {}, "p" * 256: {}}),
                     ("--profile", "p" * 256), key=f"profiles.{'p' * 256}",
                     fix="256 bytes long, more than a folder name may have (255); shorten it"),
                 id="profile-name-too-long"),
    pytest.param(Bad(tiny_doc(name="n" * 256), key="name", fix="shorten it"), id="suite-name-too-long"),
    pytest.param(Bad(tiny_doc(name=123), key="name: 123 must be text", fix='quote it: name: "123"'),
                 id="name-a-number"),
    # where the bad value was written: the profile's own key, the flag
    pytest.param(Bad(tiny_doc(profiles={"smoke": {"timing": {"colour": 1}}, "quick": {}, "paper": {}}),
                     ("--profile", "smoke"), key="profiles.smoke.timing.colour", fix="unknown key; valid keys here"),
                 id="unknown-key-in-a-profile"),
    pytest.param(Bad(tiny_doc(), ("--set", "config.dropout=.nan"), where="--set: config.dropout=nan",
                     key="dropout must be in [0, 1)"), id="set-config-nan"),
    # flags
    pytest.param(Bad(tiny_doc(), ("--device", "tpu"), where="--device", key="tpu", fix="use cpu, cuda or cuda:N"),
                 id="unknown-device"),
    pytest.param(Bad(tiny_doc(), ("--device", "cuda"), where="--device cuda", key="CUDA is not available",
                     fix="use --device cpu", skip=CUDA), id="cuda-without-cuda"),
    pytest.param(Bad(tiny_doc(), ("--set", "nosuch=1"), where="--set", key="nosuch", fix="valid axes: attention"),
                 id="set-unknown-axis"),
    # --set values are checked with the file's axes, but the line names the flag the user typed, not the file
    pytest.param(Bad(tiny_doc(), ("--set", "seq_len=9999999999999999999999"), where="--set: seq_len",
                     key="9999999999999999999999", fix="too large; give at most 2147483647"), id="set-seq-len-huge"),
    pytest.param(Bad(tiny_doc(), ("--set", "seq_len=abc"), where="--set: seq_len", key="bad value 'abc'",
                     fix="expected positive integers"), id="set-bad-value"),
    pytest.param(Bad(tiny_doc(), ("--set", "task=listops"), where="--set: task", key="unknown axis for a speed suite",
                     fix="valid axes: attention"), id="set-axis-of-another-kind"),
    pytest.param(Bad(tiny_doc(), ("--threads", "99999999999"), where="--threads 99999999999",
                     key="positive number of intra-op threads", fix="at most"), id="threads-huge"),
    pytest.param(Bad(tiny_doc(), ("--out", "/proc/attnbench-nowhere"), where="/proc/attnbench-nowhere",
                     key="cannot be created or written", fix="choose another output directory",
                     skip=None if Path("/proc/self").is_dir() else "no /proc here"), id="out-under-proc"),
    pytest.param(Bad(tiny_doc(), ("--require-quiet", "--quiet-timeout", "0"), where="--quiet-timeout", key="0",
                     fix="must be a positive number of seconds"), id="quiet-timeout-zero"),
    pytest.param(Bad(tiny_doc(), ("--set", "seq_len"), where="--set", key="seq_len",
                     fix="expected AXIS=V1,V2,... e.g. --set seq_len=1024,2048"), id="set-without-equals"),
    pytest.param(Bad(tiny_doc(), ("--out", "{tmp}/file.txt/results"), where="--out {tmp}/file.txt/results",
                     key="{tmp}/file.txt is not a writable directory", fix="choose another output directory",
                     setup=_file_in_the_way), id="out-under-a-file"),
    pytest.param(Bad(tiny_doc(), ("--out", "{tmp}/ro/results"), where="--out {tmp}/ro/results",
                     key="{tmp}/ro is not a writable directory", fix="choose another output directory",
                     setup=_read_only_dir, skip=ROOT), id="out-read-only"),
    pytest.param(Bad(tiny_doc(), ("--out", ""), where="--out ''", key="empty", fix="give an output directory"),
                 id="out-empty"),
    pytest.param(Bad(tiny_doc(), ("--out", "{tmp}/dangling/results"), where="--out {tmp}/dangling/results",
                     key="{tmp}/dangling is a dangling or looping symlink", fix="choose another output directory",
                     setup=_dangling_link), id="out-dangling-symlink"),
    pytest.param(Bad(tiny_doc(), ("--out", "{tmp}/loop/results"), where="--out {tmp}/loop/results",
                     key="{tmp}/loop is a dangling or looping symlink", fix="choose another output directory",
                     setup=_looping_link), id="out-looping-symlink"),
    pytest.param(Bad(tiny_doc(), ("--only", ""), where="--only ''", key="names no attention",
                     fix="give a name or pattern"), id="only-empty"),
    pytest.param(Bad(tiny_doc(), ("--only", "vanila"), where="--only 'vanila'", key="matches no registered attention",
                     fix="did you mean vanilla"), id="only-typo"),
    pytest.param(Bad(ACC, ("--profile", "smoke", "--data-dir", "/nonexistent"), where="--data-dir /nonexistent",
                     key="no such directory", fix="give the folder holding the LRA files"), id="data-dir-missing"),
    pytest.param(Bad(tiny_doc(), ("--executor", "ray"), where="--executor ray", key="Ray is not installed",
                     fix="pip install"), id="executor-not-installed"),
]


# Numbers YAML reads otherwise, names that would break a table or drive the terminal, settings that would hold a sweep
# for hours or fail in every cell, flags that would drop what they name, an --out no file system takes.
ESCAPES = "\x1b[2J\x1b]0;owned\x07\x1b[31mFAKE: all cells ok"
CASES += [
    pytest.param(Bad(tiny_doc(axes={ESCAPES: [1]}), key=printable(f"axes.{ESCAPES}"), fix="unknown axis"),
                 id="suite-key-with-terminal-escapes"),
    pytest.param(Bad(dump(tiny_doc()).replace("  - 16\n", "  - 064\n", 1),
                     key="064 is an integer with a leading zero, which YAML reads as octal (52)",
                     fix='write 64 (or "064" for text)'), id="yaml-leading-zero-octal"),
    pytest.param(Bad(tiny_doc(), ("--set", "seq_len=064"), where="--set: seq_len=064", key="reads as octal (52)",
                     fix="write 64"), id="set-leading-zero-octal"),
    pytest.param(Bad(tiny_doc(kind=["speed"]), key="kind: unknown kind ['speed']", fix="choose one of speed"),
                 id="kind-a-list"),
    pytest.param(Bad(tiny_doc(skip=[{"when": {"mode": {"gt": 3}}, "reason": "x"}]), key="skip[0].when.mode",
                     fix="name the values to skip instead"), id="skip-number-compared-with-a-text-axis"),
    pytest.param(Bad(tiny_doc(report={"baseline": "nosuchvariant"}), key="report.baseline",
                     fix="unknown attention 'nosuchvariant'"), id="report-baseline-unregistered"),
    pytest.param(Bad(tiny_doc(report={"row_names": {"vanilla": "Trans\nformer"}}), key="report.row_names.vanilla",
                     fix="a row name is one line of plain text"), id="report-row-name-with-a-newline"),
    pytest.param(Bad(tiny_doc(timing={"min_run_time_s": 1.0e300}), key="timing.min_run_time_s", fix="at most 3600"),
                 id="timing-min-run-time-1e300"),
    pytest.param(Bad(tiny_doc(timing={"min_repeats": 2147483647}), key="timing.min_repeats", fix="at most 10000"),
                 id="timing-min-repeats-int-max"),
    pytest.param(Bad(_acc(tasks={"text": {"seq_len": 64, "gen": {"content_rate": 2}}}), key="tasks.text.gen",
                     fix="content_rate must be in (0, 1]"), id="task-generator-parameter-out-of-range"),
    pytest.param(Bad(_acc(tasks={"listops": {"seq_len": 1048576}}), key="tasks.listops.seq_len",
                     fix="lower seq_len"), id="listops-seq-len-its-generator-cannot-fill"),
    pytest.param(Bad(tiny_doc(), ("--only", "vanilla,performer"), where="--only performer",
                     key="matches none of this suite's attentions", fix="drop it"),
                 id="only-a-registered-attention-the-suite-lacks"),
    pytest.param(Bad(tiny_doc(), ("--set", "config.dropout=0.1", "--set", "config.dropout=0.2"),
                     where="--set: config.dropout", key="given twice", fix="give it once"),
                 id="set-a-config-field-twice"),
    pytest.param(Bad(tiny_doc(), ("--out", "{tmp}/" + "o" * 300), where="--out {tmp}/o",
                     key="a folder name of 300 bytes", fix="choose a shorter output directory"),
                 id="out-name-of-300-characters"),
    pytest.param(Bad(_acc(variants={"base": {}, f"v{ESCAPES}": {"dropout": 0.0}}),
                     key=printable(f"variants.v{ESCAPES}"), fix="a non-empty line of text without commas"),
                 id="variant-label-with-terminal-escapes"),
]

def _bad_data(make: Callable[[Path], tuple[str, Path]], problem: str) -> Bad:
    """A real dataset under ``{tmp}/data`` that ``make`` spoils (tests/harness/kinds/accuracy/test_loaders.py):
    refused before anything is written, naming the file and what is wrong, and never unpickling code."""
    return Bad(lambda task: {**ACC, "axes": {"attention": ["vanilla"], "task": [task], "seed": [0]},
                             "tasks": {task: {"seq_len": 16}}},
               ("--profile", "smoke", "--data-dir", "{tmp}/data"), where="{tmp}/data", key=problem, fix="expected",
               setup=lambda tmp: make(tmp / "data")[0], never="data/pwned")


CASES += [pytest.param(_bad_data(make, problem), id=f"data-{make.__name__.replace('_', '-')}")
          for make, problem in BAD_DATA]


# Data files that name what lies outside --data-dir, or hold values no model can learn from: one line before anything
# is written (the readers' own tests hold more of each).
def _pathfinder_metadata(line: str) -> Callable[[Path], None]:
    """Pathfinder's release layout under ``{tmp}/data``, its second metadata file holding ``line`` only."""
    def setup(tmp: Path) -> None:
        folder = tmp / "data" / "pathfinder32" / "curv_contour_length_14"
        write_pathfinder(folder)
        (folder / "metadata" / "1.npy").write_text(line)

    return setup


def _forecasting_inf_in_a_training_row(tmp: Path) -> None:
    (tmp / "data").mkdir()
    frame = exchange_like(1000)
    frame.loc[10, "OT"] = np.inf
    frame.to_csv(tmp / "data" / "exchange_rate.csv", index=False)
    ili_like(300).to_csv(tmp / "data" / "national_illness.csv", index=False)


_PATHFINDER = {**ACC, "axes": {"attention": ["vanilla"], "task": ["pathfinder"], "seed": [0]},
               "tasks": {"pathfinder": {"seq_len": 1024}}}
_METADATA = "{tmp}/data/pathfinder32/curv_contour_length_14/metadata/1.npy:1: names "
CASES += [
    pytest.param(Bad(_PATHFINDER, ("--profile", "smoke", "--data-dir", "{tmp}/data"), where=_METADATA + "/etc/shadow",
                     key="outside the data folder", fix="attnbench reads nothing outside --data-dir",
                     setup=_pathfinder_metadata("/etc shadow 0 1\n")), id="data-pathfinder-metadata-names-etc-shadow"),
    pytest.param(Bad(_PATHFINDER, ("--profile", "smoke", "--data-dir", "{tmp}/data"), where=_METADATA,
                     key="resolves to /etc/passwd, outside the data folder",
                     fix="attnbench reads nothing outside --data-dir",
                     setup=_pathfinder_metadata("../../../../../../../../../../etc passwd 0 1\n")),
                 id="data-pathfinder-metadata-dotdot-etc-passwd"),
    pytest.param(Bad((REPO_ROOT / "suites" / "forecasting.yaml").read_text(),
                     ("--profile", "smoke", "--data-dir", "{tmp}/data"), where="{tmp}/data/exchange_rate.csv",
                     key="value inf in data row 11, column 'OT' is not finite", fix="replace it with a number",
                     setup=_forecasting_inf_in_a_training_row), id="data-forecasting-inf-in-a-training-row"),
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_exits_2_with_one_line(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: Bad,
                                         record_property: Callable[[str, object], None]) -> None:
    if case.skip:
        pytest.skip(case.skip)
    made = case.setup(tmp_path) if case.setup else None
    if callable(case.suite):
        case = dataclasses.replace(case, suite=case.suite(made))
    if case.suite is None:
        suite = tmp_path / "nosuch.yaml"
    elif isinstance(case.suite, bytes):
        suite = tmp_path / "bad.yaml"
        suite.write_bytes(case.suite)
    else:
        text = case.suite if isinstance(case.suite, str) else dump(case.suite)
        suite = write_yaml(text.replace("{tmp}", str(tmp_path)), "bad.yaml")
    if "--executor" in case.args:
        monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, installed or not

    def sub(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{suite}", str(suite))

    out = tmp_path / "out"
    result = cli("run", suite, "--out", out, "--device", "cpu", *map(sub, case.args))

    # the catalogue as it reads (``pytest --junitxml`` keeps these): exit code and message per case
    record_property("exit_code", result.code)
    record_property("message", result.err.strip().replace(str(tmp_path), "{tmp}"))
    assert result.code == 2, (result.out, result.err)
    assert len(result.err_lines) == 1 and result.err.count("\n") == 1, result.err  # one line, no traceback
    line = result.err_lines[0]
    assert line.startswith("attnbench: error: ") and line.isprintable()  # what it quotes cannot drive the terminal
    assert sub(case.where) in line, "the line must name the file or flag"
    if case.key is not None:
        assert sub(case.key) in line, "the line must name the key"
    assert sub(case.fix) in line, "the line must say how to fix it"
    assert result.out == ""
    assert not out.exists()  # refused before anything was written
    if case.never is not None:
        assert not (tmp_path / case.never).exists()


@pytest.mark.parametrize(("name", "problem"), [
    ("a-directory", "a directory, not a suite file; give a YAML file"),
    ("s" * 300 + ".yaml", "cannot be read as a suite file (File name too long)"),
])
def test_a_suite_path_that_is_not_a_file_is_one_line(cli: Callable[..., CliResult], tmp_path: Path, name: str,
                                                     problem: str) -> None:
    if name == "a-directory":
        (tmp_path / name).mkdir()
    result = cli("run", tmp_path / name, "--out", tmp_path / "out", "--device", "cpu")
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert problem in result.err and str(tmp_path / name) in result.err
    assert not (tmp_path / "out").exists()


def test_env_on_an_unknown_device_is_one_line(cli: Callable[..., CliResult]) -> None:
    result = cli("env", "--device", "tpu")
    assert result.code == 2 and result.err_lines == ["attnbench: error: --device 'tpu': not a device; use cpu, cuda "
                                                     "or cuda:N"]
