"""The zoo's variants by what they do to attention, for figures drawn as small multiples and for tables in a paper's
order (baselines first, then the families, the controls last).

Each variant names its group where it is registered (``register(..., group=...)``, one of
:data:`attentions.GROUPS`, the efficient-attention surveys' taxonomy); this module orders them for a paper.
S3Attention (the project's subject) sits with the low-rank methods it is built from (a skeleton of sampled rows and
columns).
"""

from __future__ import annotations

from collections.abc import Iterable

import attentions

#: The order of the known families within their groups, as the S3Attention paper's Table 1 and the surveys list them
#: (presentation only: a variant's group is its own, ``register(..., group=...)``; a family not listed here follows
#: the listed ones of its group, by name).
PAPER_ORDER: tuple[str, ...] = (
    "vanilla",
    "s3attention", "linformer", "nystromformer", "skyformer", "luna", "transformer_ls", "h_transformer_1d",
    "scatterbrain", "fmmformer",
    "performer", "linear_transformer", "cosformer",
    "local", "sparse_transformer", "longformer", "bigbird", "logsparse", "probsparse", "ponet",
    "reformer", "sinkhorn", "synthesizer", "fsat", "fat",
    "fnet", "fedformer_fourier", "fedformer_wavelet", "autocorrelation",
    "none", "mean_pool",
)
OTHER = "other"


def group_of(name: str) -> str:
    """The group of a registered name (``register(..., group=...)``), or :data:`OTHER` for a name the registry does
    not know (an older store's)."""
    try:
        return attentions.spec(name).group
    except (KeyError, ValueError):
        return OTHER


def members(group: str) -> list[str]:
    """The registered names of ``group``."""
    return [n for n in attentions.list_attentions() if attentions.spec(n).group == group]


def paper_order(names: Iterable[str], baselines: Iterable[str] = ()) -> list[str]:
    """``names`` in a paper's order: the ``baselines`` (in their given order), then by group (as
    :data:`attentions.GROUPS` lists them, unknown names in :data:`OTHER` before the controls), within a group by
    :data:`PAPER_ORDER`, then name."""
    names = list(dict.fromkeys(names))
    first = [b for b in dict.fromkeys(baselines) if b in names]

    def key(name: str) -> tuple[int, int, str]:
        try:
            family = attentions.spec(name).family
        except (KeyError, ValueError):
            family = name
        order = PAPER_ORDER.index(family) if family in PAPER_ORDER else len(PAPER_ORDER)
        return attentions.GROUPS.index(group_of(name)), order, name

    return first + sorted((n for n in names if n not in first), key=key)


#: The exact baselines a table lists first, after the suite's own baseline.
BASELINES = ("vanilla", "vanilla_sdpa", "vanilla_xformers")


def table_order(names: Iterable[str], baseline: str | None = None) -> list[str]:
    """A table's rows: the suite's ``baseline``, the exact baselines, then :func:`paper_order`."""
    return paper_order(names, list(dict.fromkeys(b for b in (baseline, *BASELINES) if b)))
