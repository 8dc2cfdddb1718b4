"""Tests of harness.run.suitefile: profiles, patterns, --set, cell keys, skip rules, one-line errors for bad files."""

from __future__ import annotations

import re
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import attentions
from harness.core.cell import Cell
from harness.core.errors import SuiteError
from harness.core.suite import expand_patterns
from harness.run.suitefile import load_suite, parse_set
from tests.conftest import REPO_ROOT, TINY_SUITE, CliResult, dump, tiny_doc

# ---------------------------------------------------------------------------------------------------
# Profiles and patterns


def test_profile_merges_axes_per_axis_and_replaces_other_keys(write_yaml: Callable[..., Path]) -> None:
    doc = tiny_doc(
        skip=[{"when": {"seq_len": 16}, "reason": "top"}],
        profiles={
            "smoke": {
                "axes": {"seq_len": [64]},
                "metrics": ["memory"],
                "skip": [{"when": {"mode": "fwd"}, "reason": "profile"}],
                "timing": {"min_repeats": 3},
                "description": "smoke profile",
            },
            "quick": {},
            "paper": None,
        },
    )
    path = write_yaml(doc)
    smoke = load_suite(path, "smoke")
    assert smoke.axes["seq_len"] == [64]  # the profile's axis wins ...
    for axis in ("attention", "batch_size", "heads", "dim", "mode", "dtype"):
        assert smoke.axes[axis] == TINY_SUITE["axes"][axis]  # ... the others are kept
    assert smoke.settings.metrics == ("memory",)
    assert smoke.skip == [{"when": {"mode": "fwd"}, "reason": "profile"}]
    # timing is a mapping like axes: merged per key
    assert smoke.settings.timing == {**TINY_SUITE["timing"], "min_repeats": 3, "flush_l2": False}
    assert smoke.profile == "smoke"

    quick = load_suite(path, "quick")
    assert quick.axes == {**TINY_SUITE["axes"], "compile": ["eager"]}  # the default compile axis
    assert quick.settings.metrics == tuple(TINY_SUITE["metrics"])
    assert quick.skip == doc["skip"]
    assert load_suite(path, "paper").axes == quick.axes  # an empty (null) profile changes nothing


def test_top_level_defaults(write_yaml: Callable[..., Path]) -> None:
    doc = tiny_doc()
    for key in ("metrics", "timing", "report", "description"):
        del doc[key]
    suite = load_suite(write_yaml(doc))
    assert suite.settings.metrics == ("time", "memory", "flops")
    assert suite.settings.timing == {"min_run_time_s": 1.0, "min_repeats": 5, "warmup": 2, "flush_l2": False}
    assert suite.report["baseline"] == "vanilla"
    assert suite.settings.fixed["layers"] == 2 and suite.settings.fixed["seed"] == 0
    assert suite.name == "tiny"


def test_name_defaults_to_file_stem(write_yaml: Callable[..., Path]) -> None:
    doc = tiny_doc()
    del doc["name"]
    assert load_suite(write_yaml(doc, "my-suite.yaml")).name == "my-suite"


def test_patterns_expand_without_duplicates(write_yaml: Callable[..., Path]) -> None:
    path = write_yaml(tiny_doc(axes={"attention": ["s3*"]}))
    assert load_suite(path).attentions() == ["s3attention", "s3attention_released"]

    path = write_yaml(tiny_doc(axes={"attention": ["s3attention", "vanilla", "s3*"]}), "b.yaml")
    # a pattern overlapping a listed name is deduplicated, keeping the first position
    assert load_suite(path).attentions() == ["s3attention", "vanilla", "s3attention_released"]
    cells = load_suite(path).expand("cpu")
    assert len(cells) == 3 * 2 * 2
    assert len({c.key for c in cells}) == len(cells)
    assert expand_patterns(["vanilla", "vanilla*"])[0] == "vanilla"
    assert len(expand_patterns(["*", "*"])) == len(set(expand_patterns(["*"])))


# ---------------------------------------------------------------------------------------------------
# --set


def test_parse_set_values() -> None:
    assert parse_set(["seq_len=16,32", "mode=fwd", "attention=vanilla,s3*", "dtype=float32"]) == {
        "seq_len": [16, 32],
        "mode": ["fwd"],
        "attention": ["vanilla", "s3*"],
        "dtype": ["float32"],
    }
    assert parse_set([]) == {}
    assert parse_set(["seq_len=16", "seq_len=64"]) == {"seq_len": [16, 64]}  # both: none is dropped without a word


@pytest.mark.parametrize("item", ["seq_len", "=16", "seq_len="])
def test_parse_set_malformed(item: str) -> None:
    with pytest.raises(SuiteError, match="--set"):
        parse_set([item])


@pytest.mark.parametrize("item", ["nosuch=1", "seq-len=16", "horizon=96", "config.=1"])
def test_set_names_only_the_axes_of_the_suites_kind(tiny_suite: Path, item: str) -> None:
    """An axis no kind has listed every kind's axes as valid (a speed suite's error offered task, noise, horizon)."""
    with pytest.raises(SuiteError, match=r"^--set: \S+: unknown axis for a speed suite; valid axes: attention") as err:
        load_suite(tiny_suite, "quick", parse_set([item]))
    assert not {"task", "noise", "horizon", "dataset"} & set(str(err.value).replace(",", " ").split())


def test_parse_set_yaml_error_is_a_suite_error() -> None:
    with pytest.raises(SuiteError, match="--set"):
        parse_set(["mode=[fwd"])


def test_set_overrides_replace_the_profile_axis(tiny_suite: Path) -> None:
    suite = load_suite(tiny_suite, "paper", parse_set(["seq_len=24", "attention=s3*"]))
    assert suite.axes["seq_len"] == [24]
    assert suite.attentions() == ["s3attention", "s3attention_released"]
    # the error names what the user typed (--set), not the file's axis
    with pytest.raises(SuiteError, match=r"^--set: seq_len: bad value 'abc'"):
        load_suite(tiny_suite, "quick", parse_set(["seq_len=abc"]))
    with pytest.raises(SuiteError, match=r"^--set: mode: bad value 'backward'"):
        load_suite(tiny_suite, "quick", parse_set(["mode=fwd,backward"]))


def test_set_errors_name_the_flag_and_file_errors_name_the_file(tiny_suite: Path,
                                                                write_yaml: Callable[..., Path]) -> None:
    path = tiny_suite
    with pytest.raises(SuiteError, match=r"^--set: seq_len: bad value 2147483648: too large; give at most"):
        load_suite(path, "quick", parse_set(["seq_len=2147483648"]))
    with pytest.raises(SuiteError, match=r"^--set: task: unknown axis for a speed suite"):
        load_suite(path, "quick", parse_set(["task=listops"]))
    with pytest.raises(SuiteError, match=r"^--set: attention: pattern 'nosuch\*' matches no registered attention"):
        load_suite(path, "quick", parse_set(["attention=nosuch*"]))
    # an axis --set does not touch keeps the file's name in its error
    path = write_yaml(tiny_doc(axes={"mode": ["backward"]}), "bad.yaml")
    with pytest.raises(SuiteError, match=rf"^{path}: axes\.mode: bad value 'backward'"):
        load_suite(path, "quick", parse_set(["seq_len=16"]))


def test_axis_values_up_to_int_max_are_accepted(write_yaml: Callable[..., Path]) -> None:
    suite = load_suite(write_yaml(tiny_doc(axes={"seq_len": [2**31 - 1]})))
    assert suite.axes["seq_len"] == [2**31 - 1]
    with pytest.raises(SuiteError, match=r"axes\.seq_len: bad value 2147483648: too large"):
        load_suite(write_yaml(tiny_doc(axes={"seq_len": [2**31]}), "big.yaml"))


# ---------------------------------------------------------------------------------------------------
# YAML the loader accepts or refuses beyond plain syntax


MERGE_SUITE = """\
name: merged
axes: &axes
  attention: [vanilla]
  seq_len: [16, 32]
  batch_size: [1]
  heads: [2]
  dim: [16]
  mode: [fwd]
  dtype: [float32]
timing: &timing {min_run_time_s: 0.005, min_repeats: 2, warmup: 1}
profiles:
  smoke: {timing: {<<: *timing, warmup: 0}}
  quick: {}
  paper:
    axes:
      <<: *axes
      seq_len: [64]
"""


def test_a_profile_list_starting_with_dots_extends_the_base_list(write_yaml: Callable[..., Path]) -> None:
    """``attention: ["...", "*_flex"]`` in a profile: the base's variants, then these (the speed suite's compiled
    profile adds the FlexAttention presets so); without the dots a list replaces the base's."""
    doc = tiny_doc(profiles={"smoke": {"axes": {"attention": ["...", "local_flex"], "seq_len": ["...", 48]}},
                             "quick": {"axes": {"attention": ["local"]}}, "paper": None})
    path = write_yaml(doc)
    smoke = load_suite(path, "smoke")
    assert smoke.axes["attention"] == [*TINY_SUITE["axes"]["attention"], "local_flex"]
    assert smoke.axes["seq_len"] == [*TINY_SUITE["axes"]["seq_len"], 48]
    assert load_suite(path, "quick").axes["attention"] == ["local"]


def test_yaml_merge_key_merges_and_explicit_keys_win(write_yaml: Callable[..., Path]) -> None:
    path = write_yaml(MERGE_SUITE)
    paper = load_suite(path, "paper")
    assert paper.axes == {**load_suite(path, "quick").axes, "seq_len": [64]}
    assert load_suite(path, "smoke").settings.timing == {"min_run_time_s": 0.005, "min_repeats": 2, "warmup": 0,
                                                 "flush_l2": False}


def test_yaml_merge_key_keeps_duplicate_keys_refused(write_yaml: Callable[..., Path]) -> None:
    text = MERGE_SUITE.replace("      seq_len: [64]\n", "      seq_len: [64]\n      seq_len: [128]\n")
    with pytest.raises(SuiteError, match="duplicate key 'seq_len'"):
        load_suite(write_yaml(text), "paper")


def test_merge_inside_a_merged_anchor_is_not_a_duplicate(write_yaml: Callable[..., Path]) -> None:
    # the inner mapping is flattened while the outer one is built; its own key `warmup` is still written once
    text = MERGE_SUITE.replace("  smoke: {timing: {<<: *timing, warmup: 0}}",
                               "  smoke: {timing: {<<: &inner {<<: *timing, warmup: 0}}}\n  extra: {timing: *inner}")
    assert load_suite(write_yaml(text), "extra").settings.timing["warmup"] == 0


def _billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb: each level lists the previous one 9 times (9**levels strings, a few hundred bytes)."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    names = "abcdefghijklmnopqrstuvwxyz"
    for prev, cur in zip(names[:levels - 1], names[1:levels], strict=True):
        lines.append(f"{cur}: &{cur} [{', '.join([f'*{prev}'] * 9)}]")
    return "".join(f"{line}\n" for line in lines)


@pytest.mark.parametrize("where", ["description", "skip"])
def test_alias_bomb_is_refused_before_it_expands(write_yaml: Callable[..., Path], where: str) -> None:
    doc = tiny_doc()
    doc.pop(where, None)
    bomb = _billion_laughs()
    text = dump(doc) + (f"description:\n{textwrap.indent(bomb, '  ')}" if where == "description"
                        else f"skip:\n- reason: x\n  when:\n    seq_len:\n{textwrap.indent(bomb, '      ')}")
    with pytest.raises(SuiteError, match=r"line \d+: aliases expand to more than 100000 values"):
        load_suite(write_yaml(text))


def test_alias_bomb_is_refused_at_once(write_yaml: Callable[..., Path]) -> None:
    # Refused while composing, in milliseconds; walking the 9**9 expanded strings would take hours. The load runs in a
    # daemon thread so that a regression fails here after the bound instead of hanging the test session.
    path = write_yaml(dump(tiny_doc()).replace("description: two attentions, two lengths, two modes\n",
                                               f"description:\n{textwrap.indent(_billion_laughs(), '  ')}"))
    errors: list[BaseException] = []

    def load() -> None:
        try:
            load_suite(path)
        except SuiteError as exc:
            errors.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=1.0)
    assert not worker.is_alive(), "the alias bomb was not refused within a second"
    assert len(errors) == 1 and "aliases expand to more than 100000 values" in str(errors[0])


def test_a_few_aliases_are_fine(write_yaml: Callable[..., Path]) -> None:
    # 9**4 = 6561 strings once expanded: within the budget, so aliases stay usable
    text = dump(tiny_doc()).replace("description: two attentions, two lengths, two modes\n",
                                    f"description:\n{textwrap.indent(_billion_laughs(4), '  ')}")
    assert "lol" in load_suite(write_yaml(text)).description


@pytest.mark.parametrize(("text", "needle"), [
    pytest.param("config: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested more than 100 levels deep", id="deep-list"),
    # each anchor wraps the previous one: shallow as written, 150 levels once expanded
    pytest.param("".join(f"l{i}: &l{i} [{'*l' + str(i - 1) if i else 0}]\n" for i in range(150)),
                 "aliases nest more than 100 levels deep", id="deep-by-aliases"),
    pytest.param("config: &c [*c]\n", "alias *c inside the node it names (a cycle)", id="cycle"),
])
def test_deep_or_cyclic_yaml_is_refused(write_yaml: Callable[..., Path], text: str, needle: str) -> None:
    with pytest.raises(SuiteError, match=re.escape(needle)):
        load_suite(write_yaml(dump(tiny_doc()) + text))


def test_non_ascii_utf8_is_read_as_utf8(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    path = tmp_path / "utf8.yaml"
    path.write_bytes(dump(tiny_doc(description="café, 注意")).encode("utf-8"))
    assert load_suite(path).description == "café, 注意"


# ---------------------------------------------------------------------------------------------------
# Cell keys


def _keys(path: Path, device: str = "cpu", **kw: Any) -> list[str]:
    return [c.key for c in load_suite(path, **kw).expand(device)]


def test_cell_keys_stable_across_loads(tiny_suite: Path, write_yaml: Callable[..., Path]) -> None:
    first = _keys(tiny_suite)
    assert first == _keys(tiny_suite)
    assert len(set(first)) == len(first) == 8  # every cell (e.g. each seq_len) has its own key
    # The same inputs written differently (key order, flow style, another file name, description) keep keys.
    doc = tiny_doc(description="something else")
    doc = {k: doc[k] for k in reversed(list(doc))}
    other = write_yaml(doc, "elsewhere.yaml")
    assert _keys(other) == first


def test_cell_json_round_trip_keeps_the_key(tiny_suite: Path) -> None:
    for cell in load_suite(tiny_suite).expand("cpu"):
        again = Cell.from_json(cell.to_json())
        assert again == cell and again.key == cell.key


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"config": {"dropout": 0.0}}, id="config"),
        pytest.param({"timing": {**TINY_SUITE["timing"], "min_repeats": 3}}, id="timing"),
        pytest.param({"fixed": {"seed": 1}}, id="fixed"),
        pytest.param({"metrics": ["time"]}, id="metrics"),
    ],
)
def test_cell_keys_change_with_any_input(
    tiny_suite: Path, write_yaml: Callable[..., Path], change: dict[str, Any]
) -> None:
    base = set(_keys(tiny_suite))
    changed = set(_keys(write_yaml(tiny_doc(**change), "changed.yaml")))
    assert len(changed) == len(base)
    assert not base & changed


def test_cell_keys_change_with_device_and_axis_value(tiny_suite: Path,
                                                      write_yaml: Callable[..., Path]) -> None:
    cpu = _keys(tiny_suite, "cpu")
    assert not set(cpu) & set(_keys(tiny_suite, "cuda"))
    assert not set(cpu) & set(_keys(tiny_suite, "cuda:1"))
    # seq_len 16 in one suite and 64 in another: the other cells keep their keys, the changed ones do not
    other = write_yaml(tiny_doc(axes={"seq_len": [16, 64]}), "other.yaml")
    same = {c.key for c in load_suite(other).expand("cpu") if c.params["seq_len"] == 16}
    ref = {c.key: c for c in load_suite(tiny_suite).expand("cpu")}
    assert same == {k for k, c in ref.items() if c.params["seq_len"] == 16}
    assert not {c.key for c in load_suite(other).expand("cpu") if c.params["seq_len"] == 64} & set(ref)


def test_skip_reason_does_not_change_the_key(tiny_suite: Path, write_yaml: Callable[..., Path]) -> None:
    skipped = write_yaml(tiny_doc(skip=[{"when": {"seq_len": 32}, "reason": "r"}]), "skipped.yaml")
    assert _keys(skipped) == _keys(tiny_suite)


# ---------------------------------------------------------------------------------------------------
# Skip rules


def _skipped(write_yaml: Callable[..., Path], rules: list[dict[str, Any]]) -> dict[tuple, str | None]:
    axes = {"attention": ["vanilla", "vanilla_sdpa", "s3attention"], "seq_len": [16, 32, 64]}
    doc = tiny_doc(axes=axes, skip=rules)
    cells = load_suite(write_yaml(doc, "skip.yaml")).expand("cpu")
    return {(c.params["attention"], c.params["seq_len"], c.params["mode"]): c.skip_reason for c in cells}


def test_skip_rule_with_comparison_and_pattern(write_yaml: Callable[..., Path]) -> None:
    rules = [{"when": {"attention": "vanilla*", "seq_len": {"gt": 16}}, "reason": "n^2 too big"}]
    reasons = _skipped(write_yaml, rules)
    expected = {(a, n, m) for a in ("vanilla", "vanilla_sdpa") for n in (32, 64) for m in ("fwd", "fwd+bwd")}
    assert {k for k, r in reasons.items() if r} == expected
    assert all("n^2 too big" in reasons[k] for k in expected)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        pytest.param({"seq_len": {"ge": 32}}, {32, 64}, id="ge"),
        pytest.param({"seq_len": {"lt": 32}}, {16}, id="lt"),
        pytest.param({"seq_len": {"le": 32, "gt": 16}}, {32}, id="range"),
        pytest.param({"seq_len": [16, 64]}, {16, 64}, id="list"),
        pytest.param({"seq_len": 64}, {64}, id="equal"),
        pytest.param({"seq_len": {"gt": 64}}, set(), id="none"),
    ],
)
def test_skip_rule_comparisons(write_yaml: Callable[..., Path], when: dict[str, Any],
                               expected: set[int]) -> None:
    rules = [{"when": {"attention": "s3attention", "mode": "fwd", **when}, "reason": "x"}]
    reasons = _skipped(write_yaml, rules)
    assert {k for k, r in reasons.items() if r} == {("s3attention", n, "fwd") for n in expected}


def test_first_matching_skip_rule_gives_the_reason(write_yaml: Callable[..., Path]) -> None:
    rules = [{"when": {"seq_len": 64}, "reason": "first"},
             {"when": {"seq_len": {"ge": 32}}, "reason": "second"}]
    reasons = _skipped(write_yaml, rules)
    assert "first" in reasons[("vanilla", 64, "fwd")]
    assert "second" in reasons[("vanilla", 32, "fwd")]
    assert reasons[("vanilla", 16, "fwd")] is None


def test_skip_rule_with_float_bound(write_yaml: Callable[..., Path]) -> None:
    reasons = _skipped(write_yaml, [{"when": {"seq_len": {"gt": 31.5}}, "reason": "x"}])
    assert {n for (_, n, _), r in reasons.items() if r} == {32, 64}


def test_skip_rule_with_string_bound_is_refused(write_yaml: Callable[..., Path]) -> None:
    with pytest.raises(SuiteError, match=r"skip\[0\]"):
        _skipped(write_yaml, [{"when": {"seq_len": {"gt": "big"}}, "reason": "x"}])


@pytest.mark.parametrize(("when", "where"), [
    pytest.param({"mode": {"gt": 3}}, "skip[0].when.mode: a comparison needs a numeric axis", id="number-on-text"),
    pytest.param({"seq_len": [16, {"gt": "big"}]}, "skip[0].when.seq_len: comparisons are", id="in-a-list"),
    pytest.param({"seq_len": [{"gt": 16}, {"over": 1}]}, "skip[0].when.seq_len: comparisons are", id="after-a-match"),
])
def test_a_skip_condition_that_would_fail_in_a_cell_is_refused_when_the_suite_loads(
        write_yaml: Callable[..., Path], when: dict[str, Any], where: str) -> None:
    """Each would raise (TypeError, KeyError) while the cells expand, after the first condition of a list matched."""
    with pytest.raises(SuiteError, match=re.escape(where)):
        _skipped(write_yaml, [{"when": when, "reason": "x"}])


def test_a_skip_rule_on_an_optional_axis_the_suite_lacks_skips_nothing(write_yaml: Callable[..., Path]) -> None:
    reasons = _skipped(write_yaml, [{"when": {"sdpa_backend": "math"}, "reason": "x"}])  # was a KeyError
    assert reasons and not any(reasons.values())


# ---------------------------------------------------------------------------------------------------
# Malformed suite files: exit code 2 and one line naming the file and the key, before anything runs.

AXES = TINY_SUITE["axes"]

MALFORMED: list[Any] = [
    # (id, file text or document, extra CLI args, substrings the error line must contain)
    ("yaml-syntax", "name: tiny\naxes: {attention: [vanilla\n", [], ["line", "not valid YAML"]),
    ("yaml-tab", "name: tiny\naxes:\n\tseq_len: [1]\n", [], ["not valid YAML"]),
    ("list-document", "- vanilla\n- s3attention\n", [], ["mapping", "list"]),
    ("empty-document", "", [], ["mapping"]),
    ("unknown-top-key", tiny_doc(colour="blue"), [], ["colour", "unknown key"]),
    ("unknown-profile-key", tiny_doc(profiles={"smoke": {"axis": {}}, "quick": {}, "paper": {}}), [],
     ["profiles.smoke.axis"]),
    ("unknown-axis", tiny_doc(axes={"seqlen": [16]}), [], ["axes.seqlen", "unknown axis"]),
    ("missing-axis", {**tiny_doc(), "axes": {k: v for k, v in AXES.items() if k != "dtype"}}, [],
     ["axes.dtype"]),
    ("empty-axis", tiny_doc(axes={"seq_len": []}), [], ["axes.seq_len", "empty"]),
    ("wrong-type", tiny_doc(axes={"seq_len": ["a"]}), [], ["axes.seq_len", "'a'"]),
    ("zero-seq-len", tiny_doc(axes={"seq_len": [0]}), [], ["axes.seq_len"]),
    ("negative-seq-len", tiny_doc(axes={"seq_len": [16, -32]}), [], ["axes.seq_len", "-32"]),
    ("bool-batch", tiny_doc(axes={"batch_size": [True]}), [], ["axes.batch_size"]),
    ("bad-mode", tiny_doc(axes={"mode": ["backward"]}), [], ["axes.mode", "backward"]),
    ("bad-dtype", tiny_doc(axes={"dtype": ["float64"]}), [], ["axes.dtype"]),
    ("unknown-attention", tiny_doc(axes={"attention": ["vanila"]}), [],
     ["axes.attention", "vanila", "vanilla"]),
    ("pattern-matches-nothing", tiny_doc(axes={"attention": ["nosuch*"]}), [], ["axes.attention", "nosuch*"]),
    ("unknown-config-field", tiny_doc(config={"rank": 4}), [], ["config", "rank"]),
    ("bad-config-value", tiny_doc(axes={"attention": ["s3attention"]}, config={"r": 7}), [],
     ["config", "s3attention", "r=7", "dim=16"]),
    # config overrides apply to every attention, so a field vanilla lacks is refused for vanilla
    ("config-field-of-another-attention", tiny_doc(config={"r": 4}), [], ["config", "vanilla", " r;"]),
    ("bad-dropout", tiny_doc(config={"dropout": 1.5}), [], ["config", "dropout"]),
    ("heads-not-dividing-dim", tiny_doc(axes={"heads": [3]}), [], ["config", "heads=3"]),
    ("unknown-profile", tiny_doc(), ["--profile", "nosuch"], ["profiles", "nosuch"]),
    ("missing-profile", tiny_doc(profiles={"smoke": {}, "quick": {}}), [], ["profiles", "paper"]),
    ("profile-not-mapping", tiny_doc(profiles={"smoke": [1], "quick": {}, "paper": {}}), [],
     ["profiles.smoke"]),
    ("python-tag", "name: !!python/object/apply:os.system ['echo pwned']\n", [], ["not valid YAML"]),
    ("duplicate-axis-values", tiny_doc(axes={"seq_len": [16, 32, 16]}), [], ["axes.seq_len", "repeated"]),
    ("unknown-metric", tiny_doc(metrics=["time", "energy"]), [], ["metrics", "energy"]),
    ("empty-metrics", tiny_doc(metrics=[]), [], ["metrics"]),
    ("bad-timing", tiny_doc(timing={"min_run_time_s": -1}), [], ["timing.min_run_time_s"]),
    ("unknown-timing-key", tiny_doc(timing={"repeats": 3}), [], ["timing.repeats"]),
    ("bad-skip-rule", tiny_doc(skip=[{"when": {"seq_len": 16}}]), [], ["skip[0]"]),
    ("skip-not-list", tiny_doc(skip={"when": {}}), [], ["skip"]),
    ("skip-unknown-axis", tiny_doc(skip=[{"when": {"length": 16}, "reason": "x"}]), [],
     ["skip[0].when.length"]),
    ("skip-bad-op", tiny_doc(skip=[{"when": {"seq_len": {"above": 16}}, "reason": "x"}]), [],
     ["skip[0].when.seq_len"]),
    ("unknown-report-key", tiny_doc(report={"colour": "red"}), [], ["report.colour"]),
    ("unknown-fixed-key", tiny_doc(fixed={"depth": 4}), [], ["fixed.depth"]),
    ("bad-name", tiny_doc(name="a b/c"), [], ["name"]),
]


@pytest.mark.parametrize(("content", "args", "needles"), [pytest.param(*m[1:], id=m[0]) for m in MALFORMED])
def test_malformed_suite_exits_2_with_one_line(
    cli: Callable[..., CliResult],
    write_yaml: Callable[..., Path],
    tmp_path: Path,
    content: Any,
    args: list[str],
    needles: list[str],
) -> None:
    path = write_yaml(content if isinstance(content, str) else dump(content), "bad.yaml")
    out = tmp_path / "out"
    result = cli("run", path, "--out", out, "--device", "cpu", *args)
    assert result.code == 2
    assert len(result.err_lines) == 1, result.err
    line = result.err_lines[0]
    assert line.startswith("attnbench: error: ")
    assert str(path) in line
    for needle in needles:
        assert needle in line
    assert result.out == ""
    assert not out.exists()  # validated completely before anything runs


def test_python_tag_is_never_constructed(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                         tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write_yaml(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    assert cli("run", path, "--out", tmp_path / "out", "--device", "cpu").code == 2
    assert not marker.exists()


def test_missing_file_exits_2(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    path = tmp_path / "nosuch.yaml"
    result = cli("run", path, "--out", tmp_path / "out", "--device", "cpu")
    assert result.code == 2
    assert len(result.err_lines) == 1 and str(path) in result.err_lines[0]


def test_unknown_attention_lists_close_matches(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                               tmp_path: Path) -> None:
    path = write_yaml(tiny_doc(axes={"attention": ["s3atention"]}))
    result = cli("run", path, "--out", tmp_path / "out", "--device", "cpu")
    assert result.code == 2
    assert "Did you mean" in result.err and "s3attention" in result.err


def test_a_newly_registered_variant_joins_the_speed_and_memory_suites(
        throwaway: Callable[..., attentions.AttentionSpec]) -> None:
    for name in ("speed", "memory"):
        before = load_suite(REPO_ROOT / "suites" / f"{name}.yaml", "quick").attentions()
        assert "none" not in before and "mean_pool" not in before  # the controls are not benchmarked
        assert "performer_m64" not in before  # nor presets, unless they ask to be
        listed = before.index("fat") + 1  # the file's own rows end with FAT; "@benchmark" adds the rest after them
        new = throwaway().name
        after = load_suite(REPO_ROOT / "suites" / f"{name}.yaml", "quick").attentions()
        # the file's order first, then the registry's other variants (in its order), the new one among them
        assert new in after[listed:] and [a for a in after if a != new] == before


def test_set_overrides_an_attention_config_field(tiny_suite: Path) -> None:
    suite = load_suite(tiny_suite, "smoke", parse_set(["config.dropout=0.25"]))
    assert suite.config["dropout"] == 0.25
    assert {c.config["dropout"] for c in suite.expand("cpu")} == {0.25}
    with pytest.raises(SuiteError, match=r"--set: config.dropout: takes one value"):
        parse_set(["config.dropout=0.1,0.2"])
    with pytest.raises(SuiteError, match=r"unknown config field\(s\) nosuch"):
        load_suite(tiny_suite, "smoke", parse_set(["config.nosuch=1"]))


def test_a_suite_wide_flex_backend_leaves_the_others_unsupported(write_yaml: Callable[..., Path]) -> None:
    """``--set config.backend=flex``: the pattern variants run on FlexAttention; a variant with no block mask to give
    it is ``unsupported`` with the reason, not bad input (set for one pattern, a wrong backend stays bad input)."""
    path = write_yaml(tiny_doc(axes={"attention": ["local", "performer"], "seq_len": [64]}))
    suite = load_suite(path, "smoke", {"config.backend": ["flex"]})
    cells = {c.params["attention"]: c for c in suite.expand("cpu")}
    assert cells["local"].config["backend"] == "flex" and cells["local"].skip_reason is None
    assert "no backend 'flex'" in cells["performer"].skip_reason and "backend" not in cells["performer"].config
    with pytest.raises(SuiteError, match="backend"):
        load_suite(write_yaml(tiny_doc(axes={"attention": ["performer"]},
                                       attention_config={"performer": {"backend": "flex"}})), "smoke")


def test_a_suite_wide_backend_no_attention_has_is_bad_input(write_yaml: Callable[..., Path]) -> None:
    """``--set config.backend=flx`` (a typo): every cell would be unsupported; it is refused before anything runs."""
    path = write_yaml(tiny_doc(axes={"attention": ["local", "performer"], "seq_len": [64]}))
    with pytest.raises(SuiteError, match="no attention on the axis has backend 'flx'"):
        load_suite(path, "smoke", {"config.backend": ["flx"]})
