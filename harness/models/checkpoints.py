"""What the kinds that train share besides their models: the checkpoint of a training cell (where it lives, how it is
written atomically and read back without running code, when it goes) and the seeded batch order that lets a killed
run resume from its checkpoint and end where an uninterrupted one would."""

from __future__ import annotations

import hashlib
import math
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..core import faults
from ..core.cell import Cell, Context
from ..core.current import identity
from ..core.errors import EnvironmentFault, first_line
from ..core.files import TEMPORARY, atomic_write


def checkpoint_path(workdir: Path, cell: Cell) -> Path:
    """Where a training cell keeps its checkpoint while it runs: named by its identity (what the tables show of it)
    and its key (what it measures with), so that a checkpoint of the same cell under other code, data or settings is
    found, and never resumed (:func:`clear_checkpoints`)."""
    return workdir / "checkpoints" / f"{_identity_prefix(cell)}-{cell.key}.pt"


def _identity_prefix(cell: Cell) -> str:
    return hashlib.sha256(identity(cell.suite, cell.params, cell.device).encode()).hexdigest()[:12]


def _remove(path: Path) -> None:
    """``path`` and the temporary files of its writes that a kill interrupted (:func:`harness.core.files.atomic_write`
    names them ``.<name>.<random>.tmp``)."""
    path.unlink(missing_ok=True)
    for stale in path.parent.glob(TEMPORARY.format(name=path.name)):
        stale.unlink(missing_ok=True)


def drop_checkpoint(cell: Cell, ctx: Context) -> None:
    """The cell's row is stored: its checkpoint is no longer needed to resume."""
    _remove(checkpoint_path(ctx.workdir, cell))


def clear_checkpoints(cells: list[Cell], ctx: Context) -> None:
    """Before ``cells`` run: remove the checkpoints of the same cells under other keys (their code, data or settings
    changed: they would never be resumed, and would stay forever), and with ``ctx.fresh`` their own as well (a fresh
    run resumes nothing)."""
    for cell in cells:
        own = checkpoint_path(ctx.workdir, cell)
        for path in own.parent.glob(f"{_identity_prefix(cell)}-*.pt"):
            if path != own or ctx.fresh:
                _remove(path)


def epoch_order(n_train: int, seed: int, epoch: int) -> Tensor:
    """The order of the training examples in ``epoch``: one seeded permutation per epoch, so resuming needs no state."""
    return torch.randperm(n_train, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))


def batch_indices(n_train: int, batch_size: int, step: int, seed: int) -> Tensor:
    """Indices of the examples of ``step`` (of :func:`epoch_order`)."""
    epoch, offset = divmod(step, math.ceil(n_train / batch_size))
    return epoch_order(n_train, seed, epoch)[offset * batch_size : (offset + 1) * batch_size]


def save_checkpoint(path: Path, model: nn.Module, opt: torch.optim.Optimizer,
                    sched: torch.optim.lr_scheduler.LRScheduler, state: dict[str, Any]) -> None:
    def write(tmp: Path) -> None:
        # the CUDA generators too (dropout and hashing draw from them on a GPU), so that a resumed run draws what an
        # uninterrupted one would
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                    "rng": torch.get_rng_state(), "cuda_rng": cuda_rng, "state": state, "owner": path.name}, tmp)
        faults.point("training.checkpoint_write", str(path))  # the new checkpoint is written, not yet in place

    # a kill mid-write leaves the previous checkpoint intact; a full disk is an EnvironmentFault (atomic_write), never
    # the cell's error: a cell stored as one would never be trained again
    atomic_write(path, write)


def load_checkpoint(path: Path, model: nn.Module, opt: torch.optim.Optimizer,
                    sched: torch.optim.lr_scheduler.LRScheduler, device: torch.device) -> dict[str, Any]:
    """Restore a run from its checkpoint (shared by the accuracy and forecasting trainers); returns its state, or {}
    (start from the beginning, with a warning) when the file is not a checkpoint this code wrote for this very cell
    (its name, which holds the cell's key, is written inside): a damaged or foreign file is no reason to record the
    cell as failed, and resuming from it would train one model on two cells' steps."""
    try:
        # weights_only: a checkpoint holds tensors, numbers and containers only, so loading one never runs code from
        # a file someone could have put in the output directory
        saved = torch.load(path, map_location=device, weights_only=True)
        if not (isinstance(saved, dict) and {"model", "opt", "sched", "rng", "state"} <= saved.keys()):
            raise ValueError("not a training checkpoint (missing keys)")
        if saved.get("owner") != path.name:  # copied or renamed from another cell's, or written before they said
            raise ValueError(f"written for {saved.get('owner') or 'an unnamed cell'}, not for this cell")
    except OSError as exc:
        fault = EnvironmentFault.of(exc)
        if fault is not None:
            raise fault from exc
        raise
    except Exception as exc:  # noqa: BLE001  (whatever torch.load raises on a damaged or foreign file)
        warnings.warn(f"{path}: unreadable checkpoint ({type(exc).__name__}: {first_line(exc)}); training the cell "
                      f"from its first step", stacklevel=2)
        path.unlink(missing_ok=True)
        return {}
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    sched.load_state_dict(saved["sched"])
    torch.set_rng_state(saved["rng"])
    if saved.get("cuda_rng") and torch.cuda.is_available() and len(saved["cuda_rng"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return saved["state"]
