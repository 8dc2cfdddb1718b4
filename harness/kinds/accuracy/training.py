"""Train an encoder classifier with one attention on one task, evaluate, keep the best dev model, test it.

Deterministic under a seed on CPU: the seed fixes initialisation (including S3Attention's sampled indices),
the data order (one seeded permutation per epoch) and dropout. Checkpoints every ``checkpoint_every`` steps
hold the model, optimiser, scheduler, RNG state, best-dev weights and the learning curve, so a killed run
resumed from its last checkpoint ends with exactly the result of an uninterrupted one.
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
import torch.nn.functional as F
from torch import Tensor, nn

from ...core import faults
from ...models.checkpoints import batch_indices, load_checkpoint, save_checkpoint
from ...models.classifier import Classifier
from ...models.tasks import Split, TaskData

POOLINGS = ("mean", "cls", "mean_all")
#: Named training recipes: the settings each one fixes unless a suite gives them explicitly. ``harness`` is the
#: default (PyTorch's N(0, 1) embeddings, AdamW eps 1e-8, gradient clipping at 1.0, mean over the real tokens);
#: ``released`` follows the S3Attention authors' released LRA trainer where it differs from ours: embeddings
#: N(0, 0.02), AdamW eps 1e-6, no gradient clipping, mean over all positions (padding included). Both select the
#: checkpoint with the best dev accuracy. A field a recipe fixes is left unset (None) in :class:`TrainConfig`'s
#: signature and filled from the config's recipe at construction, so ``TrainConfig(recipe="released")`` is the
#: released recipe and a field given explicitly wins over it.
RECIPES: dict[str, dict[str, Any]] = {
    "harness": {"embed_init_std": 0.0, "adam_eps": 1e-8, "grad_clip": 1.0, "pooling": "mean"},
    "released": {"embed_init_std": 0.02, "adam_eps": 1e-6, "grad_clip": 0.0, "pooling": "mean_all"},
}


class TrainConfigError(ValueError):
    """A training setting out of its range; ``field`` names it (a suite reports it as ``train.<field>``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


# field -> (check, what a valid value is); every field of TrainConfig is here (a test checks it)
_TRAIN_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "steps": (lambda v: _is_int(v) and v >= 0, "a non-negative integer (0 = use epochs)"),
    "epochs": (lambda v: _is_number(v) and v > 0, "a positive number"),
    "batch_size": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "lr": (lambda v: _is_number(v) and v > 0, "a positive number (write 1.0e-3, not 1e-3, which YAML reads as text)"),
    "weight_decay": (lambda v: _is_number(v) and v >= 0, "a non-negative number"),
    "warmup_steps": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "grad_clip": (lambda v: _is_number(v) and v >= 0, "a non-negative number (0 disables clipping)"),
    "eval_every": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "eval_max_examples": (lambda v: _is_int(v) and v >= 0, "a non-negative integer (0 = all)"),
    "checkpoint_every": (lambda v: _is_int(v) and v >= 0, "a non-negative integer (0 disables checkpoints)"),
    "dim": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "heads": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "layers": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "mlp_dim": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "dropout": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "pooling": (lambda v: v in POOLINGS, f"one of {', '.join(POOLINGS)}"),
    "embed_init_std": (lambda v: _is_number(v) and v >= 0, "a non-negative number (0 = PyTorch's N(0, 1))"),
    "adam_eps": (lambda v: _is_number(v) and v > 0, "a positive number (write 1.0e-8)"),
    "recipe": (lambda v: v in RECIPES, f"one of {', '.join(RECIPES)}"),
}


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and model settings of one training run (the paper's Table S1 fields).

    Attributes:
        steps: optimiser steps; if 0, ``epochs`` full passes over the training split are used instead.
        epochs: passes over the training split (used when steps == 0).
        batch_size: examples per step.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up from 0 to lr; then linear decay to 0 at the last step.
        grad_clip: max global gradient norm (0 disables).
        eval_every: evaluate on the dev split every k steps (and at the end).
        eval_max_examples: cap on dev examples per evaluation (0 = all), for quick profiles.
        checkpoint_every: write a checkpoint every k steps (0 disables).
        dim, heads, layers, mlp_dim: encoder size (LRA defaults: 64, 2, 2, 128).
        dropout: dropout in embeddings and MLP blocks ("dropout in embedding" of Table S1).
        pooling: "mean" (masked mean of the real tokens), "cls" (first token) or "mean_all" (mean over every
            position, padding included, as the released LRA trainer pools).
        embed_init_std: std of the normal initialisation of the token and position embeddings (0 = PyTorch's
            default N(0, 1)).
        adam_eps: AdamW epsilon.
        recipe: the named recipe (:data:`RECIPES`) that sets ``grad_clip``, ``pooling``, ``embed_init_std`` and
            ``adam_eps`` where they are not given (None); after construction every field holds its value, so
            ``dataclasses.replace(cfg, recipe=...)`` keeps the old recipe's values: build a new config instead.
    """

    steps: int = 0
    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 100
    grad_clip: float | None = None  # from the recipe when not given
    eval_every: int = 100
    eval_max_examples: int = 0
    checkpoint_every: int = 100
    dim: int = 64
    heads: int = 2
    layers: int = 2
    mlp_dim: int = 128
    dropout: float = 0.1
    pooling: str | None = None  # from the recipe when not given
    embed_init_std: float | None = None  # from the recipe when not given
    adam_eps: float | None = None  # from the recipe when not given
    recipe: str = "harness"

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise TrainConfigError("recipe", f"must be one of {', '.join(RECIPES)}, got {self.recipe!r}")
        for name, value in RECIPES[self.recipe].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)  # frozen: set once, here
        for name, (check, valid) in _TRAIN_RULES.items():
            value = getattr(self, name)
            if not check(value):
                raise TrainConfigError(name, f"must be {valid}, got {value!r}")
        if self.dim % self.heads:
            raise TrainConfigError("heads", f"must divide dim = {self.dim}, got {self.heads}")

    def total_steps(self, n_train: int) -> int:
        if self.steps > 0:
            return self.steps
        return max(1, math.ceil(self.epochs * math.ceil(n_train / self.batch_size)))


@dataclass
class TrainResult:
    test_acc: float
    best_dev_acc: float
    best_step: int
    steps: int
    final_train_loss: float
    steps_per_s: float
    wall_s: float
    curve: list[dict[str, float]] = field(default_factory=list)
    resumed_from_step: int = 0
    analysis: dict[str, float] = field(default_factory=dict)  # what ``analyse`` measured on the trained model

    def metrics(self) -> dict[str, Any]:
        """Scalar metrics for the store (the curve is stored separately)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("curve", "analysis")}
        return {**out, **self.analysis}


def build_model(attention: str, data: TaskData, cfg: TrainConfig, attention_overrides: dict[str, Any]) -> Classifier:
    model = Classifier(
        attention, num_classes=data.num_classes, dual=data.dual, vocab_size=data.vocab_size,
        max_seq_len=data.seq_len, dim=cfg.dim, heads=cfg.heads, layers=cfg.layers, mlp_dim=cfg.mlp_dim,
        dropout=cfg.dropout, pooling=cfg.pooling, attention_overrides=attention_overrides,
    )
    if cfg.embed_init_std > 0:
        for embedding in (model.encoder.tok, model.encoder.pos):
            nn.init.normal_(embedding.weight, std=cfg.embed_init_std)
    return model


def _logits(model: Classifier, split: Split, idx: Tensor, device: torch.device) -> Tensor:
    x0 = split.x0[idx].to(device)
    if split.x1 is None:
        return model(x0, x0 != 0)
    x1 = split.x1[idx].to(device)
    return model(x0, x0 != 0, x1, x1 != 0)


@torch.no_grad()
def evaluate(model: Classifier, split: Split, *, batch_size: int, device: torch.device,
             max_examples: int = 0) -> tuple[float, float]:
    """(mean loss, accuracy) of ``model`` on ``split`` (its first ``max_examples`` examples if > 0)."""
    was_training = model.training
    model.eval()
    n = len(split) if max_examples <= 0 else min(max_examples, len(split))
    loss_sum, correct = 0.0, 0
    for start in range(0, n, batch_size):
        idx = torch.arange(start, min(start + batch_size, n))
        logits = _logits(model, split, idx, device).float()
        y = split.y[idx].to(device)
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += int((logits.argmax(-1) == y).sum())
    model.train(was_training)
    return loss_sum / max(n, 1), correct / max(n, 1)


def _schedule(warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def train_and_evaluate(
    attention: str,
    data: TaskData,
    cfg: TrainConfig,
    *,
    seed: int,
    device: torch.device | str = "cpu",
    attention_overrides: dict[str, Any] | None = None,
    checkpoint_path: str | Path | None = None,
    analyse: Callable[[Classifier, TaskData], dict[str, float]] | None = None,
) -> TrainResult:
    """Train, evaluating on dev every ``cfg.eval_every`` steps; test the best-dev weights.

    Args:
        attention: registered attention name.
        data: the task's splits.
        cfg: optimisation and model settings.
        seed: fixes initialisation, sampled indices, data order and dropout.
        device: where to train.
        attention_overrides: attention config fields (e.g. r, s1, s2, dropout, ablation switches).
        checkpoint_path: if given, resume from it when present and write it every ``cfg.checkpoint_every`` steps.
        analyse: called with the model as it is after the last step (before the best-dev weights are restored
            for the test) and the data; its metrics are added to the result (e.g. the incoherence study).
    """
    device = torch.device(device)
    torch.manual_seed(seed)
    model = build_model(attention, data, cfg, attention_overrides or {}).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, eps=cfg.adam_eps)
    total = cfg.total_steps(len(data.train))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg.warmup_steps, total))
    ckpt = Path(checkpoint_path) if checkpoint_path else None
    state = {**_new_state(), **(load_checkpoint(ckpt, model, opt, sched, device)
                                if ckpt is not None and ckpt.is_file() else {})}
    resumed_from = state["step"]
    started = time.perf_counter()
    while state["step"] < total:
        _train_step(state, model, opt, sched, data.train, cfg, seed, device)
        if state["step"] % cfg.eval_every == 0 or state["step"] == total:
            _evaluate_into(state, model, data, cfg, device)
        if ckpt is not None and cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0:
            state["elapsed_s"] += time.perf_counter() - started
            started = time.perf_counter()
            save_checkpoint(ckpt, model, opt, sched, state)
    state["elapsed_s"] += time.perf_counter() - started
    analysis = analyse(model, data) if analyse is not None else {}
    if state["best_weights"] is not None:
        model.load_state_dict(state["best_weights"])
    _, test_acc = evaluate(model, data.test, batch_size=cfg.batch_size, device=device)
    return TrainResult(
        test_acc=test_acc, best_dev_acc=state["best_dev_acc"], best_step=state["best_step"], steps=total,
        # elapsed_s is the training time of all `total` steps (checkpointed with the step count), also across
        # resumes: a cell resumed after its last checkpoint reports the throughput of the steps it ran, never 0
        final_train_loss=state["last_loss"], steps_per_s=total / max(state["elapsed_s"], 1e-9),
        wall_s=state["elapsed_s"], curve=state["curve"], resumed_from_step=resumed_from, analysis=analysis,
    )


def _new_state() -> dict[str, Any]:
    """Everything of a run that a checkpoint carries besides the model, optimiser, scheduler and RNG."""
    return {"step": 0, "best_dev_acc": -1.0, "best_step": 0, "best_weights": None, "curve": [],
            "train_loss_sum": 0.0, "train_correct": 0, "train_seen": 0, "elapsed_s": 0.0, "last_loss": math.nan}


def _train_step(state: dict[str, Any], model: Classifier, opt: torch.optim.Optimizer,
                sched: torch.optim.lr_scheduler.LRScheduler, train: Split, cfg: TrainConfig, seed: int,
                device: torch.device) -> None:
    """One optimiser step on the batch of ``state["step"]``; the running train loss and accuracy are updated."""
    step = state["step"]
    idx = batch_indices(len(train), cfg.batch_size, step, seed)
    logits = _logits(model, train, idx, device).float()
    y = train.y[idx].to(device)
    loss = F.cross_entropy(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    sched.step()
    faults.point("training.step", f"step {step + 1}")
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        raise FloatingPointError(f"non-finite training loss at step {step + 1}")
    state["train_loss_sum"] += loss_value * len(idx)
    state["train_correct"] += int((logits.argmax(-1) == y).sum())
    state["train_seen"] += len(idx)
    state["last_loss"] = loss_value  # kept in the checkpoint: a run resumed at its end reports the same value
    state["step"] = step + 1


def _evaluate_into(state: dict[str, Any], model: Classifier, data: TaskData, cfg: TrainConfig,
                   device: torch.device) -> None:
    dev_loss, dev_acc = evaluate(model, data.dev, batch_size=cfg.batch_size, device=device,
                                 max_examples=cfg.eval_max_examples)
    seen = max(state["train_seen"], 1)
    state["curve"].append({"step": state["step"], "train_loss": state["train_loss_sum"] / seen,
                           "train_acc": state["train_correct"] / seen, "dev_loss": dev_loss, "dev_acc": dev_acc})
    state["train_loss_sum"], state["train_correct"], state["train_seen"] = 0.0, 0, 0
    if dev_acc > state["best_dev_acc"]:
        state["best_dev_acc"], state["best_step"] = dev_acc, state["step"]
        state["best_weights"] = copy.deepcopy(model.state_dict())


