"""Attention probes: what a trained model's first attention layer sees, kept so that other suites can study it.

An accuracy suite with ``probes: {examples: K}`` writes, for every trained cell, ``probes/<cell key>.pt`` beside its
store: the inputs of the first attention layer (after its LayerNorm) on the first K dev examples, their padding
mask, and that layer's weights, as the model is after its last training step. The approximation suite
(:mod:`harness.approx`) reads them: trained attention is peaky where attention over random inputs is flat, and an
approximation's error depends on which.

The file holds tensors, numbers and strings only, and is read with ``torch.load(weights_only=True)``: a probe
someone put in an output directory cannot run code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.files import atomic_write
from .classifier import Classifier
from .tasks import TaskData

PROBE_DIR = "probes"
PROBE_DEFAULTS: dict[str, Any] = {"examples": 8}


def probe_path(workdir: Path, key: str) -> Path:
    return workdir / PROBE_DIR / f"{key}.pt"


@dataclass(frozen=True)
class Probe:
    """The first attention layer of a trained model and its inputs.

    Attributes:
        inputs: float32 [K, N, D], the layer's inputs (LayerNorm'd token + position embeddings) on K dev examples.
        mask: bool [K, N], True at real tokens.
        layer: the layer's state dict (``proj.qkv.*``, ``out.*`` for the projected variants).
        heads: the layer's number of heads.
        attention: the registered name of the trained attention.
        task: the task it was trained on.
        seed: the training seed.
        params: every axis value of the cell that trained it (a study's noise or variant too).
    """

    inputs: Tensor
    mask: Tensor
    layer: dict[str, Tensor]
    heads: int
    attention: str
    task: str
    seed: int
    params: dict[str, Any]


@torch.no_grad()
def save_probe(path: Path, model: Classifier, data: TaskData, *, examples: int, params: dict[str, Any]) -> None:
    """Run the first ``examples`` dev examples through ``model`` and write the first attention layer's inputs and
    weights to ``path`` (atomically); ``params``: the training cell's axis values."""
    block = model.encoder.blocks[0]
    seen: list[tuple[Tensor, Tensor | None]] = []
    hook = block.attn.register_forward_pre_hook(lambda _m, args: seen.append((args[0], args[1])))
    was_training = model.training
    model.eval()
    try:
        x0 = data.dev.x0[:examples].to(next(model.parameters()).device)
        model.encoder(x0, x0 != 0)  # one encoder pass: the hook sees the first layer's input once
    finally:
        hook.remove()
        model.train(was_training)
    inputs, mask = seen[0]
    payload = {"inputs": inputs.float().cpu(), "mask": (x0 != 0).cpu() if mask is None else mask.cpu(),
               "layer": {k: v.float().cpu() for k, v in block.attn.state_dict().items()},
               "heads": int(block.attn.cfg.heads),
               "attention": str(params["attention"]), "task": str(params["task"]), "seed": int(params["seed"]),
               "params": json.dumps(params, sort_keys=True, default=str)}
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_probe(path: Path) -> Probe:
    """Read a probe written by :func:`save_probe` (tensors and plain values only: no code runs)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    own = {"attention": str(saved["attention"]), "task": str(saved["task"]), "seed": int(saved["seed"])}
    return Probe(inputs=saved["inputs"], mask=saved["mask"].bool(), layer=saved["layer"], heads=int(saved["heads"]),
                 params=json.loads(saved["params"]) if "params" in saved else own, **own)
