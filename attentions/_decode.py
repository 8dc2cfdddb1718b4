"""Decoding: the states a causal layer carries from one token to the next, and the rules every decoding variant keeps.

Not a variant (the leading underscore keeps ``import attentions`` from importing it as one). A variant that decodes
(capability ``decode``) has two methods besides ``forward``:

- ``prefill(x [B, P, D], mask [B, P] | None, *, capacity: int) -> (y [B, P, D], state)``: the causal form over a
  prompt of P tokens (P may be 0), returning the state sized for ``capacity`` tokens in all (prompt and steps).
- ``step(x_t [B, 1, D], state) -> (y_t [B, 1, D], state)``: one more token, which attends to itself and to every
  real token before it, as the causal forward does.

So that prefill + steps equal the causal forward over the whole sequence (tested for every decoding variant, at
several prompt lengths, with padding in the prompt), the state holds exactly what the causal form reads of the
past: every key and value (:class:`KVCache`, the softmax family), the last ``window`` of them (:class:`WindowCache`,
sliding-window patterns), or sums over them (:class:`RecurrentState`, the kernel family). Each is allocated once, at
prefill, for the whole ``capacity`` (as static KV caches are), and a step writes into it in place: the state's bytes
are what the layer holds per sequence at that context, and :func:`state_bytes` counts them. Prompt padding is kept as
"not a real token" in the caches and left out of the sums; the tokens a step adds are always real.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


def state_bytes(state: Any) -> int:
    """Bytes of every tensor a decoding state holds (a state, or a tuple or dataclass of states)."""
    if isinstance(state, Tensor):
        return state.numel() * state.element_size()
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return sum(state_bytes(getattr(state, f.name)) for f in dataclasses.fields(state))
    if isinstance(state, tuple | list):
        return sum(state_bytes(s) for s in state)
    return 0


def check_capacity(capacity: int, prompt: int) -> None:
    """A state must hold the prompt and at least one more token."""
    if not (isinstance(capacity, int) and capacity > prompt):
        raise ValueError(f"capacity {capacity!r} must be an integer larger than the prompt's {prompt} tokens")


@dataclass
class KVCache:
    """The keys and values of every token so far, preallocated for ``capacity`` tokens.

    Attributes:
        k: keys [B, H_kv, C, d] (H_kv: the key/value heads; fewer than the query heads under grouped-query attention).
        v: values [B, H_kv, C, d].
        real: [B, C] bool, True where a real token was written (prompt padding stays False, as do unwritten slots).
        length: tokens written so far.
    """

    k: Tensor
    v: Tensor
    real: Tensor
    length: int = 0

    @classmethod
    def empty(cls, like: Tensor, kv_heads: int, capacity: int, head_dim: int) -> KVCache:
        """An empty cache for the batch of ``like`` [B, ...], in its dtype and on its device."""
        b = like.shape[0]
        shape = (b, kv_heads, capacity, head_dim)
        return cls(like.new_zeros(shape), like.new_zeros(shape),
                   torch.zeros(b, capacity, dtype=torch.bool, device=like.device))

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def append(self, k: Tensor, v: Tensor, real: Tensor | None = None) -> None:
        """Write T more tokens' keys and values ([B, H_kv, T, d]; ``real`` [B, T], None = all real) in place."""
        t = k.shape[2]
        if self.length + t > self.capacity:
            raise ValueError(f"the KV cache holds {self.capacity} tokens; {self.length} written, {t} more asked")
        end = self.length + t
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.real[:, self.length:end] = True if real is None else real
        self.length = end

    def keys(self) -> tuple[Tensor, Tensor, Tensor]:
        """(k, v, real) of the tokens written: views [B, H_kv, L, d], [B, H_kv, L, d], [B, L]."""
        n = self.length
        return self.k[:, :, :n], self.v[:, :, :n], self.real[:, :n]


@dataclass
class WindowCache:
    """The keys and values of the last ``window`` tokens, in a ring buffer (slot = position mod window).

    Attributes:
        k: keys [B, H, W, d].
        v: values [B, H, W, d].
        real: [B, W] bool, True where the slot holds a real token.
        length: tokens written so far (the next one goes to slot ``length mod W``).
    """

    k: Tensor
    v: Tensor
    real: Tensor
    length: int = 0

    @classmethod
    def empty(cls, like: Tensor, heads: int, window: int, head_dim: int) -> WindowCache:
        b = like.shape[0]
        shape = (b, heads, window, head_dim)
        return cls(like.new_zeros(shape), like.new_zeros(shape),
                   torch.zeros(b, window, dtype=torch.bool, device=like.device))

    @property
    def window(self) -> int:
        return self.k.shape[2]

    def append(self, k: Tensor, v: Tensor, real: Tensor | None = None) -> None:
        """Write T tokens ([B, H, T, d]); of more than a window, only the last window's are kept."""
        t, w = k.shape[2], self.window
        real = torch.ones(k.shape[0], t, dtype=torch.bool, device=k.device) if real is None else real
        keep = min(t, w)
        positions = torch.arange(self.length + t - keep, self.length + t, device=k.device) % w  # [keep]
        self.k[:, :, positions] = k[:, :, t - keep:]
        self.v[:, :, positions] = v[:, :, t - keep:]
        self.real[:, positions] = real[:, t - keep:]
        self.length += t

    def ordered(self) -> tuple[Tensor, Tensor, Tensor]:
        """(k, v, real) of the slots oldest first: [B, H, W, d], [B, H, W, d], [B, W] (a copy: a gather)."""
        w = self.window
        start = self.length % w if self.length >= w else 0
        order = (torch.arange(w, device=self.k.device) + start) % w  # [W]
        return self.k[:, :, order], self.v[:, :, order], self.real[:, order]


@dataclass
class RecurrentState:
    """Sums over every real token so far, as the kernel family keeps them (Katharopoulos et al. 2020, §3.4).

    Attributes:
        kv: Σ_j φ(k_j)[v_j, 1]ᵀ [B, H, F, w]: the numerator's sums in columns [:d], the normaliser's in column d
            (``attentions.base.with_ones_columns``).
        length: tokens seen so far (the position of the next one, for variants whose features depend on it).
    """

    kv: Tensor
    length: int = 0
