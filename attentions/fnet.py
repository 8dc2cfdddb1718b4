"""FNet: token mixing by a parameter-free 2D discrete Fourier transform, keeping the real part.

Paper: Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms", NAACL 2022,
https://arxiv.org/abs/2105.03824 (§3.2, eq. 3). Authors' code: google-research ``f_net`` (``layers.py``,
``FourierTransform``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .base import per_real_length
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class FNetConfig(AttentionConfig):
    """Config of the FNet mixer; ``heads``, ``max_seq_len`` and ``dropout`` are accepted and unused.

    Attributes:
        normalize: False (default, the paper's eq. 3 and the authors' code): the unnormalised DFTs, so an output
            is a sum of L·D inputs. True scales by 1/√(L·D) (both DFTs unitary, output on the input's scale),
            a deviation offered for pre-LN blocks, where the unnormalised mixer output swamps the residual.
    """

    normalize: bool = False


def fourier_mix(x: Tensor, normalize: bool = False) -> Tensor:
    """Re(F_seq(F_hidden(x))) of x [..., L, D] over its last two axes: [..., L, D], same dtype.

    The two 1D DFTs are one 2D DFT (the DFT is separable). torch.fft has no bfloat16 and (on CUDA) only
    power-of-two float16 transforms, so half-precision inputs are transformed in float32 and cast back.
    """
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = torch.fft.fft2(work, dim=(-2, -1), norm="ortho" if normalize else "backward").real  # [..., L, D]
    return y.to(x.dtype)


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "the Fourier transform along the sequence mixes every position with every other"


@register(
    "fnet",
    FNetConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n"),
    paper="https://arxiv.org/abs/2105.03824", display="FNet", group="Fourier / mixing",
)
class FNetMixing(nn.Module):
    """FNet mixing: y = Re(F_seq(F_hidden(x))), a 2D DFT of each sequence, no parameters; arxiv 2105.03824.

    Not attention: no Q/K/V, no output projection (FNet's Fourier sublayer replaces the whole self-attention
    sublayer, projections included). O(n log n) time per sequence via the FFT.

    Choices and deviations:
    - Padding (the paper has none; the authors' ``FourierTransform`` ignores its ``padding_mask`` and transforms
      the padded sequence as is, so padding content and padding length both change every real output): each
      sequence is transformed over its real length L only. Its real tokens are gathered to the front (in order;
      padding need not be a suffix), the rows with the same L are transformed together (one FFT call per
      distinct L in the batch), and the result is scattered back; padded positions output 0. A padded sequence
      therefore gives at its real positions exactly what the unpadded sequence gives, and its padding neither
      leaks nor receives gradient. Grouping by length reads the lengths on the host (one device sync per masked
      call; an unmasked call is one FFT). Zeroing the padding and transforming over the padded length N instead
      would still make every real output depend on N (the DFT frequencies are k/N), so that cheaper option was
      rejected.
    - The unnormalised DFT of the paper is the default; ``normalize=True`` scales by 1/√(L·D).
    - The FFT computes the DFT exactly (the paper's TPU variant multiplies by DFT matrices for short
      sequences: the same function).
    - Dropout: the authors' Fourier layer has none, so ``dropout`` is unused (the enclosing block's residual
      dropout still applies).
    - Half-precision inputs are transformed in float32 (see ``fourier_mix``).
    """

    def __init__(self, cfg: FNetConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return per_real_length(x, mask, lambda t: fourier_mix(t, self.cfg.normalize))  # [B, N, D]
