"""The Makefile's commands name modules that exist (a move of a module must carry its make target along)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.conftest import REPO_ROOT

MODULES = sorted(set(re.findall(r"-m ((?:harness|attentions|tools)[\w.]*)", (REPO_ROOT / "Makefile").read_text())))


def test_the_makefile_runs_modules() -> None:
    assert "tools.gpu_check" in MODULES and "harness.catalog" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_every_module_the_makefile_runs_exists(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, f"the Makefile runs `-m {module}`, which does not exist"
