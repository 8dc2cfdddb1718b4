"""The Makefile's commands name modules that exist (a move of a module must carry its make target along), every run
target takes the same settings, and `make setup` takes torch's CPU build where no GPU is found."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO_ROOT
from tools import torch_index

MODULES = sorted(set(re.findall(r"-m ((?:harness|attentions|tools)[\w.]*)", (REPO_ROOT / "Makefile").read_text())))


def test_the_makefile_runs_modules() -> None:
    assert "tools.gpu_check" in MODULES and "harness.catalog" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_every_module_the_makefile_runs_exists(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, f"the Makefile runs `-m {module}`, which does not exist"


def _dry_run(*args: str) -> str:
    """The commands ``make -n ARGS`` would run (DEVICE given, so nothing asks torch for a GPU)."""
    # run from `make test` the outer make's MAKELEVEL makes this one print "Leaving directory" lines: not wanted
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "--no-print-directory", "-n", "DEVICE=cpu", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_bench_long_takes_the_settings_every_target_takes() -> None:
    """`make bench-long` ran its own command line and ignored THREADS, EXECUTOR and ADDRESS."""
    command = _dry_run("bench-long", "THREADS=3", "EXECUTOR=ray", "ADDRESS=10.0.0.1:6379").splitlines()[-1]
    assert "attnbench run --profile long " in command and command.rstrip().endswith("suites/speed.yaml")
    assert "--threads 3" in command and "--executor ray" in command and "--address 10.0.0.1:6379" in command
    assert "--profile quick" in _dry_run("bench-speed").splitlines()[-1]  # PROFILE still sets the others


@pytest.mark.parametrize(("index", "gpu", "local", "flags"), [
    ("https://download.pytorch.org/whl/cu126", False, False, ["--index-url", "https://download.pytorch.org/whl/cu126"]),
    ("", True, False, []),  # a GPU: PyPI's CUDA build is the one wanted
    ("", False, True, []),  # a local wheelhouse (these machines' CPU build): nothing reaches the network for torch
    ("", False, False, ["--extra-index-url", torch_index.CPU_INDEX]),  # a fresh machine without a GPU
])
def test_setup_takes_the_cpu_build_where_no_gpu_is_found(index: str, gpu: bool, local: bool,
                                                         flags: list[str]) -> None:
    assert torch_index.pip_flags(index, gpu=gpu, local=local) == flags


def test_setup_asks_where_torch_comes_from() -> None:
    recipe = (REPO_ROOT / "Makefile").read_text()
    assert '-m tools.torch_index "$(TORCH_SPEC)" "$(TORCH_INDEX)"' in recipe
