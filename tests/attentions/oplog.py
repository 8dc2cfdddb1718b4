"""What one forward+backward of a layer dispatches on the meta device (shapes only, no data), counted as a GPU would
run it: the CPU-checkable proxy for a layer's CUDA kernel count (tests/attentions/test_s3attention_gpu.py and the
Performer's GPU layout test). A dispatched ATen op that is not a view is at most a kernel or two on CUDA; ``make
gpu-check`` counts the kernels themselves."""

from __future__ import annotations

import collections
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

import attentions

#: Ops that move no data (views, and the split/unbind that only make views).
NO_DATA = {"aten.detach", "aten._unsafe_view", "aten.split_with_sizes", "aten.split", "aten.unbind",
           "aten.promote_types"}


class OpLog(TorchDispatchMode):
    """Counts the non-view ops dispatched and the bytes they read and write, and every dtype or device copy that
    undoes an earlier one."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.bytes_moved = 0  # Σ over the ops of their tensor inputs' and outputs' bytes: a memory-traffic bound
        self.round_trips: list[str] = []
        self._copied_from: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> (dtype, device) it was copied from

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        if func.is_view or name in NO_DATA:
            return out
        self.ops[name] += 1
        outs = out if isinstance(out, (tuple, list)) else [out]
        self.bytes_moved += sum(t.numel() * t.element_size() for t in (*args, *outs) if isinstance(t, torch.Tensor))
        if name == "aten._to_copy":
            src = args[0]
            origin = self._copied_from.get(src)
            if origin is not None and origin == (out.dtype, out.device):
                self.round_trips.append(f"{origin} -> {(src.dtype, src.device)} -> back, shape {tuple(out.shape)}")
            self._copied_from[out] = (src.dtype, src.device)
        return out


class AsOnCuda(TorchFunctionMode):
    """SDPA and dropout on the meta device as CUDA runs them, where torch itself decomposes them into ops no GPU runs.

    SDPA: one fused kernel forward and one backward (the memory-efficient kernel, which takes a mask and float32;
    flash, bf16 without a mask, counts the same), not the math decomposition's dozen. Dropout: CUDA's fused
    ``native_dropout`` (one kernel each way), not empty + bernoulli + div + mul."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.dropout:
            x, p = args[0], kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            return torch.native_dropout(x, p, training)[0] if training and p > 0 else func(*args, **kwargs)
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v = args[:3]
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, kwargs.get("attn_mask"), True, kwargs.get("dropout_p", 0.0))[0]


def fwd_bwd_ops(name: str, dtype: torch.dtype, n: int = 1024, **config: Any) -> OpLog:
    """One training fwd+bwd of ``name`` (B 4, D 512, H 8: the speed suite's GPU shape) after a warm-up call."""
    torch.manual_seed(0)
    return module_ops(attentions.build(name, **{"dim": 512, "heads": 8, "max_seq_len": n, **config}), dtype, n)


def module_ops(module: torch.nn.Module, dtype: torch.dtype, n: int) -> OpLog:
    """One training fwd+bwd of ``module`` (any [B, N, 512] -> [B, N, 512] layer) on the meta device, B 4."""
    module = module.train().to("meta", dtype)
    x = torch.randn(4, n, 512, device="meta", dtype=dtype, requires_grad=True)
    grad = torch.randn(4, n, 512, device="meta", dtype=dtype)
    module(x).backward(grad)  # first call: lazily built state, as a warm-up
    for p in module.parameters():  # as the speed suite's fwd+bwd: gradients set to None, nothing accumulated
        p.grad = None
    with AsOnCuda(), OpLog() as log:
        module(x).backward(grad)
    return log
