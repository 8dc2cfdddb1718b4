"""Pixel noise of the S3Attention paper's robustness study (Table 5): U(-a, a) added to every pixel intensity.

The rules every part of the harness follows are written once here: which tasks take noise (:func:`noise_problem`),
where it goes (:data:`NOISY_SPLITS`), and that a = 0 is the clean dataset whatever the mode (:func:`cell_noise`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...core.errors import UserError
from ...models.tasks import PAD_ID, Split, TaskData
from .tasks import TASK_TABLE

#: Noise in every split: the paper's setting, noise added "during generating sample sequences".
TRAIN_TEST = "train+test"
#: Noise in the test split only: trained and selected on clean data (distribution shift).
TEST_ONLY = "test"
#: The splits each noise mode perturbs; the first mode is the default, and the mode a clean cell is stored under.
NOISY_SPLITS: dict[str, tuple[str, ...]] = {TRAIN_TEST: ("train", "dev", "test"), TEST_ONLY: ("test",)}
NOISE_ON = tuple(NOISY_SPLITS)


def noise_problem(tasks: list[str] | tuple[str, ...]) -> str | None:
    """Why pixel noise cannot be added to these tasks (some are not pixel tasks: :attr:`Task.pixels
    <harness.models.tasks.Task.pixels>`), or None."""
    noisy = [name for name, task in TASK_TABLE.items() if task.pixels]
    other = [t for t in tasks if t not in noisy]
    if not other:
        return None
    tasks_text = ", ".join(other)
    return f"pixel noise applies to {', '.join(noisy)} only, not {tasks_text}; drop those tasks or use noise 0"


def cell_noise(params: dict[str, Any]) -> tuple[float, str]:
    """A cell's (amplitude a, noise mode) from its axis values; a clean cell (a = 0) is ``(0.0, TRAIN_TEST)``.

    Clean data is the same under either mode, so a clean cell is one cell, stored once under the default mode, and
    both modes' tables read it.
    """
    a = float(params.get("noise", 0))
    return a, (str(params.get("noise_on", TRAIN_TEST)) if a > 0 else TRAIN_TEST)


def add_pixel_noise(x: torch.Tensor, a: float, generator: torch.Generator, offset: int = 1) -> torch.Tensor:
    """Pixel tokens with uniform noise U(-a, a) added to every intensity.

    Token id t = v + ``offset`` carries intensity v in 0..255 (:data:`harness.models.tasks.PIXEL_OFFSET`). Each
    pixel becomes ``clip(round_half_even(v + a * (2u - 1)), 0, 255) + offset`` with u ~ U[0, 1) from ``generator``:
    the noise is added to the intensity, rounded to the nearest integer (half to even, as
    :func:`harness.models.tasks.pixels_to_tokens`) and clipped to 0..255, so the vocabulary is unchanged. With
    offset 1, padding (id 0) is left alone. With offset 0 (``pixel_ids: released``) black and padding are one id,
    as in the released pipeline, and every position is a pixel: noise that lifts a black pixel above 0 makes it a
    token the mask keeps, as the paper's noisy images were tokenised after the noise was added. The draw u depends
    only on the generator and the shape, not on ``a``, so datasets at different amplitudes share one realisation
    scaled by ``a`` (common random numbers: the columns of Table 5 differ by the amplitude alone, not by a fresh
    draw). At a = 0 every token is unchanged.

    Args:
        x: int64 [S, N] pixel token ids.
        a: amplitude, >= 0.
        generator: CPU generator that fixes the draw.
        offset: the id of intensity 0.
    """
    if a < 0:
        raise ValueError(f"noise amplitude must be >= 0, got {a}")
    u = torch.rand(x.shape, generator=generator, dtype=torch.float64)
    values = (x - offset).double() + a * (2.0 * u - 1.0)
    noisy = values.round().clamp_(0, 255).long() + offset  # torch.round: half to even
    return noisy if offset == 0 else torch.where(x == PAD_ID, x, noisy)


def noisy_task(data: TaskData, a: float, noise_on: str, seed: int) -> TaskData:
    """``data`` with U(-a, a) pixel noise (:func:`add_pixel_noise`) in the splits ``noise_on`` names.

    Noise is drawn once per example when the dataset is made (static, like the paper's "during generating sample
    sequences"), from a generator seeded by ``seed`` and the split, so the same seed gives the same noise. At a = 0
    the dataset itself is returned: no draw is made.

    Raises:
        UserError: noise on a task whose tokens are not pixels, or an unknown ``noise_on``.
    """
    if noise_on not in NOISY_SPLITS:
        raise UserError(f"noise_on {noise_on!r}: choose one of {', '.join(NOISE_ON)}")
    if a == 0:
        return data
    problem = noise_problem([data.task])
    if problem:
        raise UserError(f"{data.task}: {problem}")
    splits = {}
    for i, (name, split) in enumerate(data.splits().items()):
        if name in NOISY_SPLITS[noise_on]:
            g = torch.Generator().manual_seed(int(seed) * 7919 + i)
            split = Split(x0=add_pixel_noise(split.x0, a, g, data.pixel_offset), y=split.y, x1=split.x1)
        splits[name] = split
    return dataclasses.replace(data, **splits, source=f"{data.source}+noise(a={a:g},on={noise_on},seed={seed})")
