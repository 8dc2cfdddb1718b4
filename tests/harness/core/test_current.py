"""Which stored results the tables show: the newest of each cell, under one setting and one version of each dataset;
what is left out is said, and results stored before keys covered the software are shown only as stale."""

from __future__ import annotations

from typing import Any

from harness.core.current import Stored, current, difference


def _cell(attention: str, *, threads: int = 2, torch: str = "2.13.0", data: str = "", dataset: Any = None,
          legacy: bool = False) -> dict[str, Any]:
    cell = {"params": {"attention": attention, "seq_len": 64}, "device": "cpu", "threads": threads,
            "fixed": {"data": dataset} if dataset is not None else {}, "data": data,
            "setting": {"torch": torch, "cuda": None, "libraries": {"numpy": "2.0"}, "malloc": ""}}
    if legacy:
        del cell["setting"], cell["data"]
    return cell


def _rows(*cells: tuple[int, dict[str, Any]]) -> list[Stored]:
    return [Stored(i, run, f"2026-01-01T00:00:{i:02d}Z", "speed", cell) for i, (run, cell) in enumerate(cells)]


def _shown(rows: list[Stored]) -> tuple[list[tuple[str, int]], list[str]]:
    kept, notes = current(rows)
    return [(r.cell["params"]["attention"], r.run_id) for r in kept], notes


def test_the_newest_result_of_a_cell_stands_for_it() -> None:
    shown, notes = _shown(_rows((1, _cell("vanilla")), (1, _cell("local")), (2, _cell("local"))))
    assert shown == [("vanilla", 1), ("local", 2)] and notes == []


def test_a_cell_measured_with_another_thread_count_is_left_out_and_said_so() -> None:
    """A whole run on 2 threads, then one variant on 1: its 1-thread figure is never divided by a 2-thread one."""
    shown, notes = _shown(_rows((1, _cell("vanilla")), (1, _cell("local")), (2, _cell("local", threads=1))))
    assert shown == [("local", 2)]
    assert len(notes) == 1 and notes[0].startswith("1 cell measured with 2 threads (now 1) left out of the tables")


def test_another_torch_is_another_setting() -> None:
    shown, notes = _shown(_rows((1, _cell("vanilla", torch="2.12.0")), (2, _cell("local"))))
    assert shown == [("local", 2)] and "torch 2.12.0 (now 2.13.0)" in notes[0]


def test_a_dataset_whose_files_changed_shows_only_its_results_on_the_new_files() -> None:
    listops, text = {"task": "listops", "dir": "/data"}, {"task": "text", "dir": "/data"}
    shown, notes = _shown(_rows((1, _cell("vanilla", data="old", dataset=listops)),
                                (1, _cell("vanilla", data="t", dataset=text) | {"params": {"attention": "v2"}}),
                                (2, _cell("local", data="new", dataset=listops))))
    assert shown == [("v2", 1), ("local", 2)]  # text's files did not change: its result stays
    assert notes == ["1 cell measured on earlier contents of /data left out of the tables (the files changed since); "
                     "rerun the suite to measure it on the current files"]


def test_results_stored_before_keys_covered_the_software_are_stale() -> None:
    shown, notes = _shown(_rows((1, _cell("vanilla", legacy=True)), (1, _cell("local", legacy=True))))
    assert shown == [("vanilla", 1), ("local", 1)]  # nothing newer: shown, and said to be stale
    assert len(notes) == 1 and notes[0].startswith("2 cells stored by an earlier attnbench") and ", shown;" in notes[0]
    shown, notes = _shown(_rows((1, _cell("vanilla", legacy=True)), (2, _cell("local"))))
    assert shown == [("local", 2)] and "left out of the tables" in notes[0]  # never mixed with new results


def test_the_difference_is_said_in_words() -> None:
    now = {"threads": 2, "torch": "2.13.0", "libraries": {"numpy": "2.0"}, "malloc": "x"}
    other = {"threads": 1, "torch": "2.13.0", "libraries": {"numpy": "1.26", "pandas": "2.2"}, "malloc": ""}
    assert difference(other, now) == ("1 thread (now 2), numpy 1.26 (now 2.0), pandas 2.2 (now absent), malloc "
                                       "settings 'default' (now 'x')")
