"""MQAR training (harness.kinds.recall.training): the recipe's properties, determinism, resume, and that softmax
attention learns the task where the control cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import harness.core.faults
from harness.kinds.recall.mqar import generate_mqar
from harness.kinds.recall.training import RecallTrain, recall_of, train_recall
from harness.models.lm import CausalLM

SEQ, PAIRS, VOCAB = 16, 2, 64


def _data(n: int, seed: int):  # noqa: ANN202
    return generate_mqar(n, seq_len=SEQ, num_kv_pairs=PAIRS, seed=seed, vocab_size=VOCAB)


def _model(attention: str, seed: int = 0) -> CausalLM:
    torch.manual_seed(seed)
    return CausalLM(attention, vocab_size=VOCAB, max_seq_len=SEQ, dim=32)


def test_the_same_seed_trains_the_same_model() -> None:
    train, test = _data(64, 0), _data(32, 1)
    cfg = RecallTrain(epochs=2, batch_size=16)
    a, b = (train_recall(_model("vanilla"), train, test, cfg, lr=3e-3, seed=0) for _ in range(2))
    assert a.curve == b.curve and a.recall == b.recall and a.steps == b.steps == 8


def test_a_resumed_run_ends_as_an_uninterrupted_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed after its first epoch's checkpoint, resumed, ends with the uninterrupted run's curve."""
    train, test = _data(64, 0), _data(32, 1)
    cfg = RecallTrain(epochs=3, batch_size=16)
    whole = train_recall(_model("performer"), train, test, cfg, lr=3e-3, seed=0)
    ckpt = tmp_path / "cell.pt"

    class Killed(Exception):
        pass

    def die_at_step_6(name: str, detail: str = "") -> None:  # in the second epoch (4 steps an epoch)
        if name == "training.step" and detail == "step 6":
            raise Killed

    monkeypatch.setattr(harness.core.faults, "point", die_at_step_6)
    with pytest.raises(Killed):
        train_recall(_model("performer"), train, test, cfg, lr=3e-3, seed=0, checkpoint_path=ckpt)
    monkeypatch.undo()
    resumed = train_recall(_model("performer"), train, test, cfg, lr=3e-3, seed=0, checkpoint_path=ckpt)
    assert resumed.curve == whole.curve and resumed.recall == whole.recall


def test_training_stops_once_the_test_accuracy_reaches_stop_at() -> None:
    train, test = _data(64, 0), _data(32, 1)
    result = train_recall(_model("vanilla"), train, test, RecallTrain(epochs=5, batch_size=16, stop_at=0.0), lr=1e-3,
                          seed=0)
    assert result.stopped_early and result.epochs == 1 and len(result.curve) == 1


def test_softmax_attention_carries_the_value_and_the_control_cannot() -> None:
    """With one pair the value is the only value token in the context: a mixer that moves information between
    positions reaches it within a few hundred steps (softmax: 100%), while the model without mixing sees only the
    query key and its position and stays near chance (1/32 values). Recall of several pairs (matching the key) takes
    far longer: it is what the suite measures, not a unit test."""
    train = generate_mqar(2048, seq_len=SEQ, num_kv_pairs=1, seed=0, vocab_size=VOCAB)
    test = generate_mqar(256, seq_len=SEQ, num_kv_pairs=1, seed=1, vocab_size=VOCAB)
    cfg = RecallTrain(epochs=6, batch_size=64, stop_at=1.1)
    attention = train_recall(_model("vanilla"), train, test, cfg, lr=3e-3, seed=0)
    control = train_recall(_model("none"), train, test, cfg, lr=3e-3, seed=0)
    assert attention.recall >= 0.95, attention.curve
    assert control.recall <= 0.1, control.curve


def test_recall_counts_the_query_positions_only() -> None:
    """A model that answers every query by the task's rule (the token after the key's first occurrence) scores 1,
    batch by batch, whatever it says elsewhere; one that answers the key itself scores 0."""
    test = _data(8, 1)

    class Rule(torch.nn.Module):
        def __init__(self, shift: int) -> None:
            super().__init__()
            self.shift = shift

        def forward(self, tokens: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
            answers = []
            for row, col in select.nonzero().tolist():
                first = int((tokens[row] == tokens[row, col]).nonzero()[0])
                answers.append(int(tokens[row, first + self.shift]))
            return torch.nn.functional.one_hot(torch.tensor(answers), VOCAB).float()

    assert recall_of(Rule(1), test, 3, torch.device("cpu")) == 1.0  # type: ignore[arg-type]
    assert recall_of(Rule(0), test, 3, torch.device("cpu")) == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [{"epochs": 0}, {"batch_size": -1}, {"weight_decay": -0.1}, {"epochs": True}])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        RecallTrain(**bad)


def test_a_reduced_budget_runs_the_first_epochs_of_the_full_schedule() -> None:
    """run_epochs 2 of epochs 4 ends where the second epoch of the 4-epoch run ends (the same learning rates), not where
    a 2-epoch schedule does (its second epoch at a lower rate)."""
    train, test = _data(64, 0), _data(32, 1)

    def run(**cfg: int) -> list[dict]:
        return train_recall(_model("vanilla"), train, test, RecallTrain(batch_size=16, stop_at=1.1, **cfg), lr=3e-3,
                            seed=0).curve

    full, first, short = run(epochs=4), run(epochs=4, run_epochs=2), run(epochs=2)
    assert first == full[:2] and short[:1] == full[:1] and short[1] != full[1]
    with pytest.raises(ValueError, match="run_epochs"):
        RecallTrain(epochs=2, run_epochs=3)
