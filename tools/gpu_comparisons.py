"""Two GPU tables, for a GPU session's note (not a test: no ``test_`` prefix). Run on an idle GPU machine:

    python -m tools.gpu_comparisons s3 --before FILE      # S3Attention before/after against SDPA
    python -m tools.gpu_comparisons public                # the zoo against the public implementations
    python -m tools.gpu_comparisons ops                   # the same pairs' op counts (any machine)

``s3``: S3Attention as it is now, as it was in ``FILE`` (an older ``attentions/s3attention.py`` with its registration
lines removed, imports absolute) and ``vanilla_sdpa``, bf16 autocast fwd+bwd, B 4, H 8, D 512, n = 1K/4K/16K, timed in
interleaved rounds (harness.measure.timing), then each as a captured CUDA graph, with kernels per call, GPU busy
fraction and peak memory (harness.measure.gpu / memory).

``public``: Performer, Nyströmformer, Linformer and Reformer of the zoo against lucidrains' packages (performer-pytorch,
nystrom-attention, linformer, reformer-pytorch; installed beside, never imported by the harness), the same shapes and
hyperparameters, dropout off, in one process, bf16 autocast and float32: our time / theirs (median of per-round ratios)
and our peak memory / theirs.

``ops`` (no GPU needed): the same pairs, float32, dropout off, one training fwd+bwd on the meta device
(``tests.attentions.oplog``): ATen ops dispatched (each a kernel launch or two on CUDA, so a layer of many is bound by
the host) and the bytes they read and write (a bound on memory traffic), at 4K and 16K.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable

import torch

import attentions
from harness.measure.gpu import profile_call, time_graph
from harness.measure.memory import peak_memory_bytes
from harness.measure.timing import time_interleaved
from harness.report.stats import paired_ratio

B, H, D = 4, 8, 512
LENGTHS = (1024, 4096, 16384)


def _step(module: torch.nn.Module, n: int, amp: bool) -> Callable[[], None]:
    """One fwd+bwd of ``module`` on a fixed input, gradients set to None first (as the speed suite)."""
    x = torch.randn(B, n, D, device="cuda", requires_grad=True)
    params = list(module.parameters())
    grads: dict[torch.dtype, torch.Tensor] = {}

    def step() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            y = module(x)
        if y.dtype not in grads:
            grads[y.dtype] = torch.randn(y.shape, device="cuda", dtype=y.dtype)
        y.backward(grads[y.dtype])

    return step


def _table(rows: dict[str, Callable[[], None]], reference: str) -> list[str]:
    """Each step timed interleaved with the others; then graph time, kernels, busy fraction and memory."""
    dev = torch.device("cuda")
    timed = dict(zip(rows, time_interleaved(list(rows.values()), dev, min_run_time_s=1.0, min_repeats=10, warmup=3),
                     strict=True))
    ref = timed[reference]
    lines = []
    for name, fn in rows.items():
        t = timed[name]
        if isinstance(t, Exception):
            lines.append(f"| {name} | {type(t).__name__}: {str(t).splitlines()[0][:80]} |")
            continue
        prof = profile_call(fn, dev)
        graph = time_graph(fn, dev, {"min_run_time_s": 0.5, "min_repeats": 10, "warmup": 3})
        mem = peak_memory_bytes(fn, dev, calls=2) / 2**20
        ratio = paired_ratio(t.times_ms, ref.times_ms) if not isinstance(ref, Exception) else None
        lines.append(f"| {name} | {t.median_ms:.3f} | {'' if ratio is None else f'{ratio.value:.2f}'} | "
                     f"{graph.get('graph_time_ms_median', float('nan')):.3f} {graph.get('graph_error', '')} | "
                     f"{prof.get('cuda_kernels_per_call', float('nan')):.0f} | "
                     f"{100 * prof.get('gpu_busy_fraction', float('nan')):.0f}% | {mem:.0f} |")
    return lines


def s3_table(before_file: str) -> None:
    spec = importlib.util.spec_from_file_location("s3_before", before_file)
    assert spec and spec.loader
    before = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = before  # a dataclass in the file looks its module up there
    spec.loader.exec_module(before)
    print("| variant | eager ms | / sdpa | graph ms | kernels | GPU busy | peak MiB |")
    for n in LENGTHS:
        print(f"| **n = {n}** | | | | | | |")
        torch.manual_seed(0)
        now = attentions.build("s3attention", dim=D, heads=H, max_seq_len=n, dropout=0.0).cuda().train()
        old = before.S3Attention(now.cfg).cuda().train()
        old.load_state_dict(now.state_dict())
        sdpa = attentions.build("vanilla_sdpa", dim=D, heads=H, max_seq_len=n, dropout=0.0).cuda().train()
        rows = {"vanilla_sdpa": _step(sdpa, n, True), "s3attention (before)": _step(old, n, True),
                "s3attention (now)": _step(now, n, True)}
        print("\n".join(_table(rows, "vanilla_sdpa")), flush=True)
        del now, old, sdpa, rows
        torch.cuda.empty_cache()


def _public(name: str, n: int) -> torch.nn.Module:
    """lucidrains' implementation of ``name`` with the zoo's defaults (dropout off)."""
    if name == "performer":
        from performer_pytorch import SelfAttention

        return SelfAttention(dim=D, heads=H, dim_head=D // H, nb_features=256, causal=False)
    if name == "nystromformer":
        from nystrom_attention import NystromAttention

        return NystromAttention(dim=D, dim_head=D // H, heads=H, num_landmarks=64, pinv_iterations=6, residual=True,
                                residual_conv_kernel=33)
    if name == "linformer":
        from linformer import LinformerSelfAttention

        return LinformerSelfAttention(dim=D, seq_len=n, k=256, heads=H, one_kv_head=False, share_kv=False)
    from reformer_pytorch import LSHSelfAttention

    return LSHSelfAttention(dim=D, heads=H, bucket_size=64, n_hashes=2, causal=False)


def public_table() -> None:
    print("| variant | dtype | n | ours ms | theirs ms | ours / theirs (time) | ours / theirs (memory) |")
    dev = torch.device("cuda")
    for name in ("performer", "nystromformer", "linformer", "reformer"):
        for amp in (True, False):
            for n in LENGTHS[1:]:  # the bar is at 4K and 16K
                torch.manual_seed(0)
                ours = attentions.build(name, dim=D, heads=H, max_seq_len=n, dropout=0.0).cuda().train()
                theirs = _public(name, n).cuda().train()
                fns = [_step(ours, n, amp), _step(theirs, n, amp)]
                a, b = time_interleaved(fns, dev, min_run_time_s=0.5, min_repeats=10, warmup=3)
                dtype = "bf16 autocast" if amp else "float32"
                if isinstance(a, Exception) or isinstance(b, Exception):
                    print(f"| {name} | {dtype} | {n} | {a if isinstance(a, Exception) else ''} | "
                          f"{b if isinstance(b, Exception) else ''} | | |", flush=True)
                    continue
                mem = peak_memory_bytes(fns[0], dev, calls=2) / peak_memory_bytes(fns[1], dev, calls=2)
                print(f"| {name} | {dtype} | {n} | {a.median_ms:.3f} | {b.median_ms:.3f} | "
                      f"{paired_ratio(a.times_ms, b.times_ms).value:.2f} | {mem:.2f} |", flush=True)
                del ours, theirs, fns
                torch.cuda.empty_cache()


def ops_table() -> None:
    from tests.attentions.oplog import module_ops

    print("| variant | n | our ops | their ops | our GB moved | their GB moved |")
    for name in ("performer", "nystromformer", "linformer", "reformer"):
        for n in LENGTHS[1:]:
            torch.manual_seed(0)
            logs = [module_ops(m, torch.float32, n) for m in (
                attentions.build(name, dim=D, heads=H, max_seq_len=n, dropout=0.0), _public(name, n))]
            counts = [sum(log.ops.values()) for log in logs]
            print(f"| {name} | {n} | {counts[0]} | {counts[1]} | {logs[0].bytes_moved / 1e9:.1f} | "
                  f"{logs[1].bytes_moved / 1e9:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("table", choices=["s3", "public", "ops"])
    parser.add_argument("--before", help="an older attentions/s3attention.py, registration removed (s3 table)")
    args = parser.parse_args(argv)
    if args.table == "ops":
        print(f"meta device, torch {torch.__version__}", flush=True)
        return ops_table()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    s3_table(args.before) if args.table == "s3" else public_table()


if __name__ == "__main__":
    main(sys.argv[1:])
