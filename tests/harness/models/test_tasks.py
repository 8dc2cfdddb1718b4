"""Token primitives and Split (harness.models.tasks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.models.tasks import PAD_ID, Split, encode_documents, pad_or_truncate, pixels_to_tokens


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
    with pytest.raises(ValueError, match="Split needs"):
        Split(x0=torch.ones(2, 3), y=torch.zeros(3))
