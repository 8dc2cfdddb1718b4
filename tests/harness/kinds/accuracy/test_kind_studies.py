"""Tests of the accuracy suites' study axes and keys (harness.run.suitefile): noise, variants, incoherence, report
tables."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import SuiteError
from harness.kinds.accuracy.kind import one_at_a_time
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, tiny_doc

ACCURACY: dict[str, Any] = {
    "name": "study",
    "kind": "accuracy",
    "axes": {"attention": ["s3attention"], "task": ["image"], "seed": [0]},
    "data": {"sizes": [16, 4, 4]},
    "train": {"steps": 2, "batch_size": 4, "dim": 16, "layers": 1, "eval_every": 2, "checkpoint_every": 2},
    "tasks": {"image": {"seq_len": 64}, "text": {"seq_len": 64}},
    "profiles": {"smoke": {}, "quick": {}, "paper": {}},
}


def _suite(write_yaml: Callable[..., Path], **top: Any) -> Path:
    doc = copy.deepcopy(ACCURACY)
    for key, value in top.items():
        doc[key] = {**doc[key], **value} if key == "axes" else value
    return write_yaml(doc)


def test_one_at_a_time_expands_to_exactly_the_papers_rows() -> None:
    """Table 6: 3 sub-tables x 5 values = 15 rows, of which the baseline (8, 8, 8) is one model shown thrice."""
    paper = {"r": [1, 8, 16, 32, 64], "s1": [8, 32, 64, 128, 256], "s2": [1, 4, 8, 16, 32]}
    variants = one_at_a_time({"r": 8, "s1": 8, "s2": 8}, paper)
    assert list(variants) == ["base", "r=1", "r=16", "r=32", "r=64", "s1=32", "s1=64", "s1=128", "s1=256",
                              "s2=1", "s2=4", "s2=16", "s2=32"]
    base = variants["base"]
    for label, overrides in variants.items():
        changed = {k for k in base if overrides[k] != base[k]}
        assert changed == (set() if label == "base" else {label.split("=")[0]})
    rows = {(p, v) for p, values in paper.items() for v in values}
    shown = {(p, overrides[p]) for overrides in variants.values() for p in paper
             if all(overrides[q] == base[q] for q in paper if q != p)}
    assert shown == rows and len(rows) == 15


def test_hyperparams_suite_paper_profile_is_the_paper_grid() -> None:
    suite = load_suite(REPO_ROOT / "suites" / "hyperparams.yaml", "paper")
    cells = suite.expand("cpu")
    assert len(suite.settings.variants) == 13 and len(cells) == 13 * 5 * 5
    base = [c for c in cells if c.params["variant"] == "base"][0].config
    r16 = [c for c in cells if c.params["variant"] == "r=16" and c.params["task"] == "listops"][0].config
    assert (base["r"], base["s1"], base["s2"]) == (8, 8, 8) and (r16["r"], r16["s1"], r16["s2"]) == (16, 8, 8)


def test_variant_overrides_come_last_and_only_change_their_fields(write_yaml: Callable[..., Path]) -> None:
    path = _suite(write_yaml, config={"dropout": 0.0}, tasks={"image": {"seq_len": 64, "config": {"s1": 4}}},
                  variants={"base": {}, "no_rows": {"row_attention": False}, "s1_16": {"s1": 16}})
    cells = {c.params["variant"]: c for c in load_suite(path, "smoke").expand("cpu")}
    assert list(cells) == ["base", "no_rows", "s1_16"]  # the variant axis defaults to every variant, in order
    assert cells["base"].config["s1"] == 4 and cells["s1_16"].config["s1"] == 16  # after the task's config
    diff = {k for k in cells["base"].config if cells["base"].config[k] != cells["no_rows"].config[k]}
    assert diff == {"row_attention"}
    assert len({c.key for c in cells.values()}) == 3


def test_clean_cells_are_shared_by_both_noise_modes(write_yaml: Callable[..., Path]) -> None:
    path = _suite(write_yaml, axes={"noise": [0, 2, 8], "noise_on": ["train+test", "test"]})
    cells = load_suite(path, "smoke").expand("cpu")
    params = [(c.params["noise"], c.params["noise_on"]) for c in cells]
    assert params == [(0, "train+test"), (2, "train+test"), (2, "test"), (8, "train+test"), (8, "test")]


def test_a_suite_without_study_axes_keeps_its_cell_keys(write_yaml: Callable[..., Path]) -> None:
    """Adding the study keys must not change existing accuracy cells (a rerun resumes instead of redoing)."""
    cell = load_suite(_suite(write_yaml), "smoke").expand("cpu")[0]
    assert set(cell.params) == {"attention", "task", "seed"} and set(cell.fixed) == {"train", "data"}


@pytest.mark.parametrize(
    ("top", "where", "says"),
    [
        ({"axes": {"noise": [-1]}}, "axes.noise", "non-negative numbers"),
        ({"axes": {"noise": [".5x"]}}, "axes.noise", "non-negative numbers"),
        ({"axes": {"noise_on": ["dev"]}}, "axes.noise_on", "train+test, test"),
        ({"axes": {"task": ["text"], "noise": [0, 2]}}, "axes.noise", "pixel noise applies to image, pathfinder"),
        ({"axes": {"variant": ["nope"]}, "variants": {"base": {}}}, "axes.variant", "unknown variant 'nope'"),
        ({"axes": {"variant": ["base"]}}, "axes.variant", "defined under `variants`: none"),
        ({"variants": {"bad": {"r": 5}}}, "variants.bad", "r=5 must divide dim=16"),
        ({"variants": {"bad": {"no_such_field": 1}}}, "variants.bad", "no_such_field"),
        ({"variants": {"one_at_a_time": {"base": {}, "vary": {"r": 4}}}}, "vary.r", "list of distinct values"),
        ({"variants": {"one_at_a_time": {"base": {}}, "x": {}}}, "variants", "cannot be mixed"),
        ({"variants": {"one_at_a_time": {"base": {}, "vary": {}, "other": 1}}}, "one_at_a_time.other", "unknown"),
        ({"incoherence": {"ranks": [0]}}, "incoherence.ranks", "distinct positive integers"),
        ({"incoherence": {"rank": [4]}}, "incoherence.rank", "unknown key"),
        ({"report": {"tables": ["table4"]}}, "report.tables", "table1, table5, table6, table7, tableS7"),
        ({"report": {"tables": ["table5"]}}, "report.tables", "table5 needs a `noise` axis"),
        ({"report": {"tables": ["table7"]}}, "report.tables", "table7 needs variants"),
        ({"report": {"tables": ["tableS7"]}}, "report.tables", "tableS7 needs an `incoherence` key"),
    ],
)
def test_bad_study_settings_name_the_key(write_yaml: Callable[..., Path], top: dict[str, Any], where: str,
                                         says: str) -> None:
    with pytest.raises(SuiteError) as err:
        load_suite(_suite(write_yaml, **top), "smoke")
    message = str(err.value)
    assert where in message and says in message and "\n" not in message


def test_study_keys_are_refused_in_speed_suites(write_yaml: Callable[..., Path]) -> None:
    for key, value in (("variants", {"a": {}}), ("incoherence", {"ranks": [4]})):
        with pytest.raises(SuiteError, match=f"{key}: only accuracy suites"):
            load_suite(write_yaml(tiny_doc(**{key: value})), "smoke")
    with pytest.raises(SuiteError, match="axes.noise: unknown axis for a speed suite"):
        load_suite(write_yaml(tiny_doc(axes={"noise": [0]})), "smoke")


def test_report_options_carry_tables_and_variants(write_yaml: Callable[..., Path]) -> None:
    suite = load_suite(_suite(write_yaml, variants={"base": {}, "x": {"s1": 4}},
                              report={"tables": ["table7"], "baseline": "s3attention"}), "smoke")
    opts = suite.report_options()
    assert opts["tables"] == ["table7"] and opts["baseline_variant"] == "base"
    assert opts["variants"] == {"base": {}, "x": {"s1": 4}}
    assert load_suite(_suite(write_yaml), "smoke").report_options()["tables"] == ["table1"]
