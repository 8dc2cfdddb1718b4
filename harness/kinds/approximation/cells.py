"""Measure approximation cells: build the layer and its input, compare its output (and attention matrix) with exact
softmax attention through the same projections (:mod:`harness.kinds.approximation.error`), then time its forward pass
interleaved with the other attentions of the same length and input (so the time ratios to ``vanilla_sdpa`` are paired).

Inputs (the ``input`` axis; :mod:`harness.kinds.approximation.kind` resolves them):

* ``gaussian``: x ~ N(0, 1) [B, N, D] from the suite's seed, no padding, the layer's own initial weights: attention
  over random inputs is flat, the easy case for low-rank methods.
* ``trained``: the first attention layer's inputs of a model trained by an accuracy suite (its probe,
  :mod:`harness.models.probe`): the first N positions of the first B examples, their padding mask, and the trained
  layer's Q/K/V and output weights loaded into every variant that has the same projections (so all of them
  approximate the same peaky trained attention). A variant with other projections (Reformer's shared QK) keeps its
  own, and its row says so (``weights``).

Every failure is the cell's status, as in the speed suite.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor, nn

import attentions
from attentions.base import QKVProjection

from ...core import faults
from ...core.cell import Cell, CellResult, Context, NonFinite, classify_exception, memory_cap, time_limit
from ...measure.group import Workload, measure_workloads
from ...models.probe import load_probe
from .error import attention_matrix, matrix_errors, output_errors


def _input(cell: Cell, device: torch.device) -> tuple[Tensor, Tensor | None, dict[str, Tensor] | None]:
    """(x [B, N, D], padding mask [B, N] or None, trained layer weights or None) of the cell's input."""
    fx, n = cell.fixed, cell.params["seq_len"]
    spec = fx["input"]
    if spec["kind"] == "gaussian":
        g = torch.Generator().manual_seed(int(fx["seed"]))
        return torch.randn(fx["batch_size"], n, fx["dim"], generator=g).to(device), None, None
    probe = load_probe(spec["probe"])
    x = probe.inputs[: fx["batch_size"], :n].to(device)  # [B, N, D]: the first N positions of B dev examples
    mask = probe.mask[: fx["batch_size"], :n].to(device)  # [B, N]
    return x, (None if bool(mask.all()) else mask), probe.layer


def _load_trained(layer: nn.Module, weights: dict[str, Tensor]) -> bool:
    """Copy a trained layer's Q/K/V and output weights into ``layer`` where it has the same projections."""
    projections = [getattr(layer, name, None) for name in ("proj", "proj_global")]  # Longformer: Q_g, K_g, V_g too
    out = getattr(layer, "out", None)
    if not (isinstance(projections[0], QKVProjection) and isinstance(out, nn.Linear)
            and {"proj.qkv.weight", "out.weight"} <= weights.keys()):
        return False
    with torch.no_grad():
        for proj in (p for p in projections if isinstance(p, QKVProjection)):
            proj.qkv.weight.copy_(weights["proj.qkv.weight"])
            proj.qkv.bias.copy_(weights["proj.qkv.bias"])
        out.weight.copy_(weights["out.weight"])
        out.bias.copy_(weights["out.bias"])
    return True


def _prepare(cell: Cell, ctx: Context) -> Workload | CellResult:
    """Build the cell's layer and input, measure its errors; a failure is its result."""
    faults.point("approx.cell", cell.label)
    device = torch.device(cell.device)
    fx, n, name = cell.fixed, cell.params["seq_len"], cell.params["attention"]
    entry = attentions.spec(name)
    metrics: dict[str, Any] = {"complexity": entry.caps.complexity, "input_desc": fx["input"]["desc"],
                               "input_kind": fx["input"]["kind"]}
    reason = cell.skip_reason or entry.unavailable_reason(device)
    if reason:
        return CellResult("unsupported", reason, metrics)
    started = time.perf_counter()
    try:
        with time_limit(ctx.timeout_s), memory_cap(device):
            torch.manual_seed(int(fx["seed"]))
            layer = attentions.build(name, **cell.config, dim=fx["dim"], heads=fx["heads"], max_seq_len=n)
            layer = layer.to(device).eval()
            x, mask, trained = _input(cell, device)
            metrics["weights"] = "trained" if trained is not None and _load_trained(layer, trained) else "own"
            metrics["real_tokens"] = int(x.shape[0] * n if mask is None else mask.sum())
            seed = int(fx["seed"])
            with torch.no_grad():
                torch.manual_seed(seed)  # a layer that draws (LSH rotations) draws the same here as in its matrix
                y = layer(x, mask)
                exact = layer.softmax_reference(x, mask)
            if not (torch.isfinite(y).all() and torch.isfinite(exact).all()):
                raise NonFinite("non-finite values in the output or the exact reference")
            metrics.update(output_errors(y, exact, mask))
            if n <= fx["matrix_max_seq_len"]:
                a = attention_matrix(layer, x, mask, seed=seed)
                p = attention_matrix(layer, x, mask, reference=True, seed=seed) if a is not None else None
                if a is not None and p is not None:
                    metrics.update(matrix_errors(a, p, mask))
                del a, p
            del y, exact
    except Exception as exc:  # every failure is a result, never the end of the sweep
        result = classify_exception(exc)
        result.metrics = metrics
        return result

    def fwd() -> Tensor:
        with torch.inference_mode():
            return layer(x, mask)

    return Workload(cell, fwd, layer, metrics, time.perf_counter() - started)


def measure_cell(cell: Cell, ctx: Context) -> CellResult:
    """One approximation cell in this process (errors, then its forward time alone)."""
    return measure_group([cell], ctx)[0]


def measure_group(cells: list[Cell], ctx: Context) -> list[CellResult]:
    """Cells of one length and input: each one's errors, then their forward passes timed in interleaved rounds
    (:func:`harness.measure.group.time_group`: the load and drift flags of the speed suite come with them)."""
    return measure_workloads(cells, ctx, _prepare)


def describe(result: CellResult) -> str:
    """The progress line of a finished approximation cell."""
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m = result.metrics
    parts = [f"rel. error {m['rel_fro']:.3g}", f"cos {m['cos_mean']:.4f}"]
    if "attn_tv" in m:
        parts.append(f"matrix TV {m['attn_tv']:.3g}")
    if "time_ms_median" in m:
        parts.append(f"{m['time_ms_median']:.3g} ms" + (f" noisy: {m['noisy_reason']}" if m.get("noisy") else ""))
    return "ok " + ", ".join(parts)
