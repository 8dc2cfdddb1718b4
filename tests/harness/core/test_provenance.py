"""A cell's key covers the code it runs (the import closure of its variant and its kind's measuring modules, within the
project) and the software it runs with: edit what a cell imports and it is measured again; edit anything else and
nothing is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml

import harness.core.provenance as provenance
from harness.core.suite import measuring_modules
from harness.kinds import KINDS
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, TINY_TIMING, tiny_doc


@pytest.fixture(autouse=True)
def _fresh_identities() -> Iterator[None]:
    for cached in (provenance._imports, provenance.import_closure, provenance._code_identity):
        cached.cache_clear()
    yield
    for cached in (provenance._imports, provenance.import_closure, provenance._code_identity):
        cached.cache_clear()


def _closure(*roots: str) -> set[str]:
    return set(provenance.import_closure(tuple(roots))[0])


@pytest.mark.parametrize(("variant", "helpers"), [
    ("attentions.s3attention", {"attentions._s3_cpu", "attentions.base"}),
    ("attentions.scatterbrain", {"attentions.performer", "attentions._lsh"}),
    ("attentions.fsat", {"attentions.fat", "attentions._fsat_ops"}),
    ("attentions.local", {"attentions._blocks"}),
    ("attentions.linear_transformer", {"attentions._kernels"}),
])
def test_a_variants_closure_holds_the_helpers_it_imports(variant: str, helpers: set[str]) -> None:
    assert helpers <= _closure(variant)


def test_a_variants_closure_holds_no_other_variant_it_does_not_import() -> None:
    """The zoo's package imports every variant (to register it) through importlib, which is no dependency of one
    variant's numbers: vanilla's cells do not depend on S3Attention."""
    closure = _closure("attentions.vanilla", *measuring_modules(KINDS["speed"]))
    assert "attentions" in closure and "attentions.registry" in closure
    assert not closure & {"attentions.s3attention", "attentions.performer", "attentions._s3_cpu"}


@pytest.mark.parametrize(("kind", "needed", "not_needed"), [
    ("speed", {"harness.measure.timing", "harness.measure.memory", "harness.models.classifier"},
     {"harness.kinds.speed.report", "harness.report.plots"}),
    ("accuracy", {"harness.kinds.accuracy.training", "harness.models.classifier", "harness.kinds.accuracy.loaders"},
     {"harness.kinds.accuracy.table1", "harness.report.plots", "attentions.s3attention"}),
    ("forecasting", {"harness.kinds.forecasting.training", "harness.kinds.forecasting.informer",
                     "harness.kinds.forecasting.s3_forecaster", "harness.models.checkpoints"},
     {"harness.kinds.forecasting.table2", "harness.report.plots", "harness.report.format"}),
    ("approximation", {"harness.kinds.approximation.error", "harness.measure.timing"},
     {"harness.kinds.approximation.report", "harness.report.plots"}),
])
def test_a_kinds_closure_holds_its_measuring_code_and_not_its_reports(kind: str, needed: set[str],
                                                                    not_needed: set[str]) -> None:
    closure = _closure(*measuring_modules(KINDS[kind]))
    assert needed <= closure
    assert not closure & not_needed


def test_a_function_level_import_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Code a function imports when it runs is code the cell runs."""
    package = tmp_path / "harness" / "fake"
    package.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from .b import g\n    return g()\n")
    (package / "b.py").write_text("import numpy\nfrom . import c\n")
    (package / "c.py").write_text("")
    monkeypatch.setattr(provenance, "project_root", lambda: tmp_path)
    provenance._source.cache_clear()
    try:
        modules, libraries = provenance.import_closure(("harness.fake.a",))
    finally:
        provenance._source.cache_clear()
    assert set(modules) == {"harness.fake.a", "harness.fake.b", "harness.fake.c", "harness.fake"}
    assert "numpy" in libraries


def test_the_software_is_part_of_the_key(write_yaml: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_yaml(tiny_doc())
    keys = {c.key for c in load_suite(path).expand("cpu")}
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    malloc = {c.key for c in load_suite(path).expand("cpu")}
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    other_torch = {c.key for c in load_suite(path).expand("cpu")}
    assert not keys & malloc and not malloc & other_torch
    (cell, *_) = load_suite(path).expand("cpu")
    assert cell.setting["torch"] == "0.0.0-other" and cell.setting["malloc"] == "glibc.malloc.arena_max=1"
    assert "numpy" in cell.setting["libraries"]  # the speed kind's measuring code imports it


# ---------------------------------------------------------------------------------------------------------------------
# In a copy of the tree, as a user would edit it


def _copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for package in ("attentions", "harness"):
        shutil.copytree(REPO_ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _run(tree: Path, suite: Path, out: Path) -> str:
    """``attnbench run`` from the copied tree (its own modules, not this checkout's); its summary line."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "ATTNBENCH_NO_REEXEC": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(suite), "--out", str(out), "--device",
                           "cpu", "--threads", "1"], cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(line for line in proc.stdout.splitlines() if "already done" in line)


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_editing_a_helper_a_variant_imports_measures_it_again_and_nothing_else(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(tiny_doc(axes={"attention": ["vanilla", "s3attention", "scatterbrain"],
                                                   "seq_len": [16], "mode": ["fwd"]},
                                             metrics=["memory"], timing=dict(TINY_TIMING))))
    out = tmp_path / "out"
    assert "3 cells, 0 already done" in _run(tree, suite, out)
    _append(tree / "attentions" / "_s3_cpu.py", "\n# edited\n")  # a helper only S3Attention imports
    assert "3 cells, 2 already done" in _run(tree, suite, out)
    _append(tree / "attentions" / "performer.py", "\n# edited\n")  # imported by Scatterbrain
    assert "3 cells, 2 already done" in _run(tree, suite, out)
    _append(tree / "attentions" / "linformer.py", "\n# edited\n")  # a variant none of these imports
    _append(tree / "harness" / "report" / "plots.py", "\n# edited\n")  # the figures, not the measurement
    assert "3 cells, 3 already done" in _run(tree, suite, out)
    _append(tree / "harness" / "measure" / "memory.py", "\n# edited\n")  # the measuring code: every cell
    assert "3 cells, 0 already done" in _run(tree, suite, out)
