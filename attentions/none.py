"""``none``: the no-mixing control. Its output is zero, so a pre-LN block ``x + Attn(LN(x))`` reduces to its MLP
path and every token is classified from its own embedding, position and the pooling alone.

Not an attention from a paper: a control, the "FF-only" model of Lee-Thorp et al. 2021 (FNet,
https://arxiv.org/abs/2105.03824), which asks the same question of its mixers. A task on which a model without token
mixing does as well as one with attention does not measure attention; accuracy tables mark rows that do not beat
it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from ._decode import check_capacity
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class NoneConfig(AttentionConfig):
    """No fields of its own: ``dim``, ``heads``, ``max_seq_len`` and ``dropout`` are accepted and unused, so the
    control drops into every suite beside the attentions."""


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = "the same zero output: a layer that reads no other position is causal as it is"
DECODE_NOTE = "no state: a step reads nothing of the past (the state holds only the token count)"


@dataclass
class NoState:
    """The decoding state of a layer that reads no past: only the number of tokens seen (no tensor, 0 bytes).

    Attributes:
        length: tokens so far (prompt and steps).
        capacity: tokens the decode was sized for (a step past it is an error, as for every state).
    """

    length: int
    capacity: int


@register(
    "none", NoneConfig,
    Capabilities(complexity="n", mixes_tokens=False, causal=True, decode=True, causal_note=CAUSAL_NOTE,
                 decode_note=DECODE_NOTE),
    benchmark=False, paper="https://arxiv.org/abs/2105.03824", display="none (no mixing, control)", group="controls",
)
class NoMixing(nn.Module):
    """No token mixing (the control): the output is zero, the block keeps its residual and MLP paths.

    Causal (``causal=True``): the same layer, since position i reads nothing, before or after it. Decoding: the
    state holds no tensor (:class:`NoState`, 0 bytes): a step's output is zero whatever came before.
    """

    def __init__(self, cfg: NoneConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        # [B, N, D] zeros that stay in the autograd graph (a zero gradient), so the layer alone can run fwd+bwd
        # like every other variant (the speed suite, the registry's tests); a fresh zeros tensor could not
        return x * 0.0

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, NoState]:
        """The causal form over a prompt x [B, P, D] and the (empty) state for ``capacity`` tokens."""
        check_capacity(capacity, x.shape[1])
        return self(x, mask), NoState(x.shape[1], capacity)

    def step(self, x: Tensor, state: NoState) -> tuple[Tensor, NoState]:
        """One token x [B, 1, D]: zero, as every position."""
        if state.length >= state.capacity:
            raise ValueError(f"the state holds {state.capacity} tokens; {state.length} written, 1 more asked")
        state.length += 1
        return self(x), state
