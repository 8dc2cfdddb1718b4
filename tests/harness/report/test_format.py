"""Words of titles (harness.report.format)."""

from __future__ import annotations

import pytest

from harness.report.format import suite_title


@pytest.mark.parametrize(("suite", "title"), [
    ("noise-robustness", "Noise robustness"),
    ("speed_long", "Speed long"),
    # the data mark after the name keeps its hyphen ("stand ins" was a figure title's typo)
    ("accuracy (generated stand-ins, not LRA)", "Accuracy (generated stand-ins, not LRA)"),
])
def test_a_suite_name_becomes_words_and_what_follows_it_is_kept(suite: str, title: str) -> None:
    assert suite_title(suite) == title
