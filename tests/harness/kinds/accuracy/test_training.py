"""The trainer: learns a trivially learnable task, is deterministic under a seed, and a killed run resumed from its
checkpoint ends exactly like an uninterrupted one."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import harness.kinds.accuracy.training
from harness.kinds.accuracy.training import TrainConfig, train_and_evaluate
from harness.models.checkpoints import batch_indices
from harness.models.tasks import Split, TaskData
from tests.conftest import kill_in_step


def _split(n: int, seq_len: int, seed: int) -> Split:
    """Label = whether token 7 occurs anywhere in the sequence: trivially learnable, needs every position."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 7, (n, seq_len), generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    pos = torch.randint(0, seq_len, (n,), generator=g)
    x[y == 1, pos[y == 1]] = 7
    lengths = torch.randint(seq_len // 2, seq_len + 1, (n,), generator=g)  # real padding in every batch
    x[torch.arange(seq_len)[None, :] >= lengths[:, None]] = 0
    y = (x == 7).any(1).long()
    return Split(x0=x, y=y)


def _task(seq_len: int = 32) -> TaskData:
    return TaskData(task="text", vocab_size=8, num_classes=2, seq_len=seq_len, dual=False,
                    train=_split(512, seq_len, 0), dev=_split(128, seq_len, 1), test=_split(128, seq_len, 2),
                    source="test:occurs-7")


CFG = TrainConfig(steps=40, batch_size=16, lr=3e-3, warmup_steps=5, eval_every=10, checkpoint_every=10,
                  dim=32, heads=2, layers=1, mlp_dim=64, dropout=0.1)


@pytest.mark.parametrize("attention", ["vanilla", "s3attention"])
def test_learns_a_trivially_learnable_task(attention: str) -> None:
    result = train_and_evaluate(attention, _task(), replace(CFG, steps=300, eval_every=20), seed=0)
    assert result.best_dev_acc > 0.9, result.curve[-3:]
    assert result.test_acc > 0.85
    assert [p["step"] for p in result.curve] == list(range(20, 301, 20))


def test_same_seed_same_metrics_different_seed_differs() -> None:
    a = train_and_evaluate("s3attention", _task(), CFG, seed=3)
    b = train_and_evaluate("s3attention", _task(), CFG, seed=3)
    c = train_and_evaluate("s3attention", _task(), CFG, seed=4)
    assert a.curve == b.curve and a.test_acc == b.test_acc and a.best_step == b.best_step
    assert a.curve != c.curve


@pytest.mark.parametrize("killed_in", [11, 17, 30])
def test_kill_and_resume_equals_uninterrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killed_in: int) -> None:
    """A run killed in step k (through its fault point, after the optimiser step: a checkpoint exists at the last
    multiple of checkpoint_every before k) and then resumed from it gives the same curve, best step, test accuracy
    and final training loss as a run that was never stopped."""
    reference = train_and_evaluate("s3attention", _task(), CFG, seed=5)
    ckpt = tmp_path / "cell.pt"
    kill_in_step(monkeypatch, killed_in)
    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate("s3attention", _task(), CFG, seed=5, checkpoint_path=ckpt)
    monkeypatch.undo()
    assert ckpt.is_file()
    resumed = train_and_evaluate("s3attention", _task(), CFG, seed=5, checkpoint_path=ckpt)
    assert resumed.resumed_from_step == (killed_in - 1) // CFG.checkpoint_every * CFG.checkpoint_every
    assert resumed.final_train_loss == reference.final_train_loss
    assert resumed.curve == reference.curve
    assert (resumed.test_acc, resumed.best_dev_acc, resumed.best_step) == (
        reference.test_acc, reference.best_dev_acc, reference.best_step)


def test_epoch_permutations_cover_the_data_once() -> None:
    seen = torch.cat([batch_indices(100, 16, step, seed=0) for step in range(7)])  # ceil(100/16) = 7 batches
    assert sorted(seen.tolist()) == list(range(100))
    assert not torch.equal(batch_indices(100, 16, 0, seed=0), batch_indices(100, 16, 7, seed=0))  # new epoch


def test_epochs_convert_to_steps() -> None:
    assert TrainConfig(steps=0, epochs=2, batch_size=32).total_steps(100) == 8
    assert TrainConfig(steps=5, epochs=2).total_steps(100) == 5


def test_dual_retrieval_head_trains() -> None:
    task = _task(16)
    pair = TaskData(task="retrieval", vocab_size=8, num_classes=2, seq_len=16, dual=True,
                    train=Split(task.train.x0, task.train.y, task.train.x0.flip(0)),
                    dev=Split(task.dev.x0, task.dev.y, task.dev.x0),
                    test=Split(task.test.x0, task.test.y, task.test.x0),
                    source="test")
    result = train_and_evaluate("vanilla", pair, replace(CFG, steps=10, eval_every=5), seed=0)
    assert 0.0 <= result.test_acc <= 1.0 and len(result.curve) == 2


def test_non_finite_loss_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    real = harness.kinds.accuracy.training._logits
    monkeypatch.setattr(harness.kinds.accuracy.training, "_logits", lambda *a: real(*a) * float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite"):
        train_and_evaluate("vanilla", _task(), replace(CFG, steps=3), seed=0)


def test_recipes_fill_what_a_suite_leaves_unset() -> None:
    released = TrainConfig(recipe="released", steps=10)  # the constructor applies the recipe (it once only named it)
    assert (released.embed_init_std, released.adam_eps, released.grad_clip, released.pooling) == (
        0.02, 1e-6, 0.0, "mean_all")
    assert TrainConfig(recipe="released", grad_clip=0.5).grad_clip == 0.5  # explicit wins
    harness_cfg = TrainConfig()
    assert (harness_cfg.embed_init_std, harness_cfg.adam_eps, harness_cfg.grad_clip, harness_cfg.pooling) == (
        0.0, 1e-8, 1.0, "mean")
    assert TrainConfig(**dataclasses.asdict(released)) == released  # a stored cell's settings rebuild it
    with pytest.raises(harness.kinds.accuracy.training.TrainConfigError, match="recipe"):
        TrainConfig(recipe="paper")


def test_released_recipe_initialises_embeddings_and_pools_over_padding() -> None:
    torch.manual_seed(0)
    cfg = TrainConfig(recipe="released", dim=32, heads=2, layers=1, mlp_dim=64)
    model = harness.kinds.accuracy.training.build_model("vanilla", _task(seq_len=64), cfg, {})
    std = model.encoder.tok.weight.std().item()
    assert 0.015 < std < 0.025 and 0.015 < model.encoder.pos.weight.std().item() < 0.025
    default = harness.kinds.accuracy.training.build_model("vanilla", _task(seq_len=64), CFG, {})
    assert default.encoder.tok.weight.std().item() > 0.5  # PyTorch's N(0, 1)
    x = torch.randint(1, 8, (2, 64))
    x[1, 40:] = 0
    mask = x != 0
    model.eval()
    masked = replace(cfg, pooling="mean")
    with torch.no_grad():
        all_positions = model.encoder(x, mask)
        model.encoder.pooling = masked.pooling
        real_only = model.encoder(x, mask)
    torch.testing.assert_close(all_positions[0], real_only[0])  # no padding: the two poolings agree
    assert not torch.allclose(all_positions[1], real_only[1])  # padding: mean_all counts it
