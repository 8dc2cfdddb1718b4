"""The zoo's variants by what they do to attention, for figures drawn as small multiples and for tables in a paper's
order (baselines first, then the families, the controls last).

Groups follow the efficient-attention surveys' taxonomy (Tay et al., "Efficient Transformers: A Survey", 2022,
https://arxiv.org/abs/2009.06732): exact softmax; low rank / landmarks; kernels (feature maps); sparse and local
patterns; hashing, clustering and learned routing; Fourier and other token mixing; the controls. S3Attention (the
project's subject) sits with the low-rank methods it is built from (a skeleton of sampled rows and columns).
"""

from __future__ import annotations

from collections.abc import Iterable

import attentions

#: group -> the families in it (a family is the name a variant class is registered under; presets share it).
GROUPS: dict[str, tuple[str, ...]] = {
    "exact": ("vanilla",),
    "low rank": ("s3attention", "linformer", "nystromformer", "skyformer", "luna", "transformer_ls",
                 "h_transformer_1d", "scatterbrain", "fmmformer"),
    "kernel": ("performer", "linear_transformer", "cosformer"),
    "sparse / local": ("local", "sparse_transformer", "longformer", "bigbird", "logsparse", "probsparse", "ponet"),
    "hashing / learned": ("reformer", "sinkhorn", "synthesizer", "fsat", "fat"),
    "Fourier / mixing": ("fnet", "fedformer_fourier", "fedformer_wavelet", "autocorrelation"),
    "controls": ("none", "mean_pool"),
}
_GROUP_OF = {family: group for group, families in GROUPS.items() for family in families}
OTHER = "other"


def group_of(name: str) -> str:
    """The group of a registered name (by its family), or :data:`OTHER` for a name the registry does not know."""
    try:
        family = attentions.spec(name).family
    except (KeyError, ValueError):
        return OTHER
    return _GROUP_OF.get(family, OTHER)


def paper_order(names: Iterable[str], baselines: Iterable[str] = ()) -> list[str]:
    """``names`` in a paper's order: the ``baselines`` (in their given order), then by group (as :data:`GROUPS`
    lists them, unknown names in :data:`OTHER` before the controls), within a group by family order, then name."""
    names = list(dict.fromkeys(names))
    first = [b for b in dict.fromkeys(baselines) if b in names]
    groups = [*[g for g in GROUPS if g != "controls"], OTHER, "controls"]

    def key(name: str) -> tuple[int, int, str]:
        group = group_of(name)
        families = GROUPS.get(group, ())
        try:
            family = attentions.spec(name).family
        except (KeyError, ValueError):
            family = name
        return groups.index(group), families.index(family) if family in families else len(families), name

    return first + sorted((n for n in names if n not in first), key=key)


#: The exact baselines a table lists first, after the suite's own baseline.
BASELINES = ("vanilla", "vanilla_sdpa", "vanilla_xformers")


def table_order(names: Iterable[str], baseline: str | None = None) -> list[str]:
    """A table's rows: the suite's ``baseline``, the exact baselines, then :func:`paper_order`."""
    return paper_order(names, list(dict.fromkeys(b for b in (baseline, *BASELINES) if b)))
