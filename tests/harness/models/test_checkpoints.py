"""Checkpoints of training cells: named by the cell's identity and key, refused when written for another cell, cleared
when the same cell's key changed (or with --fresh), and the batch order that makes a resumed run exact."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.core.cell import Cell, Context
from harness.models.checkpoints import (
    batch_indices,
    checkpoint_path,
    clear_checkpoints,
    drop_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _cell(**changes: object) -> Cell:
    cell = Cell(suite="acc", kind="accuracy", params={"attention": "vanilla", "task": "listops", "seed": 0}, config={},
                fixed={"train": {"steps": 4}}, metrics=("accuracy",), timing={}, device="cpu", code="c0")
    return dataclasses.replace(cell, **changes)


def _training() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)


def test_a_checkpoint_is_named_by_its_cells_identity_and_key(tmp_path: Path) -> None:
    cell, edited = _cell(), _cell(code="c1")  # the same cell, measured with other code
    other = _cell(params={"attention": "vanilla", "task": "listops", "seed": 1})
    a, b, c = (checkpoint_path(tmp_path, x) for x in (cell, edited, other))
    assert a.parent == tmp_path / "checkpoints" and a.name.endswith(f"-{cell.key}.pt")
    assert a.name.split("-")[0] == b.name.split("-")[0] != c.name.split("-")[0]  # identity: the first part


def test_a_checkpoint_written_for_another_cell_is_refused_and_training_starts_over(tmp_path: Path) -> None:
    model, opt, sched = _training()
    path = checkpoint_path(tmp_path, _cell())
    path.parent.mkdir(parents=True)
    save_checkpoint(path, model, opt, sched, {"step": 3})
    assert load_checkpoint(path, *_training(), torch.device("cpu")) == {"step": 3}
    moved = checkpoint_path(tmp_path, _cell(code="c1"))
    path.rename(moved)  # as a copy or a rename would put it under another cell's name
    with pytest.warns(UserWarning, match="written for .*, not for this cell"):
        assert load_checkpoint(moved, *_training(), torch.device("cpu")) == {}
    assert not moved.exists()


def test_clearing_removes_the_same_cells_other_keys_and_with_fresh_its_own(tmp_path: Path) -> None:
    cell, old, other = _cell(), _cell(code="c0-old"), _cell(params={"attention": "local", "task": "listops",
                                                                        "seed": 0})
    paths = [checkpoint_path(tmp_path, c) for c in (cell, old, other)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        (path.parent / f".{path.name}.abc.tmp").write_bytes(b"half written")
    clear_checkpoints([cell], Context(tmp_path))
    assert [p.exists() for p in paths] == [True, False, True]  # the stale key goes, its temporary file too
    assert not (paths[1].parent / f".{paths[1].name}.abc.tmp").exists()
    clear_checkpoints([cell], Context(tmp_path, fresh=True))
    assert [p.exists() for p in paths] == [False, False, True]
    drop_checkpoint(other, Context(tmp_path))
    assert not list((tmp_path / "checkpoints").glob("*.pt"))


def test_the_batch_order_is_one_seeded_permutation_per_epoch() -> None:
    epoch = torch.cat([batch_indices(10, 4, step, seed=1) for step in range(3)])
    assert sorted(epoch.tolist()) == list(range(10))  # every example once per epoch (the last batch shorter)
    assert torch.equal(batch_indices(10, 4, 4, seed=1), batch_indices(10, 4, 4, seed=1))
    assert not torch.equal(batch_indices(10, 4, 3, seed=1), batch_indices(10, 4, 0, seed=1))
