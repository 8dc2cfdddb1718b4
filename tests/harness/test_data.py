"""Token primitives, Split/TaskData, load_task on generated data, and the checksummed cache."""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import harness.data as data
from harness.data import (
    LRA_SEQ_LEN,
    PAD_ID,
    TASKS,
    Split,
    encode_bytes,
    encode_documents,
    load_task,
    pad_or_truncate,
    pixels_to_tokens,
)
from harness.errors import UserError

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


def test_encode_bytes_shifts_by_one_and_truncates() -> None:
    assert encode_bytes(b"\x00\xffab", 10) == [1, 256, 98, 99]
    assert encode_bytes(b"abcdef", 3) == [98, 99, 100]
    assert PAD_ID not in encode_bytes(bytes(range(256)), 256)


def test_pad_or_truncate_lists_arrays_and_tensors() -> None:
    out = pad_or_truncate([[1, 2, 3], np.array([4]), []], 2)
    assert out.dtype == torch.int64
    assert out.tolist() == [[1, 2], [4, PAD_ID], [PAD_ID, PAD_ID]]
    x = torch.tensor([[1, 2, 3]])
    assert pad_or_truncate(x, 5).tolist() == [[1, 2, 3, 0, 0]]
    assert pad_or_truncate(x, 2).tolist() == [[1, 2]]


def test_encode_documents() -> None:
    out = encode_documents([b"ab", b"xyz"], 3)
    assert out.tolist() == [[98, 99, PAD_ID], [121, 122, 123]]


def test_pixels_to_tokens_is_row_major_plus_one() -> None:
    pixels = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    tokens = pixels_to_tokens(pixels)
    assert tokens.shape == (2, 16) and tokens.dtype == torch.int64
    assert tokens[1, 4 * 2 + 3].item() == pixels[1, 2, 3] + 1
    assert pixels_to_tokens(np.zeros((3, 3))).min().item() == 1  # black is a token, never padding


def test_pixels_to_tokens_rounds_and_clips_noisy_intensities() -> None:
    noisy = np.array([[-3.2, 0.4, 1.5, 254.6, 300.0]])  # one 1 x 5 image after U(-a, a) noise
    assert pixels_to_tokens(noisy).tolist() == [1, 1, 3, 256, 256]


def test_split_masks_and_validation() -> None:
    split = Split(x0=torch.tensor([[3, 4, 0]]), y=torch.tensor([1]), x1=torch.tensor([[5, 0, 0]]))
    assert len(split) == 1
    assert split.mask0().tolist() == [[True, True, False]]
    assert split.mask1().tolist() == [[True, False, False]]
    assert Split(x0=torch.ones(2, 3, dtype=torch.int64), y=torch.zeros(2, dtype=torch.int64)).mask1() is None
    with pytest.raises(ValueError, match="Split needs"):
        Split(x0=torch.ones(2, 3), y=torch.zeros(3))


@pytest.mark.parametrize("task", TASKS)
def test_generated_tasks_have_the_interface_shapes(task: str) -> None:
    td = small(task)
    seq_len = SMALL[task]["seq_len"]
    assert td.task == task and td.seq_len == seq_len and td.dual == (task == "retrieval")
    assert td.source.startswith(f"generated:{task}:")
    for split, n in zip(td.splits().values(), SIZES, strict=True):
        assert len(split) == n
        for x in (split.x0, split.x1) if td.dual else (split.x0,):
            assert x.shape == (n, seq_len) and x.dtype == torch.int64
            assert 0 <= x.min() and x.max() < td.vocab_size
            assert split.mask0()[:, 0].all()  # every example has real tokens, right-padded
        assert split.y.dtype == torch.int64 and 0 <= split.y.min() and split.y.max() < td.num_classes
        if td.dual:
            assert split.x1 is not None
        else:
            assert split.x1 is None and split.mask1() is None
    if task in ("image", "pathfinder"):
        assert td.vocab_size == 257 and td.train.mask0().all()
    described = json.loads(json.dumps(td.describe()))
    assert described["splits"]["train"]["size"] == SIZES[0]
    assert sum(described["splits"]["dev"]["class_counts"]) == SIZES[1]
    assert described["source"] == td.source


@pytest.mark.parametrize("task", TASKS)
def test_default_seq_len_is_lras(task: str) -> None:
    td = load_task(task, data_dir=None, sizes=(2, 2, 2))
    assert td.seq_len == LRA_SEQ_LEN[task] and td.train.x0.shape == (2, LRA_SEQ_LEN[task])


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
    positive = {w.encode() for w in data.generators.POSITIVE_WORDS}
    negative = {w.encode() for w in data.generators.NEGATIVE_WORDS}
    for row, label in zip(td.train.x0, td.train.y, strict=True):
        words = bytes((row[row != PAD_ID] - 1).tolist()).split(b" ")
        assert int(sum(w in positive for w in words) > sum(w in negative for w in words)) == label


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
    @functools.wraps(data._GENERATORS["listops"])  # keeps the signature that parameter resolution reads
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the generator ran although the cache should have been used")

    monkeypatch.setitem(data._GENERATORS, "listops", boom)


def test_cache_is_written_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = cached(tmp_path)
    (path,) = cache_files(tmp_path)
    sidecar = path.with_name(path.name + ".sha256")
    assert sidecar.read_text().split() == [data._sha256(path), path.name]
    forbid_generation(monkeypatch)
    second = cached(tmp_path)
    assert second.describe() == first.describe()
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


def test_no_cache_dir_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    small("listops")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------------
# Pixel noise (Table 5)


def _pixels(seed: int = 0, shape: tuple[int, int] = (64, 256)) -> torch.Tensor:
    return torch.randint(1, 257, shape, generator=torch.Generator().manual_seed(seed))


def _noise(x: torch.Tensor, a: float, seed: int = 0) -> torch.Tensor:
    return data.add_pixel_noise(x, a, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("a", [0.5, 2.0, 8.0, 40.0])
def test_pixel_noise_is_bounded_by_a_and_keeps_the_vocabulary(a: float) -> None:
    x = _pixels()
    noisy = _noise(x, a)
    # Rounding to an integer adds at most 0.5 to |U(-a, a)| < a; clipping only moves values towards the clean one.
    assert (noisy - x).abs().max().item() <= a + 0.5
    assert noisy.min().item() >= 1 and noisy.max().item() <= 256 and noisy.dtype == torch.int64


def test_pixel_noise_has_mean_zero_away_from_the_clip() -> None:
    x = torch.full((200, 256), 129, dtype=torch.int64)  # intensity 128: U(-8, 8) never reaches 0 or 255
    diff = (_noise(x, 8.0) - x).double()
    # 51200 draws of the rounded U(-8, 8): std ~4.6, so the mean's standard error is ~0.02.
    assert abs(diff.mean().item()) < 0.1
    assert abs(diff.var().item() - (16**2 / 12 + 1 / 12)) < 0.5  # uniform variance plus rounding's 1/12


def test_pixel_noise_rounds_half_to_even_and_clips_as_documented() -> None:
    # A generator whose draw we know: u from the same seed, so the expected value is computed independently.
    x = torch.tensor([[1, 2, 129, 255, 256, 0]])  # intensities 0, 1, 128, 254, 255 and one padding token
    u = torch.rand(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    a = 20.0
    expected = np.clip(np.rint((x - 1).double().numpy() + a * (2 * u.numpy() - 1)), 0, 255) + 1  # rint: half even
    expected[0, 5] = 0  # padding stays padding
    assert torch.equal(_noise(x, a, seed=3), torch.from_numpy(expected).long())


def test_zero_noise_leaves_the_data_unchanged_and_same_seed_same_noise() -> None:
    x = _pixels()
    assert torch.equal(_noise(x, 0.0), x)
    assert torch.equal(_noise(x, 4.0, seed=1), _noise(x, 4.0, seed=1))
    assert not torch.equal(_noise(x, 4.0, seed=1), _noise(x, 4.0, seed=2))


def test_noise_levels_share_one_draw() -> None:
    """Common random numbers: where nothing clips, a = 8 is the a = 4 perturbation doubled (before rounding)."""
    x = torch.full((4, 64), 129, dtype=torch.int64)
    d4, d8 = (_noise(x, a) - x for a in (4.0, 8.0))
    assert (d8 - 2 * d4).abs().max().item() <= 1.5  # two roundings: |0.5| twice, plus doubling d4's rounding


@pytest.mark.parametrize(("noise_on", "noisy_splits"), [("train+test", {"train", "dev", "test"}), ("test", {"test"})])
def test_noisy_task_touches_the_named_splits_only(noise_on: str, noisy_splits: set[str]) -> None:
    clean = small("image")
    noisy = data.noisy_task(clean, 8.0, noise_on, seed=0)
    for name, split in noisy.splits().items():
        changed = not torch.equal(split.x0, clean.splits()[name].x0)
        assert changed == (name in noisy_splits), name
        assert torch.equal(split.y, clean.splits()[name].y)
    assert data.noisy_task(clean, 0.0, noise_on, seed=0) is clean


def test_noisy_task_refuses_token_tasks_and_unknown_modes() -> None:
    with pytest.raises(UserError, match="pixel noise applies to image, pathfinder"):
        data.noisy_task(small("text"), 2.0, "train+test", seed=0)
    with pytest.raises(UserError, match="noise_on 'dev'"):
        data.noisy_task(small("image"), 2.0, "dev", seed=0)
