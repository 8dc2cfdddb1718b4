"""The approximation suite kind: budgets expand per attention, non-approximations are listed not measured, and the
trained input reads an accuracy run's probe end to end (a changed probe re-measures; a missing one is reported)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from harness.core.store import Store
from harness.kinds.approximation.kind import attention_budgets, budget_label
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult

SUITE = REPO_ROOT / "suites" / "approximation.yaml"


def test_budget_labels_and_products() -> None:
    budgets = {"performer": {"nb_features": [16, 64]}, "reformer": {"n_hashes": [1, 4], "bucket_size": [32, 64]}}
    assert list(attention_budgets(budgets, "performer")) == ["nb_features=16", "nb_features=64"]
    assert len(attention_budgets(budgets, "reformer")) == 4
    assert attention_budgets(budgets, "reformer")["n_hashes=4 bucket_size=32"] == {"n_hashes": 4, "bucket_size": 32}
    assert attention_budgets(budgets, "vanilla_sdpa") == {"default": {}}
    assert budget_label({}) == "default"


def test_each_attention_gets_its_own_budgets_only() -> None:
    suite = load_suite(SUITE, "smoke")
    cells = suite.expand("cpu")
    by_attention: dict[str, set[str]] = {}
    for cell in cells:
        by_attention.setdefault(cell.params["attention"], set()).add(cell.params["budget"])
    assert by_attention["performer"] == {"nb_features=16", "nb_features=64"}
    assert by_attention["vanilla_sdpa"] == {"default"}
    assert len(by_attention["reformer"]) == 6  # the base file's 3 x 2 grid
    performer = next(c for c in cells if c.params["budget"] == "nb_features=64")
    assert performer.config["nb_features"] == 64
    s3 = [c for c in cells if c.params["attention"] == "s3attention"]
    assert s3 and all(c.skip_reason and c.skip_reason.startswith("not an approximation") for c in s3)


def test_a_missing_probe_is_reported_with_the_command_that_makes_it() -> None:
    suite = load_suite(SUITE, "smoke")  # data.dir null: no probes
    trained = [c for c in suite.expand("cpu") if c.params["input"] == "text" and c.params["attention"] != "s3attention"]
    assert trained and all("no probe of vanilla trained on text" in (c.skip_reason or "") for c in trained)
    assert all("make accuracy" in (c.skip_reason or "") for c in trained)


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_trained_input_end_to_end(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    out = tmp_path / "results"
    acc = cli("run", REPO_ROOT / "suites" / "accuracy.yaml", "--profile", "smoke", "--only", "vanilla",
              "--set", "task=text", "--set", "seed=0", "--out", out, "--device", "cpu")
    assert acc.code == 0, acc.err
    probes = list((out / "accuracy" / "smoke" / "probes").glob("*.pt"))
    assert len(probes) == 1
    data_dir = out / "accuracy" / "smoke"
    args = ("run", SUITE, "--profile", "smoke", "--out", out, "--device", "cpu", "--data-dir", data_dir,
            "--set", "input=text", "--set", "seq_len=64", "--only", "vanilla_sdpa,performer")
    first = cli(*args)
    assert first.code == 0, first.err
    csv = pd.read_csv(out / "approximation" / "smoke" / "results.csv")
    assert set(csv["status"]) == {"ok"} and set(csv["weights"]) == {"trained"}
    assert csv.loc[csv["attention"] == "vanilla_sdpa", "rel_fro"].max() < 1e-6  # exact, through trained weights
    assert (csv.loc[csv["attention"] == "performer", "rel_fro"] > 1e-3).all()
    # each budget's speed-up is its own (paired by the cell's own samples, not by attention name)
    table = pd.read_csv(out / "approximation" / "smoke" / "approximation.csv").set_index("budget")
    with Store(out / "approximation" / "smoke" / "results.db") as store:
        rows = store.dataframe().set_index("budget")
        samples = store.samples()
    for budget in ("nb_features=16", "nb_features=64"):
        own = next(v for (k, _), v in samples.items() if k == rows.loc[budget, "key"])
        ref = next(v for (k, _), v in samples.items() if k == rows.loc["default", "key"])
        assert table.loc[budget, "speedup"] == pytest.approx(float(np.median(np.array(ref) / np.array(own))), rel=1e-9)
    assert "text" in (out / "approximation" / "smoke" / "approximation.md").read_text()

    assert "3 cells, 3 already done" in cli(*args).out
    # A re-run of one variant alone: the baseline (vanilla_sdpa, report.baseline) is timed again beside it, so its
    # speed-up stays paired and finite.
    alone = cli(*args, "--fresh", "--only", "performer")
    assert alone.code == 0, alone.err
    table = pd.read_csv(out / "approximation" / "smoke" / "approximation.csv")
    performer = table[table["attention"] == "performer"]
    assert performer["speedup"].notna().all() and (performer["speedup_lo"] <= performer["speedup_hi"]).all()
    saved = torch.load(probes[0], weights_only=True)
    saved["inputs"] = saved["inputs"] * 2  # the accuracy run was redone: another probe
    torch.save(saved, probes[0])
    again = cli(*args)
    assert again.code == 0 and "3 cells, 0 already done" in again.out
