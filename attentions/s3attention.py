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

from ._s3_cpu import StemConv, conv_tokens_major, opaque_relu, transpose12
from .base import fill_masked, key_bias_value, no_autocast, pad_to_length, zero_padding
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

    Two layouts of the same function: on the CPU (``cpu_kernels``) the FFTs run over the last axis of [B, r, N] /
    [B, D, N] with the CPU kernels of ``attentions._s3_cpu``; elsewhere (CUDA) along the sequence axis of [B, N, ·]
    with the framework's ops, which a GPU runs without the transposes and which capture into a CUDA graph.
    """

    def __init__(self, cfg: S3Config) -> None:
        super().__init__()
        self.cfg = cfg
        n, d, r = cfg.max_seq_len, cfg.dim, cfg.segments
        if cfg.fourier_conv:
            # Same shape and init as Algorithm 2: (⌊n/2⌋+1, d, 2) real/imag, kaiming normal (fan_in = 2d).
            self.weights_fft = nn.Parameter(torch.empty(n // 2 + 1, d, 2))
            nn.init.kaiming_normal_(self.weights_fft, mode="fan_in", nonlinearity="relu")
            if r < d:  # S: the segment-mean matrix [D, r], a constant (not saved with the weights)
                segment = torch.arange(d) // (d // r)
                self.register_buffer("segment_mean", (segment[:, None] == torch.arange(r)).float() / (d // r),
                                     persistent=False)
        if cfg.conv_stem:
            in_ch = 2 * d if cfg.fourier_conv else d
            self.conv = nn.Conv1d(in_ch, d, kernel_size=cfg.conv_kernel, padding=cfg.conv_kernel // 2)
            self.bn = nn.BatchNorm1d(n if cfg.norm == "positions" else d)
            self.act = nn.ReLU() if cfg.activation == "relu" else nn.ELU()
            self.drop = nn.Dropout(cfg.smoother_dropout)

    def fourier(self, x: Tensor, cpu_kernels: bool | None = None) -> Tensor:
        """Fourier convolution of eq. (3) along the sequence: [B, N, D] -> [B, N, D] (N = max_seq_len); the CPU
        layout where ``cpu_kernels`` (None: on the CPU).

        The whole convolution, segment-mean GEMM included, runs in float32 at least with autocast off, and the result
        is cast back to x's dtype: there are no half/bfloat16 FFT kernels on CPU (and cuFFT's need power-of-two
        lengths), so low-precision inputs are upcast; and under autocast the GEMM would return bfloat16 again however
        its input was upcast (CUDA's rfft then raised "Unsupported dtype BFloat16"; on the CPU autocast upcasts FFT
        inputs itself, but from the GEMM's rounded output).

        CPU layout: every FFT runs over the last axis of a contiguous tensor ([B, r, N] in, [B, D, N] out), the layout
        torch's CPU FFTs transform in (along axis 1 they copy into it and hand back a transposed result), and the one
        transpose left is ATen's blocked 2-D transpose (``transpose12``).
        """
        b, n, d = x.shape
        r, f = self.cfg.segments, n // 2 + 1
        ft = torch.promote_types(x.dtype, torch.float32)
        cpu_kernels = x.device.type == "cpu" if cpu_kernels is None else cpu_kernels
        with no_autocast(x.device):
            u = x.to(ft)
            if r < d:  # X S as one GEMM with the segment-mean matrix [D, r] (its backward too), no repeated columns
                u = u @ self.segment_mean.to(ft)  # [B, N, r]
            w = self.weights_fft.to(ft).view(f, r, d // r, 2)  # [F, r, d/r, 2]: segment j's columns
            if not cpu_kernels:
                u_hat = torch.fft.rfft(u, n=n, dim=1)  # [B, F, r]
                # the weights first: their layout then sets the product's, [B, F, r, d/r] contiguous whatever the
                # FFT's output strides, so the reshape below is a view, not a copy
                m_hat = torch.view_as_complex(w) * u_hat.unsqueeze(-1)  # [B, F, r, d/r]
                return torch.fft.irfft(m_hat.reshape(b, f, d), n=n, dim=1).to(x.dtype)  # [B, N, D]
            u_hat = torch.fft.rfft(u.transpose(1, 2), n=n, dim=-1)  # [B, r, F]
            w = w.permute(1, 2, 0, 3)  # [r, d/r, F, 2]
            if torch.compiler.is_compiling():
                # The complex product in real arithmetic: Inductor (torch 2.13) generates no code for complex
                # operators, and through them it computed a wrong gradient of these weights (2.2 on a scale of 1.5; a
                # test checks).
                ur, ui = torch.view_as_real(u_hat).unsqueeze(2).unbind(-1)  # [B, r, 1, F] each
                wr, wi = w.unbind(-1)  # [r, d/r, F] each
                m_hat = torch.view_as_complex(torch.stack((ur * wr - ui * wi, ur * wi + ui * wr), dim=-1))
            else:
                m_hat = u_hat.unsqueeze(2) * torch.view_as_complex(w)  # [B, r, d/r, F]
            m = torch.fft.irfft(m_hat.reshape(b, d, f), n=n, dim=-1).to(x.dtype)  # [B, D, N]
        return transpose12(m)  # [B, N, D]

    def forward(self, x: Tensor, mask: Tensor | None, cpu_kernels: bool | None = None) -> Tensor:
        cfg = self.cfg
        cpu_kernels = x.device.type == "cpu" if cpu_kernels is None else cpu_kernels
        m = self.fourier(x, cpu_kernels) if cfg.fourier_conv else None
        if not cfg.conv_stem:
            return x if m is None else m
        stem_in = x if m is None else torch.cat((m, x), dim=-1)  # [B, N, 2D]
        # The circular convolution spreads values into padded rows; zero them so the stem's window at the
        # last real tokens reads zeros, exactly as for an unpadded sequence.
        stem_in = zero_padding(stem_in, mask)
        # Conv1d over the sequence, "same" zero padding, [B, N, C] -> [B, N, D] contiguous, without a transposed copy;
        # on the CPU its weight gradient is taken by StemConv's GEMMs.
        if cpu_kernels:
            h = StemConv.apply(stem_in, self.conv.weight, self.conv.bias)
        else:
            h = conv_tokens_major(stem_in, self.conv.weight, self.conv.bias)
        if cfg.norm == "positions":
            h = self.bn(h)  # positions are BatchNorm's channels: [B, N, D] is its [batch, C, L] as it lies
        else:
            h = self.bn(h.transpose(1, 2)).transpose(1, 2)  # [B, D, N] -> [B, N, D]
        return self.drop(self.activate(h))

    def activate(self, h: Tensor) -> Tensor:
        """The stem's activation, ``self.act``; under torch.compile on the CPU, ReLU is one opaque op instead.

        Why: Inductor (torch 2.13, CPU) fuses BatchNorm + ReLU into one kernel and saves ReLU's backward mask as a
        bool tensor, which it stores one byte at a time in a scalar loop (``VecMask::store``; seen with perf), slower
        than eager's BatchNorm and ReLU. The opaque op runs eager's ReLU and, backward, eager's ``threshold_backward``
        on the saved output: the same function and gradient. CUDA keeps the fusion (Triton stores masks
        vectorised); ELU (the released preset) saves no mask.
        """
        if self.cfg.activation == "relu" and h.device.type == "cpu" and torch.compiler.is_compiling():
            return opaque_relu(h)
        return self.act(h)


def _first_tokens(t: Tensor, n: int) -> Tensor:
    """t[:, :n], and t itself when that is all of it: the slice's backward would zero-fill a [B, N, D] buffer and copy
    the gradient into it, a measurable share of a fwd+bwd step for nothing (timed: docs/results/
    2026-11-25-intel-xeon-2core.md, "From the code: S3Attention's CPU kernels")."""
    return t if t.shape[1] == n else t[:, :n]


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "the Fourier convolution and the column skeleton mix the whole sequence"


@register(
    "s3attention",
    S3Config,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n", needs_fixed_length=True),
    paper="https://arxiv.org/abs/2408.08567", display="S3Attention", group="low rank",
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
    - Two layouts of the same function: on the CPU, the kernels and layouts of ``attentions._s3_cpu`` (the row
      softmax over a middle axis of [B, H·s1, N], the stem's GEMM-based weight gradient); elsewhere the framework's
      ops in the layout a GPU prefers (the row attention as one fused SDPA call over [B, H, N, dh] strides, no
      transposes), every constant (the segment-mean matrix, the projected rows, the block-diagonal masks) a buffer,
      so that a forward and backward launch few kernels, never synchronise with the host and capture into a CUDA
      graph. The row term's dropout then draws its mask inside the SDPA kernel (the same distribution, another
      random stream than ``F.dropout``'s).
      ``cpu_kernels = False`` on an instance runs the second on the CPU (the tests check both against float64).
    """

    #: Use the CPU kernels on the CPU (False: the generic layout everywhere, for tests).
    cpu_kernels = True

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
        # Constants derived from the config and the sampled indices, not saved (recomputed after a load)
        self.register_buffer("head_eye", torch.eye(cfg.heads), persistent=False)
        self.register_buffer("proj_rows", self._projected_rows(), persistent=False)
        self.register_load_state_dict_post_hook(lambda module, keys: module.refresh_constants())

    def refresh_constants(self) -> None:
        """Recompute the derived buffers from the sampled indices (after a state dict brought other ones)."""
        self.proj_rows = self._projected_rows().to(self.index_set_right.device)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n_in, d = x.shape
        cpu = self.cpu_kernels and x.device.type == "cpu"
        x, mask = pad_to_length(x, mask, cfg.max_seq_len)
        x = zero_padding(x, mask)
        hs = self.smoother(x, mask, cpu)  # [B, N, D]
        # Every row of W_qkv the layer reads, gathered once (one gather forward, one scatter backward, where a gather
        # and a slice each cost a zero-filled gradient and their sum): [Q (, K2, V2) rows; (K, V rows)]
        rows = self.proj_rows
        kv_rows = 2 * d if cfg.row_attention else 0
        w_proj, w_kv = self.qkv.weight[rows].split([rows.numel() - kv_rows, kv_rows])
        b_proj, b_kv = self.qkv.bias[rows].split([rows.numel() - kv_rows, kv_rows])
        proj = F.linear(hs, w_proj, b_proj)  # [B, N, D (+ 2*H*s2)]: Q (, K2, V2)
        # split (not slicing): its backward concatenates the three gradients instead of zero-filling a buffer each
        hs2 = (proj.shape[-1] - d) // 2  # H*s2 with column attention, else 0
        q, *kv2 = proj.split([d, hs2, hs2] if cfg.col_attention else [d], dim=-1)
        p = cfg.dropout if self.training else 0.0
        terms = []
        if cfg.row_attention:
            kv = F.linear(hs[:, self.index_set_left], w_kv, b_kv)  # [B, s1, 2D]: K₁, V₁ at the sampled tokens
            terms.append(self.ln_row(self._row(q, kv, mask, p, cpu)))
        if cfg.col_attention:
            k2, v2 = kv2  # [B, N, H*s2] each: the sampled columns of every head
            terms.append(self.ln_col(self._col(q, k2, v2, mask, p)))
        if len(terms) == 1:
            return self.out(_first_tokens(terms[0], n_in))
        # the paper's (row + col) / 2, the 1/2 as the GEMM's alpha rather than a pass over [B, N, D] or the weight
        both = _first_tokens(terms[0] + terms[1], n_in).reshape(-1, d)  # [B·n, D]
        return torch.addmm(self.out.bias, both, self.out.weight.t(), alpha=0.5).view(b, n_in, d)

    def _projected_rows(self) -> Tensor:
        """Rows of ``qkv.weight`` the layer reads: those projected at every token, Q's, then (column attention) the
        sampled column j of head i in K (offset d) and in V (offset 2d), feature i*dh + j, so that one GEMM reads the
        smoothed input once; then (row attention) all of K's and V's, projected at the s1 sampled tokens only."""
        cfg = self.cfg
        q_rows = torch.arange(cfg.dim, device=self.index_set_right.device)
        parts = [q_rows]
        if cfg.col_attention:
            heads = torch.arange(cfg.heads, device=q_rows.device)[:, None]
            cols = (heads * cfg.head_dim + self.index_set_right).reshape(-1)  # [H*s2]
            parts += [cols + cfg.dim, cols + 2 * cfg.dim]
        if cfg.row_attention:
            parts.append(q_rows + cfg.dim)  # K's and V's rows, [D, 3D)
            parts.append(q_rows + 2 * cfg.dim)
        return torch.cat(parts)

    def _block_diagonal(self, blocks: Tensor) -> Tensor:
        """[B, H, m, k] per-head blocks -> [B, H*m, H*k] with block i on the diagonal and zeros elsewhere.

        Why: with the heads side by side in [B, N, D], a per-head product against a few sampled tokens or columns
        becomes one batched GEMM against this block-diagonal matrix (H times the work of the tiny per-head
        products, m, k <= 32 here), with no [B, H, N, dh] transposes to copy forward and backward.
        """
        bsz, h, m, k = blocks.shape
        eye = self.head_eye.to(blocks.dtype)
        return (blocks[:, :, :, None, :] * eye[None, :, None, :, None]).reshape(bsz, h * m, h * k)

    def _row(self, q: Tensor, kv: Tensor, mask: Tensor | None, p: float, cpu: bool) -> Tensor:
        """softmax(Q K₁ᵀ/√d_h) V₁ over the sampled tokens (``kv``: [B, s1, 2D], K₁ and V₁), heads merged: [B, N, D]."""
        cfg, d = self.cfg, self.cfg.dim
        b, n, _ = q.shape
        h, dh, idx = cfg.heads, cfg.head_dim, self.index_set_left
        k1, v1 = (t.view(b, -1, h, dh).transpose(1, 2) for t in kv.chunk(2, dim=-1))  # [B, H, s1, dh]
        s1 = k1.shape[2]
        if not cpu:
            # Row attention is softmax attention of every token over the s1 sampled ones: the fused SDPA kernel (flash
            # or memory-efficient on CUDA) runs scale, mask, softmax, dropout and both products as one kernel forward
            # and one backward, where the ops below launch a dozen each. Q is read as [B, H, N, dh] strides of the
            # [B, N, D] projection, and the kernel writes [B, N, H, dh], so neither side copies. A padded sampled
            # token is an additive bias (key_bias_value: finite, so a row of only padding averages V₁, as below).
            bias = None
            if mask is not None:
                keep = mask[:, idx][:, None, None, :]  # [B, 1, 1, s1]
                bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(
                    ~keep, key_bias_value(q.dtype))
            y = F.scaled_dot_product_attention(q.view(b, n, h, dh).transpose(1, 2), k1, v1, attn_mask=bias,
                                               dropout_p=p)  # [B, H, N, dh]
            return y.transpose(1, 2).reshape(b, n, d)  # [B, N, H, dh] -> [B, N, D]
        # The 1/√d_h scale goes on the s1 sampled keys. Scores Q K₁ᵀ: [B, N, H*s1].
        scores = q @ self._block_diagonal(k1 * dh**-0.5).transpose(1, 2)
        # CPU: transposed, [B, H*s1, N], the softmax then runs over a middle axis of s1 = 8 with N contiguous,
        # which torch's CPU kernel vectorises along N where a last axis of 8 is not. Computed as Q K₁ᵀ and copied
        # transposed, not as K₁ Qᵀ: Q's gradient then comes back [B, N, D] contiguous (from K₁ Qᵀ it was transposed,
        # and the backward of the projection's split gathered it element by element).
        scores = transpose12(scores).view(b, h, s1, n)  # [B, H, s1, N]
        if mask is not None:
            scores = fill_masked(scores, mask[:, idx][:, None, :, None])
        attn = F.dropout(scores.softmax(2), p=p, training=self.training).view(b, h * s1, n)  # [B, H*s1, N]
        return attn.transpose(1, 2) @ self._block_diagonal(v1)  # [B, N, H*s1] @ [B, H*s1, D] -> [B, N, D]

    def _col(self, q: Tensor, k2: Tensor, v2: Tensor, mask: Tensor | None, p: float) -> Tensor:
        """V₂ · softmax(Qᵀ K₂/√n)ᵀ over the sampled feature columns, heads merged: [B, N, D]."""
        cfg = self.cfg
        b, n, _ = q.shape
        h, dh = cfg.heads, cfg.head_dim
        s2 = k2.shape[-1] // h
        k2 = zero_padding(k2, mask)  # padded tokens add nothing to Qᵀ K₂
        # K₂ᵀ Q of every pair of heads in one GEMM ([B, H*s2, N] @ [B, N, D]); head i's block is (i, i). As K₂ᵀ Q
        # rather than Qᵀ K₂ so that Q's gradient comes back [B, N, D] contiguous (see _row).
        cross = (k2.transpose(1, 2) @ q).view(b, h, s2, h, dh)  # [B, H, s2, H, dh]
        # diagonal: [B, s2, dh, H], whose strides lie as [B, H, s2, dh]; viewed so, the scaled scores come out
        # contiguous and the softmax over s2 runs over their middle axis: neither it (CUDA's softmax copies a
        # non-contiguous input) nor the block-diagonal product below copies.
        scores = cross.diagonal(dim1=1, dim2=3).permute(0, 3, 1, 2) * cfg.max_seq_len**-0.5  # [B, H, s2, dh]
        attn = F.dropout(scores.softmax(-2), p=p, training=self.training)  # [B, H, s2, dh]: Aᵀ per head
        return v2 @ self._block_diagonal(attn)  # [B, N, H*s2] @ [B, H*s2, D] -> [B, N, D]


register_preset(
    "s3attention_released",
    "s3attention", display="S3Attention (released)",
    segment_average=False,
    conv_kernel=1,
    activation="elu",
    description="S3Attention with the released LRA code's smoother (no segment average, kernel 1, ELU).",
    benchmark=True,
)
