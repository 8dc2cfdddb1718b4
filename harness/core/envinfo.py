"""Description of the machine and software a benchmark ran on, stored with every result.

:func:`collect_env` is what a run stores; :func:`collect_cpu_env` the same block for a CPU run answered without
importing torch (``attnbench env`` on a machine whose torch has no CUDA: under a second instead of several).
"""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import importlib.util
import os
import platform
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# git can hang on a stale network mount; the environment report must never block a run.
_GIT_TIMEOUT_S = 10


def collect_env(device: torch.device) -> dict[str, object]:
    """Returns the environment of a benchmark run as a JSON-serialisable dict.

    Never raises: a field that cannot be determined is None.

    Args:
        device: The device the benchmark runs on.

    Returns:
        A dict with the keys device, device_name, cpu_model, cpu_capability, cpu_bf16, torch_version, cuda_version,
        cudnn_version, python_version, threads, interop_threads, cpu_count, platform, hostname,
        git_commit, time_utc, glibc_tunables, xformers_version and numpy_version. ``cpu_model`` is the model name
        with its family, model and stepping (a virtual machine's model name can be as bare as "AMD EPYC");
        ``cpu_capability`` the instruction set torch's CPU kernels were dispatched for (``AVX2``, ``AVX512``);
        ``cpu_bf16`` whether the CPU computes bfloat16 natively (:func:`cpu_bf16`).
    """
    import torch  # here: collect_cpu_env and the helpers below answer without it

    cpu_model = _safe(_cpu_model)
    return {
        "device": _safe(lambda: _device_str(device)),
        "device_name": _safe(lambda: _device_name(device)) if device.type == "cuda" else cpu_model,
        "cpu_model": cpu_model,
        "cpu_capability": _safe(torch.backends.cpu.get_cpu_capability),
        "cpu_bf16": _safe(cpu_bf16),
        "torch_version": _safe(lambda: str(torch.__version__)),
        "cuda_version": _safe(lambda: torch.version.cuda),
        "cudnn_version": _safe(torch.backends.cudnn.version),
        "python_version": platform.python_version(),
        "threads": _safe(torch.get_num_threads),
        "interop_threads": _safe(torch.get_num_interop_threads),
        "cpu_count": os.cpu_count(),
        "platform": _safe(platform.platform),
        "hostname": _safe(socket.gethostname),
        "git_commit": _safe(_git_commit),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
        "xformers_version": _safe(lambda: _module_version("xformers")),
        "numpy_version": _safe(lambda: _module_version("numpy")),
    }


def torch_build() -> dict[str, str | None]:
    """``{"version": ..., "cuda": ...}`` of the installed torch, read from its files without importing it (the wheel's
    metadata and ``torch/version.py``); every value None when torch is not installed or the file is unreadable."""
    out: dict[str, str | None] = {"version": None, "cuda": None}
    try:
        out["version"] = importlib.metadata.version("torch")
        spec = importlib.util.find_spec("torch")  # a top-level package is found without being imported
        origin = Path(spec.origin) if spec and spec.origin else None
        tree = ast.parse((origin.parent / "version.py").read_text()) if origin else None
    except (importlib.metadata.PackageNotFoundError, OSError, SyntaxError, ValueError):
        return out
    for node in ast.walk(tree) if tree else ():
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(target, ast.Name) and target.id == "cuda":
            value = node.value
            out["cuda"] = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return out


def collect_cpu_env(threads: int) -> dict[str, object]:
    """The block :func:`collect_env` gives for the CPU, without importing torch: ``threads`` is the intra-op thread
    count a run would use, ``interop_threads`` is None (only torch knows its pool), ``cudnn_version`` None (a CPU
    build has none; a CUDA build goes through :func:`collect_env`), ``cpu_capability`` None (the instruction set
    torch dispatches for is torch's to say)."""
    cpu_model = _safe(_cpu_model)
    return {
        "device": "cpu", "device_name": cpu_model, "cpu_model": cpu_model, "cpu_capability": None,
        "cpu_bf16": _safe(cpu_bf16), "torch_version": torch_build()["version"],
        "cuda_version": torch_build()["cuda"], "cudnn_version": None, "python_version": platform.python_version(),
        "threads": threads, "interop_threads": None, "cpu_count": os.cpu_count(), "platform": _safe(platform.platform),
        "hostname": _safe(socket.gethostname), "git_commit": _safe(_git_commit),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"), "xformers_version": _installed_version("xformers"),
        "numpy_version": _installed_version("numpy"),
    }


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _safe(get: Callable[[], object]) -> object:
    """Returns ``get()``, or None if it raises."""
    try:
        return get()
    except Exception:
        return None


def _device_str(device: torch.device) -> str:
    """'cpu' or 'cuda:<index>', with the index made explicit for a bare 'cuda'."""
    import torch

    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


def _device_name(device: torch.device) -> str:
    import torch

    return torch.cuda.get_device_name(device)


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (Linux; empty elsewhere)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block ends
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _cpu_model() -> str | None:
    """The CPU model as a paper's hardware line needs it: the model name from /proc/cpuinfo (Linux) with its family,
    model and stepping (which tell the generation where a virtual machine's name does not: "AMD EPYC"), and whether
    it is a virtual machine; else what platform reports."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or None
    if name is None:
        return None
    ids = [f"{label} {info[key]}" for key, label in (("cpu family", "family"), ("model", "model"),
                                                       ("stepping", "stepping")) if info.get(key)]
    vm = ["virtual machine"] if "hypervisor" in info.get("flags", "").split() else []
    return f"{name} ({', '.join(ids + vm)})" if ids or vm else name


#: CPU flags of native bfloat16 arithmetic: x86's AVX-512 BF16 and AMX (Linux's /proc/cpuinfo names), Arm's BF16.
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_bf16() -> str | None:
    """``native`` where the CPU computes bfloat16 in hardware (:data:`BF16_FLAGS`), ``emulated`` where it does not
    (torch then converts in software, many times slower than float32), None where the flags cannot be read."""
    info = _cpuinfo()
    flags = (info.get("flags") or info.get("Features") or "").split()
    if not flags:
        return None
    return "native" if set(flags) & set(BF16_FLAGS) else "emulated"


def _module_version(name: str) -> str | None:
    """The ``__version__`` of an importable module, None if it is not installed."""
    try:
        module = __import__(name)
    except Exception:  # an installed-but-broken package (e.g. xformers built for another torch)
        return None
    version = getattr(module, "__version__", None)
    return None if version is None else str(version)


def _git(*args: str) -> str:
    """Output of a git command run in this package's directory."""
    return subprocess.run(
        ["git", *args],
        cwd=Path(__file__).resolve().parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=_GIT_TIMEOUT_S,
    ).stdout.strip()


def _git_commit() -> str | None:
    """HEAD of the checkout this package lives in, '-dirty' if it has uncommitted changes."""
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain"))
    except (OSError, subprocess.SubprocessError):  # git missing, not a checkout, timeout
        return None
    return commit + "-dirty" if dirty else commit
