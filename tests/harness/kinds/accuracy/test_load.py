"""load_task on generated data, and the checksummed cache (harness.kinds.accuracy.data)."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import harness.kinds.accuracy.data as data
from harness.core.errors import UserError
from harness.kinds.accuracy import generators, tasks
from harness.kinds.accuracy.data import load_task
from harness.kinds.accuracy.tasks import TASK_NAMES, TASK_TABLE
from harness.models.tasks import PAD_ID
from tests.harness.kinds.accuracy.test_loaders import touch

# Small generator settings per task, so that every task loads in well under a second.
SMALL: dict[str, dict[str, Any]] = {
    "listops": {"seq_len": 128, "min_length": 10},
    "text": {"seq_len": 200},
    "retrieval": {"seq_len": 160},
    "image": {"seq_len": 256},
    "pathfinder": {"seq_len": 1024},  # LRA's contour lengths need the 32x32 image
}
SIZES = (24, 6, 6)


def small(task: str, **overrides: Any) -> data.TaskData:
    return load_task(task, data_dir=None, **{"sizes": SIZES, **SMALL[task], **overrides})


@pytest.mark.parametrize("task", TASK_NAMES)
def test_generated_tasks_have_the_interface_shapes(task: str) -> None:
    td = small(task)
    seq_len = SMALL[task]["seq_len"]
    assert td.task == task and td.seq_len == seq_len and td.dual == (task == "retrieval")
    assert td.source.startswith(f"generated stand-in (attnbench {task} stand-in v")
    for split, n in zip(td.splits().values(), SIZES, strict=True):
        assert len(split) == n
        for x in (split.x0, split.x1) if td.dual else (split.x0,):
            assert x.shape == (n, seq_len) and x.dtype == torch.int64
            assert 0 <= x.min() and x.max() < td.vocab_size
            if task not in ("image", "pathfinder"):  # a black pixel is padding under the default pixel_ids
                assert split.mask0()[:, 0].all()  # every example has real tokens, right-padded
        assert split.y.dtype == torch.int64 and 0 <= split.y.min() and split.y.max() < td.num_classes
        if td.dual:
            assert split.x1 is not None
        else:
            assert split.x1 is None
    if task in ("image", "pathfinder"):  # pixel_ids: released, as the released pipeline: id = intensity
        assert td.vocab_size == 256 and td.pixel_offset == 0
    assert len(td.train) == SIZES[0] and int(torch.bincount(td.dev.y).sum()) == SIZES[1]
    assert td.source.startswith(f"generated stand-in (attnbench {task} stand-in v")


@pytest.mark.parametrize("task", TASK_NAMES)
def test_default_seq_len_is_lras(task: str) -> None:
    td = load_task(task, data_dir=None, sizes=(2, 2, 2))
    assert td.seq_len == TASK_TABLE[task].seq_len and td.train.x0.shape == (2, TASK_TABLE[task].seq_len)


def test_binary_tasks_are_balanced_per_split() -> None:
    for task in ("text", "retrieval", "pathfinder"):
        for split in small(task).splits().values():
            assert split.y.sum().item() * 2 == len(split)
    for split in small("image", sizes=(20, 10, 10)).splits().values():  # block-aligned: exactly balanced
        assert set(torch.bincount(split.y, minlength=10).tolist()) == {len(split) // 10}


def test_generated_data_is_deterministic() -> None:
    for task in ("listops", "retrieval"):
        a, b, c = small(task, seed=3), small(task, seed=3), small(task, seed=4)
        assert torch.equal(a.train.x0, b.train.x0) and torch.equal(a.test.y, b.test.y)
        assert not torch.equal(a.train.x0, c.train.x0)


def test_text_labels_survive_tokenisation() -> None:
    td = small("text")
    dialects = generators.dialect_lexicons(2, 64)
    for row, label in zip(td.train.x0, td.train.y, strict=True):
        words = set(bytes((row[row != PAD_ID] - 1).tolist()).split(b" ")[1:])
        assert {d for d in (0, 1) if words & set(dialects[d])} == {int(label)}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"task": "listop"}, "did you mean listops"),
        ({"task": "listops", "depth": 3}, "unknown generator parameter"),
        ({"task": "listops", "seq_len": 100, "max_length": 500}, "exceeds seq_len"),
        ({"task": "text", "seq_len": 100, "length": 200}, "exceeds seq_len"),
        ({"task": "image", "seq_len": 1000}, "not a square"),
        ({"task": "image", "size": 16}, "does not give seq_len"),
        ({"task": "text", "sizes": (10, 0, 5)}, "three positive integers"),
        ({"task": "text", "seq_len": 0}, "positive integer"),
        ({"task": "text", "data_dir": "/nonexistent", "lenght": 100}, "unknown generator parameter"),
    ],
)
def test_load_task_user_errors(kwargs: dict[str, Any], match: str) -> None:
    kwargs = {"data_dir": None, **kwargs}
    with pytest.raises(UserError, match=match):
        load_task(kwargs.pop("task"), **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Cache


def cached(tmp_path: Path, **overrides: Any) -> data.TaskData:
    return small("listops", cache_dir=tmp_path / "cache", **overrides)


def cache_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("listops-*.pt"))


def forbid_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    @functools.wraps(tasks.LISTOPS.generator)  # keeps the signature that parameter resolution reads
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the generator ran although the cache should have been used")

    monkeypatch.setitem(tasks.TASK_TABLE, "listops", dataclasses.replace(tasks.LISTOPS, generator=boom))


def test_cache_is_written_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = cached(tmp_path)
    (path,) = cache_files(tmp_path)
    sidecar = path.with_name(path.name + ".sha256")
    assert sidecar.read_text().split() == [data._sha256(path), path.name]
    forbid_generation(monkeypatch)
    second = cached(tmp_path)
    meta = ("task", "vocab_size", "num_classes", "seq_len", "dual", "source")
    assert [getattr(second, k) for k in meta] == [getattr(first, k) for k in meta]
    for a, b in zip(first.splits().values(), second.splits().values(), strict=True):
        assert torch.equal(a.x0, b.x0) and torch.equal(a.y, b.y)
    with pytest.raises(AssertionError, match="generator ran"):
        cached(tmp_path, seed=1)  # other parameters: another cache file


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "sidecar"])
def test_corrupt_cache_is_detected_and_regenerated(tmp_path: Path, damage: str) -> None:
    first = cached(tmp_path)
    (path,) = cache_files(tmp_path)
    raw = bytearray(path.read_bytes())
    if damage == "flip_byte":
        raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif damage == "truncate":
        path.write_bytes(bytes(raw[: len(raw) // 3]))
    else:
        path.with_name(path.name + ".sha256").write_text("0" * 64 + "  x.pt\n")
    with pytest.warns(UserWarning, match="checksum"):
        again = cached(tmp_path)
    assert torch.equal(again.train.x0, first.train.x0)
    assert path.with_name(path.name + ".sha256").read_text().split()[0] == data._sha256(path)  # rewritten
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file is valid again
        cached(tmp_path)


def test_cache_file_for_other_parameters_is_not_trusted(tmp_path: Path) -> None:
    cached(tmp_path, seed=1)
    (other,) = cache_files(tmp_path)
    # Plant seed 1's (self-consistent) file under seed 0's name: the stored spec must reject it.
    spec_0 = {"task": "listops", "seed": 0, "sizes": list(SIZES), "seq_len": 128,
              "gen_params": data.resolve_gen_params("listops", 128, {"min_length": 10}), "version": data.CACHE_VERSION}
    target = data.cache_path(tmp_path / "cache", spec_0)
    target.write_bytes(other.read_bytes())
    target.with_name(target.name + ".sha256").write_text(f"{data._sha256(target)}  {target.name}\n")
    with pytest.warns(UserWarning, match="other parameters"):
        td = cached(tmp_path, seed=0)
    assert torch.equal(td.train.x0, small("listops", seed=0).train.x0)


def test_cache_file_holding_code_is_never_run(tmp_path: Path) -> None:
    """A cache file replaced, checksum and all, by one whose unpickling runs a command: ``torch.load`` with
    ``weights_only=True`` refuses it, and the data are generated again."""
    first = cached(tmp_path)
    (path,) = cache_files(tmp_path)
    torch.save({"spec": touch(tmp_path / "pwned")}, path)
    path.with_name(path.name + ".sha256").write_text(f"{data._sha256(path)}  {path.name}\n")
    with pytest.warns(UserWarning, match="unusable cache file"):
        again = cached(tmp_path)
    assert not (tmp_path / "pwned").exists()
    assert torch.equal(again.train.x0, first.train.x0)


def test_no_cache_dir_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    small("listops")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", ["image", "pathfinder"])
def test_pixel_ids_released_masks_black_and_shifted_keeps_every_pixel(task: str) -> None:
    """The same generated images under both pixel_ids: ids differ by exactly 1, black is padding only when
    released, and the source line names the option."""
    kwargs = {"data_dir": None, "seq_len": SMALL[task]["seq_len"], "seed": 3, "sizes": SIZES}
    released = load_task(task, **kwargs, **SMALL[task].get("gen", {}))
    shifted = load_task(task, **kwargs, options={"pixel_ids": "shifted"}, **SMALL[task].get("gen", {}))
    assert torch.equal(shifted.train.x0, released.train.x0 + 1)
    assert shifted.vocab_size == 257 and shifted.train.mask0().all() and shifted.pixel_offset == 1
    black = released.train.x0 == 0
    assert black.any() and torch.equal(released.train.mask0(), ~black)
    assert '"pixel_ids": "released"' in released.source and '"pixel_ids": "shifted"' in shifted.source
