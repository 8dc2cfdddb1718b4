"""The causal kernel family against its own bidirectional form and against performer-pytorch's causal path, on the
CPU, one process, interleaved rounds (not a test: no ``test_`` prefix). Run on an idle machine:

    pip install performer-pytorch        # beside the harness, never imported by it
    python -m tools.causal_comparisons   # [--n 4096] [--batch 4] [--heads 2] [--dim 64] [--threads 2]

Prints, per variant, the causal form's fwd+bwd time over its bidirectional form's (the median of per-round ratios,
with a 95% bootstrap interval) and its peak memory over the bidirectional form's (the allocator's, exact); then the
zoo's causal Performer over performer-pytorch's ``SelfAttention(causal=True)`` with the same heads, head width and
feature count (its CPU causal path: ``causal_linear_attention_noncuda``), in time and memory. The shapes default to the
speed suite's quick profile at n = 4096.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

import attentions
from harness.measure.memory import peak_memory_bytes
from harness.measure.timing import time_interleaved
from harness.report.stats import paired_ratio

CPU = torch.device("cpu")


def fwd_bwd(module: torch.nn.Module, batch: int, n: int, dim: int) -> Callable[[], None]:
    """One forward and backward of ``module`` on a fixed input, gradients set to None first (as the speed suite)."""
    torch.manual_seed(1)
    x = torch.randn(batch, n, dim, requires_grad=True)
    grad = torch.randn(batch, n, dim)
    params = list(module.parameters())

    def step() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        module(x).backward(grad)

    return step


def _zoo(name: str, args: argparse.Namespace, causal: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    return attentions.build(name, dim=args.dim, heads=args.heads, max_seq_len=args.n, dropout=0.0,
                            causal=causal).train()


def _public_performer(args: argparse.Namespace) -> torch.nn.Module:
    from performer_pytorch import SelfAttention

    nb = attentions.spec("performer").config.nb_features
    return SelfAttention(dim=args.dim, heads=args.heads, dim_head=args.dim // args.heads, nb_features=nb,
                         causal=True).train()


def _compare(rows: dict[str, Callable[[], None]], pairs: list[tuple[str, str]], args: argparse.Namespace) -> None:
    timed = dict(zip(rows, time_interleaved(list(rows.values()), CPU, min_run_time_s=args.seconds, min_repeats=10,
                                            warmup=2), strict=True))
    memory = {name: peak_memory_bytes(fn, CPU, calls=2) for name, fn in rows.items()}
    print("| a / b | time ratio [95%] | median ms (a, b) | peak memory ratio | peak MiB (a, b) |")
    print("|---|---|---|---|---|")
    for a, b in pairs:
        ta, tb = timed[a], timed[b]
        if isinstance(ta, Exception) or isinstance(tb, Exception):
            print(f"| {a} / {b} | {ta if isinstance(ta, Exception) else tb} | | | |")
            continue
        r = paired_ratio(ta.times_ms, tb.times_ms)
        interval = "" if r is None else f"{r.value:.2f} [{r.lo:.2f}, {r.hi:.2f}]"
        print(f"| {a} / {b} | {interval} | {ta.median_ms:.1f}, {tb.median_ms:.1f} | "
              f"{memory[a] / memory[b]:.2f} | {memory[a] / 2**20:.0f}, {memory[b] / 2**20:.0f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seconds", type=float, default=2.0, help="timing budget per function")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = (args.batch, args.n, args.dim)
    rows: dict[str, Callable[[], None]] = {}
    for name in ("performer", "linear_transformer", "cosformer", "fmmformer"):
        rows[f"{name} causal"] = fwd_bwd(_zoo(name, args, True), *shape)
        rows[f"{name}"] = fwd_bwd(_zoo(name, args, False), *shape)
    try:
        rows["performer-pytorch causal"] = fwd_bwd(_public_performer(args), *shape)
    except ImportError:
        print("performer-pytorch is not installed (pip install performer-pytorch): its row is left out")
    print(f"B {args.batch}, n {args.n}, H {args.heads}, D {args.dim}, float32, fwd+bwd, {args.threads} threads, "
          f"torch {torch.__version__}")
    pairs = [(f"{v} causal", v) for v in ("performer", "linear_transformer", "cosformer", "fmmformer")]
    if "performer-pytorch causal" in rows:
        pairs.append(("performer causal", "performer-pytorch causal"))
    _compare(rows, pairs, args)


if __name__ == "__main__":
    main()
