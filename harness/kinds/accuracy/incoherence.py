"""μ-incoherence of token matrices before and after S3Attention's Fourier convolution (the paper's Table S7).

Definition 1 of the S3Attention paper (arxiv.org/abs/2408.08567, §III-B): a rank-r matrix X ∈ R^{n×d} with
compact SVD X = W Σ Vᵀ is μ-incoherent if max_i ‖e_iᵀ W‖ ≤ √(μ r / n) and max_i ‖e_iᵀ V‖ ≤ √(μ r / d). The
smallest such μ is

    μ(X) = max( n/r · max_i ‖e_iᵀ W‖²,  d/r · max_j ‖e_jᵀ V‖² ),

between 1 (energy spread evenly over rows and columns) and max(n, d)/r (a singular vector on one canonical
basis vector). Token matrices are not exactly low rank, so, as the paper's supplement §E does "approximately",
rank r means the top-r singular vectors.

Choices the paper leaves open (ours): X is the first S3Attention layer's input token matrix (after the
embedding and the pre-attention LayerNorm) and X^smooth its Fourier convolution F⁻¹[F(XS)·L] of eq. (3); both
restricted to the example's real (non-padding) tokens; one μ per validation example, summarised by the mean and
the population standard deviation over the examples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

import attentions

from ...models.tasks import Split


def mu_incoherence(x: Tensor, rank: int) -> Tensor:
    """μ of Definition 1 at ``rank`` for a matrix [n, d] or a batch [..., n, d]; returns [...] (float64).

    Raises:
        ValueError: ``rank`` outside 1..min(n, d).
    """
    n, d = x.shape[-2:]
    if not 1 <= rank <= min(n, d):
        raise ValueError(f"rank {rank} must be in 1..min(n, d) = {min(n, d)} for a {n}x{d} matrix")
    w, _, vh = torch.linalg.svd(x.double(), full_matrices=False)  # [.., n, k], [.., k], [.., k, d]
    w, v = w[..., :rank], vh[..., :rank, :].transpose(-1, -2)  # [.., n, r], [.., d, r]
    mu_w = n / rank * w.pow(2).sum(-1).amax(-1)  # n/r · max_i ‖e_iᵀ W‖²
    mu_v = d / rank * v.pow(2).sum(-1).amax(-1)  # d/r · max_j ‖e_jᵀ V‖²
    return torch.maximum(mu_w, mu_v)


def s3_layers(model: nn.Module) -> list[nn.Module]:
    """The model's S3Attention layers, in forward order.

    The class is looked up in the registry rather than imported: an import would put S3Attention's source into the
    key of every accuracy cell (:mod:`harness.core.provenance`), so that editing it would retrain every variant; a
    cell that measures incoherence runs S3Attention, whose code its key holds anyway."""
    s3 = attentions.spec("s3attention").module_cls
    return [m for m in model.modules() if isinstance(m, s3)]


@torch.no_grad()
def measure_incoherence(
    model: nn.Module,
    split: Split,
    ranks: Sequence[int],
    *,
    batch_size: int,
    device: torch.device | str = "cpu",
    layer: int = 0,
    max_examples: int = 0,
) -> dict[str, float]:
    """Mean and std over ``split``'s examples of μ(X) and μ(X^smooth) at each rank (module docstring).

    Args:
        model: a trained classifier with at least ``layer + 1`` S3Attention layers whose Fourier convolution is on.
        split: examples to measure (the validation split); the first document of pairs.
        ranks: ranks r of Definition 1.
        batch_size: examples per forward pass.
        device: where the model is.
        layer: which S3Attention layer (0 = the first).
        max_examples: measure only the first k examples (0 = all).

    Returns:
        ``mu_x_r{r}_mean``, ``mu_x_r{r}_std``, ``mu_smooth_r{r}_mean``, ``mu_smooth_r{r}_std`` per rank and
        ``mu_count`` (number of examples).
    """
    layers = s3_layers(model)
    if len(layers) <= layer:
        raise ValueError(f"incoherence: the model has {len(layers)} S3Attention layer(s), layer {layer} asked")
    smoother = layers[layer].smoother
    if not smoother.cfg.fourier_conv:
        raise ValueError("incoherence: this S3Attention has no Fourier convolution (fourier_conv=False)")
    values: dict[str, list[Tensor]] = {f"{kind}_r{r}": [] for r in ranks for kind in ("mu_x", "mu_smooth")}

    def capture(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
        x, mask = args[:2]  # [B, N, D], bool [B, N] or None: the smoother's input, padding already zeroed
        smooth = smoother.fourier(x)  # [B, N, D]
        for b in range(x.shape[0]):
            real = slice(None) if mask is None else mask[b]
            for r in ranks:
                values[f"mu_x_r{r}"].append(mu_incoherence(x[b, real], r))
                values[f"mu_smooth_r{r}"].append(mu_incoherence(smooth[b, real], r))

    was_training = model.training
    model.eval()
    handle = smoother.register_forward_pre_hook(capture)
    try:
        n = len(split) if max_examples <= 0 else min(max_examples, len(split))
        for start in range(0, n, batch_size):
            tokens = split.x0[start : min(start + batch_size, n)].to(device)
            model.encoder(tokens, tokens != 0)
    finally:
        handle.remove()
        model.train(was_training)
    out: dict[str, float] = {}
    for name, items in values.items():
        v = torch.stack(items)
        out[f"{name}_mean"] = v.mean().item()
        out[f"{name}_std"] = v.std(correction=0).item()
    out["mu_count"] = float(n)
    return out
