"""The data source line (harness.core.datasource): a generator with its version and parameters, or files with their
sha256; a table's footer says whether its numbers come from generated stand-ins, the user's files or both."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pandas as pd

from harness.core import datasource


def test_generated_names_the_generator_its_version_and_parameters() -> None:
    source = datasource.generated("attnbench text stand-in", 5, {"seed": 0, "sizes": [8, 2, 2]})
    assert source == 'generated stand-in (attnbench text stand-in v5: {"seed": 0, "sizes": [8, 2, 2]})'
    assert datasource.is_generated(source) and datasource.is_generated("generated:text:{}")  # the older form
    assert not datasource.is_generated("files in /data: x sha256:00")


def test_a_few_files_are_listed_with_their_checksums(tmp_path: Path) -> None:
    for name, text in (("b.tsv", "two"), ("a.tsv", "one")):
        (tmp_path / name).write_text(text)
    source = datasource.files(tmp_path, [tmp_path / "b.tsv", tmp_path / "a.tsv"])
    want = [f"{name} sha256:{hashlib.sha256(text.encode()).hexdigest()}"  # all 64 hex digits
            for name, text in (("a.tsv", "one"), ("b.tsv", "two"))]
    assert source == f"files in {tmp_path}: {', '.join(want)}"


def test_many_files_get_one_digest_that_changes_with_any_of_them(tmp_path: Path) -> None:
    paths = []
    for i in range(datasource.LISTED_FILES + 3):
        (tmp_path / f"{i}.txt").write_text(str(i))
        paths.append(tmp_path / f"{i}.txt")
    before = datasource.files(tmp_path, paths)
    assert before.startswith(f"files in {tmp_path}: {len(paths)} files, sha256 of their names and contents ")
    assert re.fullmatch(r"[0-9a-f]{64}", before.rsplit(" ", 1)[1])  # the whole digest
    (tmp_path / "3.txt").write_text("changed")
    assert datasource.files(tmp_path, paths) != before
    (tmp_path / "3.txt").write_text("3")
    assert datasource.files(tmp_path, paths) == before


def test_the_footer_line_says_which_data() -> None:
    gen, real = datasource.generated("g", 1, {}), "files in /d: x sha256:0011"
    assert datasource.data_line([gen, gen], "LRA") == f"Data: generated stand-ins, not LRA — {gen}"
    assert datasource.data_line([real], "LRA") == f"Data: the user's files — {real}"
    mixed = datasource.data_line([gen, real], "LRA")
    assert mixed.startswith("Data: partly generated stand-ins (not LRA), partly the user's files — ")
    assert datasource.NOT_RECORDED in datasource.data_line([None, float("nan")], "LRA")
    assert datasource.title_mark([gen, real], "LRA") == " (generated stand-ins, not LRA)"
    assert datasource.title_mark([real], "LRA") == ""


def test_bytes_already_read_give_the_same_source(tmp_path: Path) -> None:
    paths = []
    for i in range(datasource.LISTED_FILES + 2):
        (tmp_path / f"{i}.txt").write_text(f"review {i}")
        paths.append(tmp_path / f"{i}.txt")
    held = [p.read_bytes() for p in paths]
    assert datasource.files(tmp_path, paths, held) == datasource.files(tmp_path, paths)
    assert datasource.files(tmp_path, paths[:2], held[:2]) == datasource.files(tmp_path, paths[:2])


def test_the_footer_shortens_each_digest_and_says_so(tmp_path: Path) -> None:
    """The stored line holds whole digests; a footer shows 16 hex digits of each, marked as a prefix, and a line
    written before the full digest (16 digits stored) reads the same way."""
    (tmp_path / "a.tsv").write_text("one")
    full = hashlib.sha256(b"one").hexdigest()
    source = datasource.files(tmp_path, [tmp_path / "a.tsv"])
    label = "(sha256 digests: first 16 hex digits shown; in full in the CSV files)"
    line = datasource.data_line([source], "LRA")
    assert line == f"Data: the user's files — files in {tmp_path}: a.tsv sha256:{full[:16]}… {label}"
    old = f"files in {tmp_path}: a.tsv sha256:{full[:16]}"  # as stores written before hold it
    assert datasource.data_line([old], "LRA") == line
    many = f"files in /d: 50,000 files, sha256 of their names and contents {full}"
    assert datasource.data_line([many], "LRA").endswith(f"contents {full[:16]}… {label}")
    gen = datasource.generated("g", 1, {})
    assert datasource.data_line([gen], "LRA") == f"Data: generated stand-ins, not LRA — {gen}"  # no digest, no note


def test_with_sources_names_each_rows_data() -> None:
    """By task where a row has one, the cells' own sources; else every ok cell's; failed cells measured nothing."""
    gen, real = datasource.generated("g", 1, {"task": "text"}), "files in /d: x.pickle sha256:" + "0" * 64
    results = pd.DataFrame({"key": ["k0", "k1", "k2"], "task": ["text", "listops", "listops"],
                            "status": ["ok", "ok", "error"], "data_source": [gen, real, None]})
    rows = pd.DataFrame({"task": ["text", "listops", "avg"], "mean": [1.0, 2.0, 3.0]})
    out = datasource.with_sources(rows, results)
    assert out["data_source"].tolist() == [gen, real, f"{real}; {gen}"] and out["mean"].tolist() == [1.0, 2.0, 3.0]
    assert "data_source" not in rows  # a new frame
    curves = pd.DataFrame({"key": ["k0", "k0", "k2"], "step": [1, 2, 1]})
    assert datasource.with_sources(curves, results)["data_source"].tolist() == [gen, gen, f"{real}; {gen}"]  # by key
    by_task = datasource.with_sources(curves.assign(task="listops"), results, by=["task"])
    assert by_task["data_source"].tolist() == [real] * 3
    untasked = pd.DataFrame({"row": ["r"]})
    assert datasource.with_sources(untasked, results)["data_source"].tolist() == [f"{real}; {gen}"]
    unrecorded = results.drop(columns="data_source")
    assert datasource.with_sources(rows, unrecorded)["data_source"].eq(datasource.NOT_RECORDED).all()
