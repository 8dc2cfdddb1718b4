"""The documentation says what the code does: the zoo's `exact` variants, the compile table's marks, no words of an
issue list, the command a newcomer can type, where torch comes from, and every file a run writes."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from harness.kinds.speed.compiled import UNCHECKED
from harness.report.format import NOISY_MARK
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"


def test_the_zoo_names_every_exact_variant_that_list_shows() -> None:
    """`attnbench list` says `exact yes` for vanilla_sdpa; docs/zoo.md said only `vanilla` is."""
    catalog = json.loads((REPO_ROOT / "attentions" / "catalog.json").read_text())
    exact = sorted(e["name"] for e in catalog["attentions"] if e["exact"])
    zoo = (DOCS / "zoo.md").read_text()
    assert "only `vanilla`" not in zoo
    row = next(line for line in zoo.splitlines() if line.startswith("| `exact` |"))
    assert all(f"`{name}`" in row for name in exact), (exact, row)


def test_measuring_marks_a_random_forward_as_the_compile_table_does() -> None:
    """docs/measuring.md marked random forwards `†` in one place (a busy machine's mark) and `ʳ` in another."""
    text = " ".join((DOCS / "measuring.md").read_text().split())
    assert f"marks the time `{UNCHECKED['md']}`" in text and f"marks the time `{NOISY_MARK['md']}`" not in text


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md", "docs/zoo.md", "docs/measuring.md", "docs/gpu.md",
                                  "results/README.md"])
def test_the_pages_speak_to_a_reader_not_to_an_issue_list(page: str) -> None:
    assert not re.search(r"\bthe issue'?s?\b", (REPO_ROOT / page).read_text(), re.IGNORECASE)


def test_the_commands_say_where_attnbench_is_after_make() -> None:
    """After `make bench-speed`, `attnbench` is not on PATH: the README's Commands block used the bare name."""
    readme = (REPO_ROOT / "README.md").read_text()
    commands = readme[readme.index("## Commands"):readme.index("```bash", readme.index("## Commands"))]
    assert ".venv/bin/attnbench" in commands and "source .venv/bin/activate" in commands
    assert "`.venv/bin/attnbench show results/speed/quick`" in readme


def test_the_readme_says_where_torch_comes_from() -> None:
    """`torch==2.13.0 (CPU wheel)` held only where a local wheelhouse serves the CPU build."""
    row = next(line for line in (REPO_ROOT / "README.md").read_text().splitlines() if line.startswith("| `TORCH_SPEC`"))
    assert "(CPU wheel)" not in row
    assert "download.pytorch.org/whl/cpu" in row and "local wheel" in row and "CUDA build" in row


def _documented() -> list[str]:
    """The file names results/README.md gives, ``<...>`` read as any text."""
    names = re.findall(r"`([^`\s]+)`", (REPO_ROOT / "results" / "README.md").read_text())
    patterns = [re.sub(r"<[^>]+>", "*", n) for n in names]
    return [p for p in patterns if re.search(r"\w", p.rpartition(".")[0])]  # a name before its extension


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "suites").glob("*.yaml")), ids=lambda p: p.stem)
def test_results_readme_lists_every_file_a_run_writes(path: Path) -> None:
    """results/README.md listed the speed suite's files and a line on accuracy: every kind's declared outputs."""
    suite = load_suite(path, "smoke")
    documented = _documented()
    for pattern in suite.kind.outputs(suite):
        examples = [pattern.replace("*", filler) for filler in ("x", "x_x", "x_n1")]  # a name the glob stands for
        assert any(fnmatch.fnmatchcase(e, d) for e in examples for d in documented), f"{suite.name}: {pattern}"
