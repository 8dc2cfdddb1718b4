"""S3Attention: smoothed skeleton sketching attention.

Paper: Wang et al., "S3Attention: Improving Long Sequence Attention with Smoothed Skeleton Sketching"
(journal version; earlier: "SKTFormer", ICLR 2023 submission), https://arxiv.org/abs/2408.08567
— §III, supplement Algorithms 1 (Skeleton Attention) and 2 (Smoother).
Released code: https://github.com/wxie9/S3Attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import masked_fill_value, pad_to_length, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset


@dataclass(frozen=True)
class S3Config(AttentionConfig):
    """Config of S3Attention; defaults are the paper's baseline (r, s1, s2 = 8; Algorithms 1–2).

    Attributes:
        r: number of segments of the hidden dimension averaged before the Fourier convolution (eq. 3–4;
            ``fold`` in the code). Must divide ``dim``. r = dim means no averaging.
        s1: tokens sampled for row attention (``left_rank``); all tokens if s1 >= max_seq_len.
        s2: feature dimensions per head sampled for column attention (``right_rank``); all if s2 >= head_dim.
        smoother_dropout: dropout after the convolution stem (Algorithm 2 default 0.5; Table S1 per task).
        segment_average: average r segments (paper). False = the released LRA code (r = dim).
        conv_kernel: convolution stem kernel size (paper 3, released code 1).
        activation: stem activation, "relu" (paper) or "elu" (released code).
        norm: stem BatchNorm over "positions" (Algorithm 2: BatchNorm1d(seq_len), each position normalised
            over batch and features, which ties the layer to max_seq_len) or over "channels" (BatchNorm1d(dim)).
        fourier_conv: Table 7 switch; False drops the Fourier convolution (the stem then reads X alone).
        conv_stem: Table 7 switch; False drops conv + BatchNorm + activation + dropout (Q, K, V are then
            projected from the Fourier-smoothed X, or from X when fourier_conv is also off).
        row_attention: Table 7 switch for the row (sampled-token) attention term.
        col_attention: Table 7 switch for the column (sampled-feature) attention term.
    """

    r: int = 8
    s1: int = 8
    s2: int = 8
    smoother_dropout: float = 0.5
    segment_average: bool = True
    conv_kernel: int = 3
    activation: Literal["relu", "elu"] = "relu"
    norm: Literal["positions", "channels"] = "positions"
    fourier_conv: bool = True
    conv_stem: bool = True
    row_attention: bool = True
    col_attention: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("r", "s1", "s2", "conv_kernel")
        if self.segment_average and self.dim % self.r:
            raise ValueError(f"r={self.r} must divide dim={self.dim} (segments of the hidden dimension)")
        if self.conv_kernel % 2 == 0:
            raise ValueError(f"conv_kernel must be odd so the stem keeps the length, got {self.conv_kernel}")
        if self.activation not in ("relu", "elu"):
            raise ValueError(f"activation must be relu or elu, got {self.activation!r}")
        if self.norm not in ("positions", "channels"):
            raise ValueError(f"norm must be positions or channels, got {self.norm!r}")
        if not (self.row_attention or self.col_attention):
            raise ValueError("at least one of row_attention and col_attention must be on")
        if not 0.0 <= self.smoother_dropout < 1.0:
            raise ValueError(f"smoother_dropout must be in [0, 1), got {self.smoother_dropout!r}")

    @property
    def segments(self) -> int:
        """Number of distinct columns that are Fourier transformed (r, or dim without averaging)."""
        return self.r if self.segment_average else self.dim


class Smoother(nn.Module):
    """Algorithm 2: segment average -> rFFT -> learnable complex weights -> irFFT -> convolution stem.

    Equation (3): X_smooth = F⁻¹[F(X S) · L] with L ∈ C^{(⌊n/2⌋+1)×d} and S averaging r segments of d/r
    columns each. The code tiles the r averaged columns (``repeat``) where the paper's S repeats each
    segment mean over its own segment; the two differ only by a fixed permutation of the learnable columns
    of L and of the stem's input channels, so we follow the paper's S. Only r rFFTs and d irFFTs are taken
    (the paper's r + d), never the d×d product X S.
    """

    def __init__(self, cfg: S3Config) -> None:
        super().__init__()
        self.cfg = cfg
        n, d = cfg.max_seq_len, cfg.dim
        if cfg.fourier_conv:
            # Same shape and init as Algorithm 2: (⌊n/2⌋+1, d, 2) real/imag, kaiming normal (fan_in = 2d).
            self.weights_fft = nn.Parameter(torch.empty(n // 2 + 1, d, 2))
            nn.init.kaiming_normal_(self.weights_fft, mode="fan_in", nonlinearity="relu")
        if cfg.conv_stem:
            in_ch = 2 * d if cfg.fourier_conv else d
            self.conv = nn.Conv1d(in_ch, d, kernel_size=cfg.conv_kernel, padding=cfg.conv_kernel // 2)
            self.bn = nn.BatchNorm1d(n if cfg.norm == "positions" else d)
            self.act = nn.ReLU() if cfg.activation == "relu" else nn.ELU()
            self.drop = nn.Dropout(cfg.smoother_dropout)

    def fourier(self, x: Tensor) -> Tensor:
        """Fourier convolution of eq. (3) along the sequence: [B, N, D] -> [B, N, D] (N = max_seq_len)."""
        b, n, d = x.shape
        r = self.cfg.segments
        # FFTs run in float32 at least: there are no half/bfloat16 FFT kernels on CPU (and cuFFT's need
        # power-of-two lengths), so low-precision inputs are upcast here and the result cast back.
        ft = torch.promote_types(x.dtype, torch.float32)
        u = x.view(b, n, r, d // r).mean(-1, dtype=ft)  # [B, N, r]  X S, without repeating columns
        u_hat = torch.fft.rfft(u, n=n, dim=1)  # [B, n//2+1, r]
        w = torch.view_as_complex(self.weights_fft.to(ft)).view(n // 2 + 1, r, d // r)  # [F, r, d/r]
        m_hat = (u_hat.unsqueeze(-1) * w).reshape(b, n // 2 + 1, d)  # [B, F, D]: segment j feeds its columns
        return torch.fft.irfft(m_hat, n=n, dim=1).to(x.dtype)  # [B, N, D]

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        cfg = self.cfg
        m = self.fourier(x) if cfg.fourier_conv else None
        if not cfg.conv_stem:
            return x if m is None else m
        stem_in = x if m is None else torch.cat((m, x), dim=-1)  # [B, N, 2D]
        # The circular convolution spreads values into padded rows; zero them so the stem's window at the
        # last real tokens reads zeros, exactly as for an unpadded sequence.
        stem_in = zero_padding(stem_in, mask)
        h = self.stem_conv(stem_in)  # [B, N, D], contiguous
        if cfg.norm == "positions":
            h = self.bn(h)  # positions are BatchNorm's channels: [B, N, D] is its [batch, C, L] as it lies
        else:
            h = self.bn(h.transpose(1, 2)).transpose(1, 2)  # [B, D, N] -> [B, N, D]
        return self.drop(self.act(h))

    def stem_conv(self, s: Tensor) -> Tensor:
        """``self.conv`` (Conv1d over the sequence, "same" zero padding) on s [B, N, C] -> [B, N, D], as one GEMM in
        the tokens-major layout the layer works in.

        Why not ``self.conv(s.transpose(1, 2))``: that runs channels-first, so its input, its output and their
        gradients are transposed copies, and the BatchNorm over positions that follows reads a strided tensor
        (profiled at n = 4096 on this CPU: the convolution and BatchNorm with their copies took 45% of S3's fwd+bwd).
        Here tap j of every position is one column block of a single GEMM against the stacked taps, and the output
        at t sums tap j of position t + j: conv1d's cross-correlation exactly.
        """
        w, b, k = self.conv.weight, self.conv.bias, self.conv.kernel_size[0]  # w: [D, C, k]
        if k == 1:
            return F.linear(s, w[:, :, 0], b)
        n, d = s.shape[1], w.shape[0]
        padded = F.pad(s, (0, 0, k // 2, k // 2))  # [B, N + k - 1, C]
        taps = F.linear(padded, w.permute(2, 0, 1).reshape(k * d, -1))  # [B, N + k - 1, k*D]: tap j in block j
        out = taps[:, 0:n, 0:d] + b
        for j in range(1, k):
            out = out + taps[:, j:j + n, j * d:(j + 1) * d]
        return out


@register(
    "s3attention",
    S3Config,
    Capabilities(complexity="n log n", needs_fixed_length=True),
    paper="https://arxiv.org/abs/2408.08567",
)
class S3Attention(nn.Module):
    """S3Attention (smoother + skeleton attention), journal Algorithms 1–2; paper: arxiv.org/abs/2408.08567.

    forward: X -> Smoother -> Q, K, V -> (LN(row attention) + LN(column attention)) / 2 -> output projection.
    - Row attention: softmax(Q K₁ᵀ / √d_h) V₁ over s1 tokens sampled once at construction.
    - Column attention: V₂ · softmax(Qᵀ K₂ / √n)ᵀ over s2 feature columns per head (the same columns in every
      head, as Algorithm 1), n = max_seq_len as in the code (``self.seq_len``).
    - Each term is LayerNorm-ed over the merged heads; the enabled terms are averaged (the paper's "/2"
      when both are on).

    Choices and deviations (the paper is silent or the code is tied to unmasked, fixed-length input):
    - Sample indices come from torch's global RNG at construction (``torch.randperm`` as in Algorithm 1), so
      the model seed fixes them; they are buffers and are saved with the weights.
    - Inputs shorter than max_seq_len are right-padded inside the layer (Algorithm 2 requires seq_len
      positions) and the output is cut back.
    - Padding: X is zeroed at padded positions before smoothing; sampled tokens that are padding are masked
      out of the row softmax (if every sampled token is padding the row term averages their V, which depends
      on real tokens only); padded rows of K₂ are zeroed so column attention sums over real tokens only.
    - Only the parts of K and V that the skeleton reads are projected (K, V at the s1 sampled tokens; their
      s2 sampled columns per head at all tokens), in one GEMM with Q. Same function as projecting full Q, K,
      V and slicing, with O(n·d·(d + 2·h·s2)) instead of O(3·n·d²) work.
    """

    def __init__(self, cfg: S3Config) -> None:
        super().__init__()
        self.cfg = cfg
        n, d, dh = cfg.max_seq_len, cfg.dim, cfg.head_dim
        self.smoother = Smoother(cfg)
        self.qkv = nn.Linear(d, 3 * d)  # full W_q, W_k, W_v as in the paper; forward reads the rows it needs
        self.out = nn.Linear(d, d)
        self.register_buffer("index_set_left", torch.randperm(n)[: cfg.s1] if cfg.s1 < n else torch.arange(n))
        right = torch.randperm(dh)[: cfg.s2] if cfg.s2 < dh else torch.arange(dh)
        self.register_buffer("index_set_right", right)
        self.ln_row = nn.LayerNorm(d) if cfg.row_attention else None
        self.ln_col = nn.LayerNorm(d) if cfg.col_attention else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n_in, d = x.shape
        x, mask = pad_to_length(x, mask, cfg.max_seq_len)
        x = zero_padding(x, mask)
        hs = self.smoother(x, mask)  # [B, N, D]
        w, bias = self.qkv.weight, self.qkv.bias
        q = split_heads(F.linear(hs, w[:d], bias[:d]), cfg.heads)  # [B, H, N, dh]
        p = cfg.dropout if self.training else 0.0
        terms = []
        if cfg.row_attention:
            terms.append(self.ln_row(self._row(hs, q, mask, p)))
        if cfg.col_attention:
            terms.append(self.ln_col(self._col(hs, q, mask, p)))
        y = terms[0] if len(terms) == 1 else (terms[0] + terms[1]) / 2
        return self.out(y[:, :n_in])

    def _row(self, hs: Tensor, q: Tensor, mask: Tensor | None, p: float) -> Tensor:
        """softmax(Q K₁ᵀ/√d_h) V₁ over the sampled tokens, heads merged: [B, N, D]."""
        cfg, d = self.cfg, self.cfg.dim
        idx = self.index_set_left
        kv = F.linear(hs[:, idx], self.qkv.weight[d:], self.qkv.bias[d:])  # [B, s1, 2D]
        k1, v1 = (split_heads(t, cfg.heads) for t in kv.chunk(2, dim=-1))  # [B, H, s1, dh]
        scores = (q * cfg.head_dim**-0.5) @ k1.transpose(-1, -2)  # [B, H, N, s1]
        if mask is not None:
            scores = scores.masked_fill(~mask[:, idx][:, None, None, :], masked_fill_value(scores.dtype))
        attn = F.dropout(scores.softmax(-1), p=p, training=self.training)
        return (attn @ v1).transpose(1, 2).flatten(2)  # [B, H, N, dh] -> [B, N, D]

    def _col(self, hs: Tensor, q: Tensor, mask: Tensor | None, p: float) -> Tensor:
        """V₂ · softmax(Qᵀ K₂/√n)ᵀ over the sampled feature columns, heads merged: [B, N, D]."""
        cfg = self.cfg
        b, n, _ = hs.shape
        d, dh, s2 = cfg.dim, cfg.head_dim, self.index_set_right.numel()
        # Rows of qkv.weight read here: sampled column j of head i is feature i*dh + j of K (offset d) and V (2d).
        cols = (torch.arange(cfg.heads, device=hs.device)[:, None] * dh + self.index_set_right).reshape(-1)
        rows = torch.cat((cols + d, cols + 2 * d))  # [2*H*s2]
        kv = F.linear(hs, self.qkv.weight[rows], self.qkv.bias[rows])  # [B, N, 2*H*s2]
        k2, v2 = (t.view(b, n, cfg.heads, s2).transpose(1, 2) for t in kv.chunk(2, dim=-1))  # [B, H, N, s2]
        k2 = zero_padding(k2.transpose(1, 2), mask).transpose(1, 2)  # padded tokens add nothing to Qᵀ K₂
        scores = (q.transpose(-1, -2) @ k2) * cfg.max_seq_len**-0.5  # [B, H, dh, s2]
        attn = F.dropout(scores.softmax(-1), p=p, training=self.training).transpose(-1, -2)  # [B, H, s2, dh]
        return (v2 @ attn).transpose(1, 2).flatten(2)  # [B, H, N, dh] -> [B, N, D]


register_preset(
    "s3attention_released",
    "s3attention",
    segment_average=False,
    conv_kernel=1,
    activation="elu",
    description="S3Attention with the released LRA code's smoother (no segment average, kernel 1, ELU).",
    benchmark=True,
)
