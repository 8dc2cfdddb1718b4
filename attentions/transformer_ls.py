"""Transformer-LS (Long-Short Transformer): segment-wise sliding-window attention plus a dynamic low-rank projection.

Paper: Zhu, Ping, Xiao, Shoeybi, Goldstein, Anandkumar, Catanzaro, "Long-Short Transformer: Efficient Transformers
for Language and Vision", NeurIPS 2021, https://arxiv.org/abs/2107.02192 (§3.1 short-term attention, §3.2
long-range attention via dynamic projection, §3.3 DualLN). Authors' code: ``NVIDIA/transformer-ls``
(``lra/attention_transformer_ls.py``, ``AttentionLS``; LRA scripts ``lms`` = r, ``wsize`` = w).

The short-term part is computed blockwise by the shared primitive ``attentions._blocks.block_sparse_attention``
(segments of w queries gather their own and both neighbouring key segments, a mask keeps the w/2-wide margins),
with the r projected keys passed as extra keys so that one softmax runs over the union of both key sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._blocks import block_sparse_attention, key_positions, neighbour_blocks, pad_for_blocks
from .base import ProjectedAttention, fill_masked, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register

__all__ = ["TransformerLSAttention", "TransformerLSConfig", "window_margin"]


@dataclass(frozen=True)
class TransformerLSConfig(AttentionConfig):
    """Config of Transformer-LS; defaults are the paper's LRA model "Transformer-LS (w, r) = (8, 32)".

    Attributes:
        window: w, the segment length: the sequence is cut into segments of w queries, each attending to its own
            segment and w/2 keys on either side (2w keys in all). Inputs are padded internally to a multiple of w.
        rank: r, the number of keys and values the dynamic projection compresses the whole sequence to.
        dual_ln: DualLN (§3.3): separate LayerNorms on the local (window) and the global (projected) keys and
            values; False drops both (the paper's "w/o DualLN" ablation).
    """

    window: int = 8
    rank: int = 32
    dual_ln: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("window", "rank")


def window_margin(window: int) -> int:
    """Keys on each side of a segment: w/2, at least 1 (the authors' ``ext_len = max(w // 2, 1)``)."""
    return max(window // 2, 1)


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "transformer_ls",
    TransformerLSConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n", seq_len_multiple_of=8, pads_to_multiple=True),
    paper="https://arxiv.org/abs/2107.02192",
)
class TransformerLSAttention(ProjectedAttention):
    """Transformer-LS: one softmax over a sliding segment window and r dynamically projected keys; arxiv 2107.02192.

    Per head: K_L = LN_L(X W_K) (and V_L likewise), P = softmax over the sequence of X W_P ∈ R^{n×r}, the global
    keys K̄ = LN_G(Pᵀ X W_K) and values V̄ = LN_G(Pᵀ X W_V) ∈ R^{r×d}; query i of segment s attends, in one softmax,
    to the window keys K_L[j] for j ∈ [s·w − w/2, (s+1)·w + w/2) and to all r global keys.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Segment margins w/2 = ``max(w // 2, 1)`` each side (authors' code; the paper: "w/2 consecutive tokens on
      the left and right"), the ends zero-padded, i.e. masked here.
    - W_P acts on the layer input X (the self-attention "K" of the paper's P = softmax(K W_P) is X), with a bias,
      one W_P ∈ R^{D×H·r} for all heads (authors' ``dconv_fc``).
    - DualLN: each LayerNorm normalises the full D = H·d of a key/value vector (authors' code:
      ``LayerNorm(num_head * head_dim)`` on the merged heads); LN_L is shared by window keys and values, LN_G by
      global keys and values (authors' code). The global keys are LN_G(Pᵀ (X W_K)) as the paper's equation; the
      authors' code compresses the already-normalised LN_L(X W_K) before LN_G, a small difference.
    - Sequence lengths off a multiple of w are padded internally (authors' code requires a multiple); padded
      positions are masked out of the window keys and get probability 0 in P (their logits are set to the
      dtype's most negative finite value, so a fully padded sequence stays finite instead of NaN).
    - Dropout (cfg.dropout) on the joint attention weights, in training (authors' ``drop_attn``); the authors'
      optional depth-wise convolution on V (``conv_kernel_size``, off in their LRA scripts) and CLS handling are
      not part of the attention studied here and are left out.
    """

    cfg: TransformerLSConfig

    def __init__(self, cfg: TransformerLSConfig) -> None:
        super().__init__(cfg)  # proj: read as merged [B, N, D] K/V: DualLN normalises over D
        self.dyn_proj = nn.Linear(cfg.dim, cfg.heads * cfg.rank)  # W_P: X -> H·r projection logits
        self.ln_local = nn.LayerNorm(cfg.dim) if cfg.dual_ln else nn.Identity()
        self.ln_global = nn.LayerNorm(cfg.dim) if cfg.dual_ln else nn.Identity()

    def window_pattern(self, nb: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """Key blocks [nb, 3] (previous, own, next segment) and which of their 3w keys segment s sees: [nb, 1, 3w]."""
        w, margin = self.cfg.window, window_margin(self.cfg.window)
        key_blocks = neighbour_blocks(nb, 1, 1, device)  # [nb, 3]
        kpos = key_positions(key_blocks, w)  # [nb, 3w]
        start = (torch.arange(nb, device=device) * w)[:, None]  # [nb, 1]: first query of each segment
        allowed = (kpos >= start - margin) & (kpos < start + w + margin)  # [nb, 3w]
        return key_blocks, allowed[:, None, :]  # the same keys for every query of a segment

    def global_keys(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """Dynamic projection: K̄ = LN_G(Pᵀ K), V̄ = LN_G(Pᵀ V) with P = softmax_n(X W_P): 2 x [B, H, r, d].

        x [B, N, D] (zeroed at padding), k/v [B, N, D] the un-normalised projections X W_K, X W_V.
        """
        cfg = self.cfg
        b, n, _ = x.shape
        logits = self.dyn_proj(x)  # [B, N, H·r]
        if mask is not None:  # padded positions get exactly zero weight in every column of P
            logits = fill_masked(logits, mask[..., None])
        p = logits.softmax(dim=1)  # [B, N, H·r]: softmax over the sequence, one distribution per (head, column)
        p = p.view(b, n, cfg.heads, cfg.rank).permute(0, 2, 3, 1)  # [B, H, r, N]
        kg = torch.matmul(p, split_heads(k, cfg.heads))  # [B, H, r, d]
        vg = torch.matmul(p, split_heads(v, cfg.heads))  # [B, H, r, d]
        # LN_G over the merged heads of each projected key: [B, H, r, d] -> [B, r, D] -> [B, H, r, d].
        kg = split_heads(self.ln_global(merge_heads(kg)), cfg.heads)
        vg = split_heads(self.ln_global(merge_heads(vg)), cfg.heads)
        return kg, vg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n = x.shape[1]
        x, mask = pad_for_blocks(x, mask, cfg.window)  # [B, N', D], N' a multiple of w; the padding is masked
        x = zero_padding(x, mask)
        q, k, v = self.proj.qkv(x).chunk(3, dim=-1)  # 3 x [B, N', D]
        kg, vg = self.global_keys(x, k, v, mask)  # 2 x [B, H, r, d]
        k_loc = split_heads(self.ln_local(k), cfg.heads)  # [B, H, N', d]
        v_loc = split_heads(self.ln_local(v), cfg.heads)  # [B, H, N', d]
        key_blocks, allowed = self.window_pattern(x.shape[1] // cfg.window, x.device)
        y = block_sparse_attention(
            split_heads(q, cfg.heads), k_loc, v_loc, cfg.window, key_blocks,
            key_mask=mask, allowed=allowed, extra_k=kg, extra_v=vg,
            dropout_p=cfg.dropout, training=self.training,
        )  # [B, H, N', d]: one softmax over the window keys and the r global keys
        return self.out(merge_heads(y))[:, :n]  # [B, N, D]: internal padding dropped
