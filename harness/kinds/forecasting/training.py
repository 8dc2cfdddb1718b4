"""Train one forecaster on one dataset and horizon, select it on validation MSE, and test it (MSE and MAE on the
scaled series, as Table 2 reports them).

The released recipe (FEDformer's ``exp_main.py``, which Autoformer's and S3Attention's scripts share): Adam, MSE loss,
batch 32, learning rate 1e-4 halved after every epoch (``lradj type1``), validation after every epoch, stop after 3
validations without improvement, test the best validation checkpoint. Here the same, counted in steps so that quick
profiles can stop inside an epoch: validation every ``eval_every`` steps (0: once per epoch), the halving by epoch.
One recipe for every model: S3Attention's release trains its own forecaster from an inline copy in ``run.py`` that
uses AdamW and has the halving commented out; not followed (``suites/forecasting.yaml`` says why).

Every test window is scored: with ``test_max_windows`` 0 the test MSE and MAE average over all len(test split) −
input_len − horizon + 1 windows (one per start row), batched by ``batch_size`` with the last, partial batch kept.
The released scripts do not (FEDformer's and S3Attention's ``data_provider/data_factory.py`` build the test loader
with ``drop_last=True``, so up to batch_size − 1 windows at the end of the test split are never scored, a number
that changes with the batch size and the horizon); we do not follow them there, so Table 2's numbers cover the whole
split. The same holds for validation (``eval_max_windows`` 0; released: ``drop_last=True`` and shuffled) and for
training, whose epochs end with a partial batch (released: dropped).

Deterministic under a seed on CPU (initialisation, FEB-f's random modes, the data order — one seeded permutation of
the training windows per epoch — and dropout). Checkpoints hold the model, optimiser, learning-rate state, RNG,
best weights and curve (:func:`harness.models.checkpoints.save_checkpoint`), so a killed cell resumed from its last
checkpoint ends with the result an uninterrupted one would have.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...core import faults
from ...models.checkpoints import batch_indices, load_checkpoint, save_checkpoint
from .blocks import ForecastConfig
from .data import Split, Windows
from .fourier import FourierExtrapolation
from .models import build_forecaster


@dataclass(frozen=True)
class ForecastTrain:
    """Optimisation settings of one forecasting run.

    Attributes:
        steps: optimiser steps; 0 = ``epochs`` passes over the training windows.
        epochs: passes over the training windows when steps == 0 (released: 10).
        batch_size: windows per step (released: 32).
        lr: Adam learning rate at the start (released: 1e-4).
        halve_every_epoch: multiply the learning rate by 0.5 after each epoch (released ``lradj type1``).
        patience: stop after this many validations without a lower validation MSE (released: 3; 0 = never).
        eval_every: steps between validations (0 = at the end of every epoch, as released), and at the last step.
        eval_max_windows: validation windows used, evenly spaced over the split (0 = all).
        test_max_windows: test windows used, evenly spaced (0 = all, none dropped; see the module docstring).
        checkpoint_every: write a checkpoint at every k-th validation (0 disables).
    """

    steps: int = 0
    epochs: float = 10.0
    batch_size: int = 32
    lr: float = 1e-4
    halve_every_epoch: bool = True
    patience: int = 3
    eval_every: int = 0
    eval_max_windows: int = 0
    test_max_windows: int = 0
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        for name in ("steps", "patience", "eval_every", "eval_max_windows", "test_max_windows", "checkpoint_every"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if not isinstance(self.halve_every_epoch, bool):
            raise ValueError(f"halve_every_epoch must be true or false, got {self.halve_every_epoch!r}")
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        for name in ("epochs", "lr"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive number (write 1.0e-4, not 1e-4), got {value!r}")


@dataclass
class ForecastResult:
    test_mse: float
    test_mae: float
    best_val_mse: float
    best_step: int
    steps: int
    stopped_early: bool
    train_windows: int
    test_windows: int
    steps_per_s: float
    wall_s: float
    curve: list[dict[str, float]] = field(default_factory=list)
    example: dict[str, list[float]] = field(default_factory=dict)  # one test window: history, truth, forecast
    naive: dict[str, float] = field(default_factory=dict)  # naive_<name>_{mse,mae} on the same test windows

    def metrics(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k not in ("curve", "example", "naive")}, **self.naive}


def spread(count: int, cap: int) -> Tensor:
    """Window starts: all ``count`` of them, or ``cap`` evenly spaced from the first to the last."""
    if cap <= 0 or cap >= count:
        return torch.arange(count)
    return torch.linspace(0, count - 1, cap).round().long().unique()


def repeat_last(x: Tensor, x_mark: Tensor, y_mark: Tensor) -> Tensor:
    """The naive forecast: the history's last value at every step of the horizon. [B, H, C]"""
    return x[:, -1:].expand(-1, y_mark.shape[1], -1)


def window_mean(x: Tensor, x_mark: Tensor, y_mark: Tensor) -> Tensor:
    """The history's mean at every step of the horizon. [B, H, C]"""
    return x.mean(dim=1, keepdim=True).expand(-1, y_mark.shape[1], -1)


def naive_forecasts(cfg: ForecastConfig, device: torch.device | str = "cpu"
                    ) -> dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]]:
    """The forecasts without a model that every cell scores on its test windows: the last value, the window's mean,
    and the window's own Fourier extrapolation with S3Attention's ``n_harm`` harmonics (Algorithm 4 on the raw
    history: what S3Attention's forecaster would give if its layers passed the window through unchanged)."""
    fourier = FourierExtrapolation(cfg.input_len, cfg.n_harm, cfg.horizon).to(device)  # on the windows' device
    return {"last": repeat_last, "mean": window_mean,
            "fourier": lambda x, x_mark, y_mark: fourier(x)[:, cfg.input_len:]}


@torch.no_grad()
def evaluate(model: Callable[[Tensor, Tensor, Tensor], Tensor], windows: Windows, starts: Tensor, batch_size: int,
             device: torch.device) -> tuple[float, float]:
    """(MSE, MAE) of the forecasts of the windows at ``starts``, over every step and variable; ``model`` is a
    module (evaluated in eval mode) or a naive forecaster. Every start is scored: the last batch may be partial."""
    was_training = isinstance(model, nn.Module) and model.training
    if isinstance(model, nn.Module):
        model.eval()
    sq, ab, n = 0.0, 0.0, 0
    for chunk in starts.split(batch_size):
        x, x_mark, y, y_mark = (t.to(device) for t in windows.batch(chunk))
        err = (model(x, x_mark, y_mark).float() - y).double()
        sq, ab, n = sq + err.square().sum().item(), ab + err.abs().sum().item(), n + err.numel()
    if was_training:
        model.train()
    return sq / max(n, 1), ab / max(n, 1)


def halving(per_epoch: int, enabled: bool) -> Callable[[int], float]:
    """The learning-rate factor at a step: 0.5 per completed epoch (released ``lradj type1``), or 1."""
    return lambda step: 0.5 ** (step // per_epoch) if enabled else 1.0


def _new_state() -> dict[str, Any]:
    return {"step": 0, "best_val_mse": math.inf, "best_step": 0, "best_weights": None, "curve": [], "bad_evals": 0,
            "evals": 0, "stopped_early": False, "loss_sum": 0.0, "seen": 0, "elapsed_s": 0.0}


def train_forecaster(attention: str, splits: dict[str, Split], model_cfg: ForecastConfig, cfg: ForecastTrain, *,
                     seed: int, device: torch.device | str = "cpu",
                     checkpoint_path: str | Path | None = None) -> ForecastResult:
    """Train ``attention``'s forecaster on ``splits`` (train/val/test), keep the best-validation weights, test them.

    Raises ValueError when a split is shorter than one window (input_len + horizon rows).
    """
    device = torch.device(device)
    L, H = model_cfg.input_len, model_cfg.horizon
    windows = {name: Windows(split, L, H) for name, split in splits.items()}
    for name, w in windows.items():
        if len(w) == 0:
            raise ValueError(f"the {name} split has {len(splits[name].values)} rows, fewer than one window of "
                             f"input {L} + horizon {H}; use a shorter horizon or a longer series")
    torch.manual_seed(seed)
    model = build_forecaster(attention, model_cfg).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    n_train = len(windows["train"])
    per_epoch = math.ceil(n_train / cfg.batch_size)
    total = cfg.steps or max(1, math.ceil(cfg.epochs * per_epoch))
    eval_every = cfg.eval_every or per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(opt, halving(per_epoch, cfg.halve_every_epoch))
    ckpt = Path(checkpoint_path) if checkpoint_path else None
    state = {**_new_state(), **(load_checkpoint(ckpt, model, opt, sched, device)
                                if ckpt is not None and ckpt.is_file() else {})}
    val_starts = spread(len(windows["val"]), cfg.eval_max_windows)
    started = time.perf_counter()
    while state["step"] < total and not state["stopped_early"]:
        x, x_mark, y, y_mark = (t.to(device) for t in windows["train"].batch(
            batch_indices(n_train, cfg.batch_size, state["step"], seed)))
        loss = torch.nn.functional.mse_loss(model(x, x_mark, y_mark).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        faults.point("training.step", f"step {state['step'] + 1}")
        loss_value = loss.item()  # one device sync per step
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"non-finite training loss at step {state['step'] + 1}")
        state["step"] += 1
        state["loss_sum"], state["seen"] = state["loss_sum"] + loss_value, state["seen"] + 1
        if state["step"] % eval_every == 0 or state["step"] == total:
            _validate(state, model, windows["val"], val_starts, cfg, device)
            if ckpt is not None and cfg.checkpoint_every and state["evals"] % cfg.checkpoint_every == 0:
                state["elapsed_s"] += time.perf_counter() - started
                started = time.perf_counter()
                save_checkpoint(ckpt, model, opt, sched, state)
    state["elapsed_s"] += time.perf_counter() - started
    if state["best_weights"] is not None:
        model.load_state_dict(state["best_weights"])
    test_starts = spread(len(windows["test"]), cfg.test_max_windows)
    mse, mae = evaluate(model, windows["test"], test_starts, cfg.batch_size, device)
    naive = {f"naive_{name}_{metric}": value for name, fn in naive_forecasts(model_cfg, device).items()
             for metric, value in zip(("mse", "mae"), evaluate(fn, windows["test"], test_starts, cfg.batch_size,
                                                               device), strict=True)}
    return ForecastResult(
        test_mse=mse, test_mae=mae, best_val_mse=state["best_val_mse"], best_step=state["best_step"],
        steps=state["step"], stopped_early=state["stopped_early"], train_windows=n_train,
        test_windows=len(test_starts), steps_per_s=state["step"] / max(state["elapsed_s"], 1e-9),
        wall_s=state["elapsed_s"], curve=state["curve"], example=_example(model, windows["test"], device), naive=naive)


def _validate(state: dict[str, Any], model: nn.Module, val: Windows, starts: Tensor, cfg: ForecastTrain,
              device: torch.device) -> None:
    val_mse, _ = evaluate(model, val, starts, cfg.batch_size, device)
    state["curve"].append({"step": state["step"], "train_loss": state["loss_sum"] / max(state["seen"], 1),
                           "dev_loss": val_mse})
    state["loss_sum"], state["seen"], state["evals"] = 0.0, 0, state["evals"] + 1
    if val_mse < state["best_val_mse"]:
        state["best_val_mse"], state["best_step"], state["bad_evals"] = val_mse, state["step"], 0
        state["best_weights"] = copy.deepcopy(model.state_dict())
    else:
        state["bad_evals"] += 1
        state["stopped_early"] = bool(cfg.patience) and state["bad_evals"] >= cfg.patience


@torch.no_grad()
def _example(model: nn.Module, test: Windows, device: torch.device) -> dict[str, list[float]]:
    """The middle test window's last variable (``OT`` in the ETT files): history, truth and forecast, for a figure."""
    model.eval()
    x, x_mark, y, y_mark = (t.to(device) for t in test.batch(torch.tensor([len(test) // 2])))
    forecast = model(x, x_mark, y_mark).float()
    return {"history": x[0, :, -1].tolist(), "truth": y[0, :, -1].tolist(), "forecast": forecast[0, :, -1].tolist()}
