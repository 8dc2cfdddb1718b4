"""Pixel noise of the robustness study (harness.kinds.accuracy.noise)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.core.errors import UserError
from harness.kinds.accuracy import noise as data

from .test_load import small


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


def test_pixel_noise_on_released_ids_is_the_same_noise_one_id_lower() -> None:
    """pixel_ids: released (id = intensity): the same draw moves the same intensities, so the ids are the shifted
    ones minus 1, and black pixels (id 0, padding to the mask) receive noise too and may become tokens."""
    x = _pixels(shape=(32, 128)) - 1  # intensities 0..255 as released ids
    x[:, :16] = 0  # black pixels
    shifted = data.add_pixel_noise(x + 1, 3.0, torch.Generator().manual_seed(4), offset=1)
    released = data.add_pixel_noise(x, 3.0, torch.Generator().manual_seed(4), offset=0)
    assert torch.equal(released, shifted - 1)
    assert (released[:, :16] > 0).any() and released.min().item() >= 0 and released.max().item() <= 255
