"""S3Attention before tuning, tuned (eager) and tuned compiled, interleaved fwd+bwd on the same weights: the issue 16
before/after figures of the README and the session note. Not a test (no ``test_`` prefix); run it on a quiet machine
under the timing malloc settings:

    GLIBC_TUNABLES=$(.venv/bin/python -c "from harness.core.tunables import GLIBC_TUNABLES_TIMING as g; print(g)") \
        .venv/bin/python -m tools.s3_before_after 1024,2048,4096 1 20

Arguments: lengths, intra-op threads, rounds (B 4, H 2, D 64). GFLOP/s are over the useful FLOPs, those of the layer
before tuning (the tuned layer executes more because of its block-diagonal zero blocks).
"""

import sys
import time
from collections.abc import Callable

import torch

import attentions
from harness.measure.flops import count_flops, measure_gemm_peak_gflops
from harness.measure.timing import time_interleaved
from harness.report.stats import paired_ratio
from tests.attentions.s3attention_before import S3AttentionBefore


def _step(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        module(x).backward(grad)

    return step


def measure(n: int, rounds: int, peak: float) -> str:
    """One length: the three layers timed by the harness's interleaved timer (one call per block, the order rotated
    each round); the line the README and the note quote."""
    torch.manual_seed(0)
    new = attentions.build("s3attention", dim=64, heads=2, max_seq_len=n, dropout=0.0, smoother_dropout=0.0)
    old = S3AttentionBefore(new.cfg)
    old.load_state_dict(new.state_dict())
    x, grad = torch.randn(4, n, 64, requires_grad=True), torch.randn(4, n, 64)
    fs = {"before": _step(old, x, grad), "now": _step(new, x, grad),
          "compiled": _step(torch.compile(new, dynamic=False), x, grad)}
    flops = count_flops(fs["before"])  # the layer's useful work
    started = time.perf_counter()
    fs["compiled"]()
    cold = time.perf_counter() - started
    timed = dict(zip(fs, time_interleaved(list(fs.values()), torch.device("cpu"), min_run_time_s=0.0,
                                          min_repeats=rounds, warmup=3), strict=True))
    ratio = {k: paired_ratio(timed[ref].times_ms, timed[k].times_ms) for k, ref in (("now", "before"),
                                                                                    ("compiled", "now"))}
    rate = {k: flops / t.median_ms / 1e6 for k, t in timed.items()}
    shown = {k: f"{t.median_ms:.1f} ms ({rate[k]:.1f} GFLOP/s = {100 * rate[k] / peak:.1f}% of peak)"
             for k, t in timed.items()}
    return (f"n={n}: before {shown['before']}, now {shown['now']}, compiled {shown['compiled']} [first compiled call "
            f"{cold:.1f} s]; before/now {ratio['now'].value:.2f}x, now/compiled {ratio['compiled'].value:.2f}x "
            f"(medians of per-round ratios); useful {flops / 1e9:.3f} GFLOP")


def main(lengths: list[int], threads: int, rounds: int) -> None:
    torch.set_num_threads(threads)
    peak = measure_gemm_peak_gflops(torch.device("cpu"))
    print(f"threads {torch.get_num_threads()}, GEMM peak {peak:.1f} GFLOP/s")
    for n in lengths:
        print(measure(n, rounds, peak))


if __name__ == "__main__":
    main([int(v) for v in sys.argv[1].split(",")], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 20)
