"""The forecasting trainer: it learns a forecastable series, is deterministic under a seed, stops early as the
released recipe does, and a killed run resumed from its checkpoint ends as an uninterrupted one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import harness.kinds.forecasting.training as training
from harness.kinds.forecasting.blocks import ForecastConfig
from harness.kinds.forecasting.data import Split
from harness.kinds.forecasting.training import ForecastTrain, spread, train_forecaster
from tests.conftest import kill_in_step

MODEL = ForecastConfig(input_len=24, horizon=12, variables=2, d_model=16, heads=2, d_ff=32, e_layers=1)
TRAIN = ForecastTrain(steps=12, batch_size=8, lr=1e-3, eval_every=4, eval_max_windows=20, test_max_windows=30,
                      patience=0, halve_every_epoch=False)


def _splits(rows: int = 400) -> dict[str, Split]:
    """A noisy two-variable sine (period 12) with hour-of-day-like marks, cut 70/10/20 with the window overlap."""
    t = np.arange(rows, dtype=np.float32)
    rng = np.random.default_rng(0)
    values = np.stack([np.sin(2 * np.pi * t / 12), np.cos(2 * np.pi * t / 12)], axis=1)
    values = (values + 0.05 * rng.standard_normal(values.shape)).astype(np.float32)
    marks = np.stack([(t % 12) / 11 - 0.5] * 4, axis=1).astype(np.float32)
    cuts = {"train": (0, 280), "val": (280 - 24, 320), "test": (320 - 24, rows)}
    return {name: Split(values[a:b], marks[a:b]) for name, (a, b) in cuts.items()}


def test_windows_are_spread_evenly_or_all_taken() -> None:
    assert spread(10, 0).tolist() == list(range(10)) and spread(10, 20).tolist() == list(range(10))
    assert spread(101, 5).tolist() == [0, 25, 50, 75, 100]


def test_it_learns_a_periodic_series_far_below_the_variance() -> None:
    result = train_forecaster("vanilla", _splits(), MODEL, replace(TRAIN, steps=150, eval_every=50), seed=0)
    assert result.test_mse < 0.1, result.curve  # the series has variance 0.5 per variable
    assert result.curve[-1]["dev_loss"] < result.curve[0]["dev_loss"]


def test_same_seed_same_result_and_another_seed_differs() -> None:
    a = train_forecaster("fedformer_fourier", _splits(), MODEL, TRAIN, seed=3)
    b = train_forecaster("fedformer_fourier", _splits(), MODEL, TRAIN, seed=3)
    c = train_forecaster("fedformer_fourier", _splits(), MODEL, TRAIN, seed=4)
    assert (a.curve, a.test_mse, a.example) == (b.curve, b.test_mse, b.example)
    assert a.test_mse != c.test_mse


@pytest.mark.parametrize("killed_in", [3, 6, 11])
def test_kill_and_resume_equals_uninterrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killed_in: int) -> None:
    reference = train_forecaster("s3attention", _splits(), MODEL, TRAIN, seed=5)
    ckpt = tmp_path / "cell.pt"
    kill_in_step(monkeypatch, killed_in)
    with pytest.raises(KeyboardInterrupt):
        train_forecaster("s3attention", _splits(), MODEL, TRAIN, seed=5, checkpoint_path=ckpt)
    monkeypatch.undo()
    assert ckpt.is_file() == (killed_in > TRAIN.eval_every)  # the first checkpoint is written at the first validation
    resumed = train_forecaster("s3attention", _splits(), MODEL, TRAIN, seed=5, checkpoint_path=ckpt)
    assert resumed.curve == reference.curve
    assert (resumed.test_mse, resumed.test_mae, resumed.best_step) == (
        reference.test_mse, reference.test_mae, reference.best_step)


def test_it_stops_after_patience_validations_without_improvement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation MSE 1.0, then worse three times: with patience 3 training stops at the fourth validation and the
    first one's weights are tested."""
    scores = iter([1.0, 2.0, 3.0, 4.0, 0.5, 0.4])
    real = training.evaluate

    def fake(model: torch.nn.Module, windows: object, starts: torch.Tensor, batch_size: int,
             device: torch.device) -> tuple[float, float]:
        if len(starts) == TRAIN.eval_max_windows:  # a validation (the test uses test_max_windows)
            return next(scores), 0.0
        return real(model, windows, starts, batch_size, device)

    monkeypatch.setattr(training, "evaluate", fake)
    result = train_forecaster("vanilla", _splits(), MODEL, replace(TRAIN, steps=40, patience=3), seed=0)
    assert result.stopped_early and result.steps == 16 and result.best_step == 4
    assert [p["dev_loss"] for p in result.curve] == [1.0, 2.0, 3.0, 4.0]


def test_the_learning_rate_halves_after_each_epoch() -> None:
    """100 train windows at batch 8 = 13 steps per epoch: the released ``type1`` schedule."""
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, training.halving(per_epoch=13, enabled=True))
    rates = []
    for _ in range(30):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[:13] == [1.0] * 13 and rates[13:26] == [0.5] * 13 and rates[26:] == [0.25] * 4


def test_a_split_shorter_than_one_window_is_named() -> None:
    splits = _splits()
    splits["test"] = Split(splits["test"].values[:30], splits["test"].marks[:30])
    with pytest.raises(ValueError, match="test split has 30 rows, fewer than one window of input 24 \\+ horizon 12"):
        train_forecaster("vanilla", splits, MODEL, TRAIN, seed=0)


def _fourier_continuation(x: np.ndarray, n_harm: int, horizon: int) -> np.ndarray:
    """Algorithm 4 in numpy: the window's mean and n_harm lowest frequencies (with their negative twins), summed as
    sinusoids at the next ``horizon`` steps. x [L, C] -> [H, C]."""
    n = len(x)
    spectrum, freqs = np.fft.fft(x, axis=0), np.fft.fftfreq(n)
    kept = sorted(range(n), key=lambda i: abs(freqs[i]))[: 1 + 2 * n_harm]
    t = np.arange(n, n + horizon)[:, None]
    return sum(np.real(spectrum[k][None, :] * np.exp(2j * np.pi * freqs[k] * t)) for k in kept) / n


def test_the_naive_forecasts_are_scored_on_the_same_test_windows() -> None:
    """Repeat-last, window-mean and Fourier-extrapolation errors against their definitions, window by window in
    numpy."""
    splits = _splits()
    result = train_forecaster("vanilla", splits, MODEL, replace(TRAIN, steps=1, test_max_windows=0), seed=0)
    test = splits["test"].values.astype(np.float64)
    L, H = MODEL.input_len, MODEL.horizon
    windows = [(test[s:s + L], test[s + L:s + L + H]) for s in range(len(test) - L - H + 1)]
    errors = {"last": np.concatenate([y - x[-1] for x, y in windows]),
              "mean": np.concatenate([y - x.mean(axis=0) for x, y in windows]),
              "fourier": np.concatenate([y - _fourier_continuation(x, MODEL.n_harm, H) for x, y in windows])}
    assert result.test_windows == len(windows)
    metrics = result.metrics()
    for name, err in errors.items():
        np.testing.assert_allclose([metrics[f"naive_{name}_mse"], metrics[f"naive_{name}_mae"]],
                                   [np.mean(err ** 2), np.abs(err).mean()], rtol=1e-4)
    # the sine's period (12) divides the window (24): its Fourier continuation is the sine, off by the noise only
    assert metrics["naive_fourier_mse"] < 0.01 < metrics["naive_mean_mse"]


def test_every_test_window_is_scored_when_the_batch_does_not_divide_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """test_max_windows 0: the model forecasts every window of the test split exactly once — len − L − H + 1 of
    them, here 104 − 24 − 12 + 1 = 69 at batch 8 (8 full batches and one of 5): no ``drop_last``, unlike the
    released test loader."""
    splits = _splits()
    expected = len(splits["test"].values) - MODEL.input_len - MODEL.horizon + 1
    assert expected == 69 and expected % TRAIN.batch_size != 0
    seen: list[torch.Tensor] = []
    real = training.evaluate

    def counting(model: object, windows: object, starts: torch.Tensor, batch_size: int,
                 device: torch.device) -> tuple[float, float]:
        if isinstance(model, torch.nn.Module) and windows is not None and len(starts) == expected:
            seen.clear()
            forward = model.forward

            def record(x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
                seen.append(x[:, 0].clone())  # [B, C]: each window's first history row identifies its start
                return forward(x, *rest)

            model.forward = record  # type: ignore[method-assign]
            try:
                return real(model, windows, starts, batch_size, device)
            finally:
                del model.forward
        return real(model, windows, starts, batch_size, device)

    monkeypatch.setattr(training, "evaluate", counting)
    result = train_forecaster("s3attention", splits, MODEL, replace(TRAIN, steps=2, test_max_windows=0), seed=0)
    assert result.test_windows == expected
    firsts = torch.cat(seen)  # [windows, C], in the order scored
    assert [len(b) for b in seen] == [8] * 8 + [5]
    torch.testing.assert_close(firsts, torch.from_numpy(splits["test"].values[:expected]))
