"""``make gpu-check`` (or ``python -m tools.gpu_check``): the whole project on one GPU in a few minutes.

Three parts, each one summary line (its full output in ``OUT/<part>.log``):

1. ``tests``: the CUDA tests (every variant on CUDA against the CPU in float64, bf16 autocast forward and backward,
   S3Attention's GPU layout) and the speed kind's GPU and compile tests.
2. ``smoke``: every suite's ``smoke`` profile on the GPU, end to end (the approximation suite with the accuracy run's
   trained probes, as ``make approximation``).
3. ``speed``: the speed suite's ``gpu`` profile (B 4, H 8, D 512, bf16 autocast, fwd+bwd, n = 1K/4K/16K, eager and as
   a CUDA graph); its line gives S3Attention's time against ``vanilla_sdpa``, its kernels per call and how busy the
   GPU was.

It needs torch with CUDA and the packages ``pip install -e .[dev]`` brings, and nothing from the network: on a machine
whose system Python has them, ``make gpu-check PYTHON_RUN=python3`` (no ``.venv``). Exit 0 when every part passed,
1 when one failed, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

#: Every suite of suites/ (a suite added there is checked too, without editing this file).
SUITES = tuple(sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "suites").glob("*.yaml")))
# test_compile.py compiles for the CPU (CI runs it): on a GPU machine it took minutes and adds nothing GPU-specific
TESTS = ("tests/attentions/test_cuda.py", "tests/attentions/test_autocast.py",
         "tests/attentions/test_s3attention_gpu.py", "tests/harness/measure/test_gpu.py")


def _run(cmd: list[str], log: Path, env: dict[str, str]) -> tuple[int, str, float]:
    """Run ``cmd``, its output into ``log``; (exit code, the output's last 4,000 characters, seconds)."""
    started = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        f.write(proc.stdout)
    return proc.returncode, proc.stdout[-4000:], time.perf_counter() - started


def part_tests(out: Path, env: dict[str, str]) -> tuple[bool, str]:
    code, tail, secs = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                            out / "tests.log", env)
    last = next((line for line in reversed(tail.splitlines()) if re.search(r"\d+ (passed|failed)", line)), tail[-200:])
    return code == 0, f"{last.strip('= ')} ({secs:.0f} s)"


def _statuses(path: Path) -> pd.Series:
    df = pd.read_csv(path) if path.exists() else pd.DataFrame({"status": []})
    return df["status"].value_counts()


def part_smoke(out: Path, env: dict[str, str], device: str) -> tuple[bool, str]:
    started, failed, counts = time.perf_counter(), [], pd.Series(dtype=int)
    for suite in SUITES:
        extra = ["--data-dir", str(out / "smoke" / "accuracy" / "smoke")] if suite == "approximation" else []
        code, _, _ = _run([sys.executable, "-m", "harness.cli", "run", f"suites/{suite}.yaml", "--profile", "smoke",
                           "--device", device, "--out", str(out / "smoke"), *extra], out / "smoke.log", env)
        statuses = _statuses(out / "smoke" / suite / "smoke" / "results.csv")
        counts = counts.add(statuses, fill_value=0)
        if code != 0 or statuses.get("error", 0) or statuses.get("nan", 0):
            failed.append(f"{suite} (exit {code}, {int(statuses.get('error', 0))} error)")
    shown = ", ".join(f"{k} {int(v)}" for k, v in counts.sort_values(ascending=False).items())
    verdict = f"failed: {'; '.join(failed)}" if failed else f"{len(SUITES)} suites"
    return not failed, f"{verdict}; cells {shown} ({time.perf_counter() - started:.0f} s)"


def part_speed(out: Path, env: dict[str, str], device: str) -> tuple[bool, str]:
    code, _, secs = _run([sys.executable, "-m", "harness.cli", "run", "suites/speed.yaml", "--profile", "gpu",
                          "--device", device, "--out", str(out / "speed")], out / "speed.log", env)
    path = out / "speed" / "speed" / "gpu" / "results.csv"
    if code != 0 or not path.exists():
        return False, f"exit {code}, no results ({secs:.0f} s)"
    return True, f"{s3_against_sdpa(pd.read_csv(path))} ({secs:.0f} s)"


def s3_against_sdpa(df: pd.DataFrame) -> str:
    """S3Attention against vanilla_sdpa per length: eager and graph time ratios, kernels per call, GPU busy, memory."""
    ok = df[df["status"] == "ok"]
    parts = []
    for n, group in ok.groupby("seq_len"):
        rows = {r["attention"]: r for _, r in group.iterrows()}
        s3, sdpa = rows.get("s3attention"), rows.get("vanilla_sdpa")
        if s3 is None or sdpa is None:
            continue
        graph = (f", graph {s3['graph_time_ms_median'] / sdpa['graph_time_ms_median']:.2f}x"
                 if "graph_time_ms_median" in group and pd.notna(s3.get("graph_time_ms_median")) else "")
        parts.append(f"n={n}: {s3['time_ms_median'] / sdpa['time_ms_median']:.2f}x{graph}, "
                     f"{s3.get('cuda_kernels_per_call', float('nan')):.0f} kernels, busy "
                     f"{100 * s3.get('gpu_busy_fraction', float('nan')):.0f}%, memory "
                     f"{s3['peak_mem_bytes'] / sdpa['peak_mem_bytes']:.2f}x")
    return "S3Attention / vanilla_sdpa: " + ("; ".join(parts) or "no pair of ok cells")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnbench-gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/gpu-check", help="where the logs and results go")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--parts", default="tests,smoke,speed", help="comma-separated: tests, smoke, speed")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: torch sees no CUDA device (torch " + torch.__version__ + "); run it on a GPU machine",
              file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Inductor compiles in this process (no worker pool to outlive a test run), its caches under OUT
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TORCHINDUCTOR_CACHE_DIR": str(out / ".cache" / "inductor"),
           "TRITON_CACHE_DIR": str(out / ".cache" / "triton"), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    print(f"gpu-check: {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
          f"out {out}", flush=True)
    parts: dict[str, Callable[[], tuple[bool, str]]] = {
        "tests": lambda: part_tests(out, env),
        "smoke": lambda: part_smoke(out, env, args.device),
        "speed": lambda: part_speed(out, env, args.device),
    }
    started, passed = time.perf_counter(), True
    for name in args.parts.split(","):
        ok, line = parts[name.strip()]()
        passed &= ok
        print(f"gpu-check {name:6s} {'ok  ' if ok else 'FAIL'} {line}", flush=True)
    print(f"gpu-check: {'passed' if passed else 'FAILED'} in {time.perf_counter() - started:.0f} s", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
