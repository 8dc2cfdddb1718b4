"""Where ``make setup`` lets pip take torch from, printed as pip's flags: ``python -m tools.torch_index SPEC [INDEX]``.

PyPI's Linux wheel of torch is the CUDA build (several GB with its NVIDIA libraries), so ``pip install torch==X`` on
a fresh machine without a GPU pulls a build it cannot use. The CPU build lives on PyTorch's own index. The rule:

1. ``TORCH_INDEX`` given: that index alone (``--index-url``), e.g. a CUDA one.
2. An NVIDIA GPU here (its driver, or ``nvidia-smi``): no flag; PyPI's CUDA build is the one wanted.
3. pip can install ``TORCH_SPEC`` from what it has locally (``--no-index``: its find-links, a wheelhouse such as
   this project's machines carry with the CPU build): no flag, so nothing reaches the network for torch.
4. Otherwise: ``--extra-index-url`` PyTorch's CPU index. pip takes the highest version that matches, and a build
   ``2.13.0+cpu`` sorts above PyPI's ``2.13.0``, so the CPU build wins while the usual index still serves the rest.

Standard library only: it runs in the freshly made ``.venv``, before anything is installed there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

#: PyTorch's index of CPU-only builds.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip_flags(index: str, *, gpu: bool, local: bool) -> list[str]:
    """pip's flags for torch under the rule of the module docstring."""
    if index:
        return ["--index-url", index]
    if gpu or local:
        return []
    return ["--extra-index-url", CPU_INDEX]


def has_gpu() -> bool:
    """Whether an NVIDIA driver is loaded here (what torch's CUDA build needs)."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def local_wheel(spec: str) -> bool:
    """Whether pip can install ``spec`` without an index (from its find-links: a local wheelhouse), asked without
    installing anything (``--dry-run``; an older pip without it downloads into a temporary folder instead)."""
    quiet = {"capture_output": True, "text": True, "timeout": 300}
    base = [sys.executable, "-m", "pip"]
    probe = subprocess.run([*base, "install", "--dry-run", "--no-deps", "--no-index", "-q", spec], **quiet)
    if "no such option" not in probe.stderr:
        return probe.returncode == 0
    with tempfile.TemporaryDirectory() as folder:
        return subprocess.run([*base, "download", "--no-deps", "--no-index", "-q", "-d", folder, spec],
                              **quiet).returncode == 0


def main(argv: list[str]) -> int:
    """Print the flags for ``argv`` = [TORCH_SPEC, TORCH_INDEX]; say on stderr which build and why."""
    spec, index = argv[0], (argv[1] if len(argv) > 1 else "").strip()
    gpu = not index and has_gpu()
    local = not index and not gpu and local_wheel(spec)
    flags = pip_flags(index, gpu=gpu, local=local)
    why = ("TORCH_INDEX" if index else "an NVIDIA GPU here: PyPI's CUDA build" if gpu
           else "pip has it locally" if local else f"no GPU and no local wheel: the CPU build from {CPU_INDEX}")
    print(f"torch: {spec} ({why})", file=sys.stderr)
    print(" ".join(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
