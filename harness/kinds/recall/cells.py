"""One recall cell: generate its MQAR data, train the causal LM of its attention at one width and learning rate with
one seed, resumably, and measure its recall and the decoding state it recalls from; failures become statuses. This
module and what it imports are the code behind a recall number (their sources are in every cell's key,
:mod:`harness.core.provenance`); the tables and figures (:mod:`.report`) are not.

The state is measured as the decode kind measures it (:func:`harness.measure.memory.prefilled_state`): each of the
trained model's mixers is prefilled with its own input for one test sequence of the cell's length, and the bytes the
states hold are summed over the layers (``state_bytes``, per sequence). A KV cache grows with the length, a recurrent
state or a window does not. A variant with a causal form but no decoding path has no state figure (its reason is in
``state_note``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

import attentions

from ...core import datasource, faults
from ...core.cell import Cell, CellResult, Context, classify_exception, memory_cap, time_limit
from ...measure.memory import prefilled_state
from ...models.checkpoints import checkpoint_path, clear_checkpoints
from ...models.lm import CausalLM
from .mqar import MQAR_VERSION, Mqar, generate_mqar
from .training import RecallTrain, train_recall

#: The data seeds: every cell of one task trains and tests on the same sequences (the model's seed is the cell's).
TRAIN_SEED, TEST_SEED = 0, 1

_DATA: dict[str, Mqar] = {}


def mqar_of(data: Mapping[str, Any], split: str) -> Mqar:
    """The ``split`` ("train" or "test") sequences of a cell's task, generated once per process."""
    key = json.dumps({**data, "split": split}, sort_keys=True)
    if key not in _DATA:
        seed = TRAIN_SEED if split == "train" else TEST_SEED
        _DATA[key] = generate_mqar(data[f"{split}_examples"], seq_len=data["seq_len"],
                                   num_kv_pairs=data["num_kv_pairs"], seed=seed, vocab_size=data["vocab_size"],
                                   power_a=data["power_a"],
                                   random_non_queries=data["random_non_queries"])
    return _DATA[key]


def data_source(data: Mapping[str, Any]) -> str:
    """What a cell's recall was measured on: the generator, its version and its settings."""
    return datasource.generated("attnbench MQAR (Zoology's multiquery_ar)", MQAR_VERSION, dict(data))


def prepare(cells: list[Cell], ctx: Context) -> None:
    """Checkpoints of these cells under other keys go (:func:`~harness.models.checkpoints.clear_checkpoints`)."""
    clear_checkpoints(cells, ctx)


def build_model(cell: Cell) -> CausalLM:
    """The cell's causal LM, initialised from its seed."""
    p, model = cell.params, cell.fixed["model"]
    torch.manual_seed(p["seed"])
    return CausalLM(p["attention"], vocab_size=cell.fixed["data"]["vocab_size"], max_seq_len=p["seq_len"],
                    dim=p["d_model"], heads=model["heads"], layers=model["layers"], dropout=model["dropout"],
                    embed_dropout=model["embed_dropout"], attention_overrides=cell.config)


def run(cell: Cell, ctx: Context) -> CellResult:
    """Train and test the cell's model, resuming from its checkpoint if any, then measure its state."""
    faults.point("recall.cell", cell.label)
    if cell.skip_reason:
        return CellResult("unsupported", cell.skip_reason)
    data = cell.fixed["data"]
    try:
        with time_limit(ctx.timeout_s), memory_cap(cell.device):
            model = build_model(cell)
            result = train_recall(model, mqar_of(data, "train"), mqar_of(data, "test"),
                                  RecallTrain(**cell.fixed["train"]), lr=float(cell.params["lr"]),
                                  seed=cell.params["seed"], device=cell.device,
                                  checkpoint_path=checkpoint_path(ctx.workdir, cell))
    except Exception as exc:  # a failed training run is a result, never the end of the sweep
        return classify_exception(exc)
    try:  # a trained model's recall is kept whatever becomes of its state's measurement
        state = state_bytes(cell.params["attention"], model, mqar_of(data, "test").inputs[:1],
                            torch.device(cell.device))
    except Exception as exc:  # noqa: BLE001  (the measurement's failure is the figure's note)
        failed = classify_exception(exc)
        state = {"state_bytes": math.nan, "state_note": f"not measured: {failed.status} {failed.message}".strip()}
    return CellResult("ok", "", {**result.metrics(), **state, "vocab_size": data["vocab_size"],
                                      "data_source": data_source(data)}, curve=result.curve)


def state_bytes(attention: str, model: CausalLM, tokens: Tensor, device: torch.device) -> dict[str, Any]:
    """``state_bytes``: the bytes of the decoding states of the model's mixers (``attention``) for one sequence
    ``tokens`` [1, N], summed over the layers; NaN with ``state_note`` where the variant does not decode."""
    caps = attentions.spec(attention).caps
    if not caps.decode:
        return {"state_bytes": math.nan, "state_note": caps.decode_note}
    mixers = [block.mixer for block in model.blocks]
    inputs: list[Tensor] = []
    hooks = [m.register_forward_pre_hook(lambda module, args: inputs.append(args[0])) for m in mixers]
    try:
        with torch.inference_mode():
            model.eval()(tokens.to(device))
    finally:
        for hook in hooks:
            hook.remove()
    total = 0
    for mixer, hidden in zip(mixers, inputs, strict=True):
        # the state before the last token, with room for it: what the last query is answered from
        _, _, held = prefilled_state(mixer, hidden[:, :-1], hidden.shape[1], device)
        total += held
    return {"state_bytes": float(total), "state_note": ""}


def describe(result: CellResult) -> str:
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m = result.metrics
    state = "n/a" if math.isnan(m["state_bytes"]) else f"{m['state_bytes'] / 1024:.3g} KiB"
    stop = f"stopped at epoch {m['epochs_run']}" if m["stopped_early"] else f"{m['epochs_run']} epochs"
    return f"ok recall {100 * m['recall']:.1f}% ({stop}, {m['step_ms']:.3g} ms/step), state {state}"
