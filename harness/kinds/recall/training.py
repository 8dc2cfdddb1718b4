"""Train one causal language model on MQAR and measure its recall, as Zoology's Figure 2 runs trained them.

The authors' recipe (``zoology/train.py`` with ``experiments/paper_configs/iclr24_zoology_figure2``): AdamW with weight
decay 0.1, the learning rate annealed to 0 by a cosine over the epochs (``CosineAnnealingLR`` stepped once an epoch),
cross-entropy at the query positions only, an evaluation on the test set after every epoch, and training stopped once
the test accuracy reaches 0.99 (their ``early_stopping_threshold``). Every epoch is one pass over the training
examples in a seeded order. The reported recall is the test accuracy of the last evaluation (where training stopped),
and the best one is kept beside it; the best learning rate is chosen in the report, over the cells of a grid.

Deterministic under a seed on the CPU (the initialisation, the data order and dropout). A checkpoint is written after
every evaluation (:func:`harness.models.checkpoints.save_checkpoint`), so a killed cell resumed from it ends with the
result an uninterrupted one would have.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...core import faults
from ...models.checkpoints import epoch_order, load_checkpoint, save_checkpoint
from ...models.lm import CausalLM
from .mqar import IGNORE, Mqar


@dataclass(frozen=True)
class RecallTrain:
    """Optimisation settings of one MQAR run (Zoology's Figure 2 values by default).

    Attributes:
        epochs: passes over the training examples (Figure 2: 64), which the learning-rate schedule spans.
        run_epochs: the passes actually run (0: ``epochs``): a reduced budget that trains the first ``run_epochs``
            of the ``epochs``-long schedule, at the learning rates the full run has there (a shorter schedule would
            anneal the rate before the model has learned to recall).
        batch_size: sequences per step (Figure 2: 512 at lengths 64 and 128, 256 at 256).
        weight_decay: AdamW's (Figure 2: 0.1).
        stop_at: stop once the test accuracy reaches this (Figure 2: 0.99; above 1: never).
    """

    epochs: int = 64
    run_epochs: int = 0
    batch_size: int = 512
    weight_decay: float = 0.1
    stop_at: float = 0.99

    def __post_init__(self) -> None:
        for name, least in (("epochs", 1), ("batch_size", 1), ("run_epochs", 0)):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
                raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
        if self.run_epochs > self.epochs:
            raise ValueError(f"run_epochs ({self.run_epochs}) must be at most epochs ({self.epochs})")
        for name in ("weight_decay", "stop_at"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf):
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")


@dataclass
class RecallResult:
    """What one MQAR run measured: the recall (test accuracy at the query positions) where it stopped and its best,
    the steps taken, the median wall time of a training step, and the curve (one point per evaluation)."""

    recall: float
    best_recall: float
    epochs: int
    steps: int
    stopped_early: bool
    step_ms: float
    wall_s: float
    curve: list[dict[str, float]] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        return {"recall": self.recall, "best_recall": self.best_recall, "epochs_run": self.epochs,
                "steps": self.steps, "stopped_early": self.stopped_early, "step_ms": self.step_ms,
                "wall_s": self.wall_s}


@torch.no_grad()
def recall_of(model: CausalLM, data: Mqar, batch_size: int, device: torch.device) -> float:
    """The share of query positions of ``data`` whose value the model predicts (argmax), dropout off."""
    model.eval()
    right = total = 0
    for start in range(0, len(data), batch_size):
        tokens = data.inputs[start:start + batch_size].to(device)
        targets = data.targets[start:start + batch_size].to(device)
        select = targets != IGNORE
        right += int((model(tokens, select).argmax(-1) == targets[select]).sum())
        total += int(select.sum())
    model.train()
    return right / max(total, 1)


def _new_state() -> dict[str, Any]:
    return {"step": 0, "epoch": 0, "best_recall": 0.0, "recall": 0.0, "stopped_early": False, "curve": [],
            "step_ms": [], "elapsed_s": 0.0, "loss_sum": 0.0, "seen": 0}


def train_recall(model: CausalLM, train: Mqar, test: Mqar, cfg: RecallTrain, *, lr: float, seed: int,
                 device: torch.device | str = "cpu", checkpoint_path: str | Path | None = None) -> RecallResult:
    """Train ``model`` (built under ``torch.manual_seed(seed)`` by the caller) on ``train``, evaluating on ``test``
    after every epoch (see the module docstring)."""
    device = torch.device(device)
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs, eta_min=0.0)
    ckpt = Path(checkpoint_path) if checkpoint_path else None
    state = {**_new_state(), **(load_checkpoint(ckpt, model, opt, sched, device)
                                if ckpt is not None and ckpt.is_file() else {})}
    n_train = len(train)
    per_epoch = math.ceil(n_train / cfg.batch_size)
    started = time.perf_counter()
    last = cfg.run_epochs or cfg.epochs
    while state["epoch"] < last and not state["stopped_early"]:
        order = epoch_order(n_train, seed, state["epoch"])  # a checkpoint ends an epoch: every epoch starts here
        for offset in range(per_epoch):
            rows = order[offset * cfg.batch_size:(offset + 1) * cfg.batch_size]
            tokens, targets = train.inputs[rows].to(device), train.targets[rows].to(device)
            step_started = time.perf_counter()  # the model's step only: forward, backward and the optimiser
            loss = _step(model, opt, tokens, targets)
            state["step_ms"].append((time.perf_counter() - step_started) * 1e3)
            faults.point("training.step", f"step {state['step'] + 1}")
            state["step"] += 1
            state["loss_sum"], state["seen"] = state["loss_sum"] + loss, state["seen"] + 1
        sched.step()
        state["epoch"] += 1
        recall = recall_of(model, test, cfg.batch_size, device)
        state["recall"], state["best_recall"] = recall, max(state["best_recall"], recall)
        state["stopped_early"] = recall >= cfg.stop_at and state["epoch"] < last
        state["curve"].append({"step": state["step"], "train_loss": state["loss_sum"] / max(state["seen"], 1),
                               "dev_accuracy": recall})
        state["loss_sum"], state["seen"] = 0.0, 0
        state["elapsed_s"] += time.perf_counter() - started
        started = time.perf_counter()
        if ckpt is not None:
            save_checkpoint(ckpt, model, opt, sched, state)
    return RecallResult(recall=state["recall"], best_recall=state["best_recall"], epochs=state["epoch"],
                        steps=state["step"], stopped_early=state["stopped_early"],
                        step_ms=statistics.median(state["step_ms"]) if state["step_ms"] else math.nan,
                        wall_s=state["elapsed_s"], curve=state["curve"])


def _step(model: CausalLM, opt: torch.optim.Optimizer, tokens: Tensor, targets: Tensor) -> float:
    """One optimiser step on ``tokens``: next-token cross-entropy at their query positions."""
    select = targets != IGNORE
    loss = torch.nn.functional.cross_entropy(model(tokens, select).float(), targets[select])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    value = loss.item()  # one device sync per step
    if not math.isfinite(value):
        raise FloatingPointError("non-finite training loss")
    return value
