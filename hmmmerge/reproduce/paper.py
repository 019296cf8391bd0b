"""The paper's published final values (episode 1000, smoothed mean over runs; REFERENCE.md).

Entries are ``(value, as printed)``; a printed range such as ``~0.67-0.70`` is
stored as its midpoint.  ``None`` where the paper gives no number.

>>> PAPER[(10, "sf")]["accuracy"]
(0.785, '0.785')
"""

from __future__ import annotations

__all__ = ["PAPER", "PAPER_FIRST_ORDER", "PAPER_MERGE_ACCURACY"]


def _v(text):
    if text is None:
        return None
    t = text.lstrip("~").replace(",", "")
    if "-" in t:
        lo, hi = t.split("-")
        return ((float(lo) + float(hi)) / 2, text)
    return (float(t), text)


_ROWS = [  # size, merge, accuracy, purity, clusters
    (1, "sf", "~0.82", "~0.70", "~5,000"),
    (1, "random", "~0.67-0.70", "~0.53", "~2,900"),
    (1, "none", "~0.17", None, "~45,000"),
    (10, "sf", "0.785", "0.628", "552"),
    (10, "random", "0.669", "0.531", "376"),
    (10, "none", "~0.65", "~0.49", "~1,900"),
    (100, "sf", "0.662", "0.581", "155"),
    (100, "random", "0.648", "0.534", "101"),
    (100, "none", "0.532", "0.361", "338"),
]

PAPER = {(size, merge): {"accuracy": _v(a), "purity": _v(p), "n_clusters": _v(c)}
         for size, merge, a, p, c in _ROWS}
"""(initial size, merge mode) -> metric -> (value, printed text) or None."""

PAPER_FIRST_ORDER = _v("0.528")

PAPER_MERGE_ACCURACY = {1: _v("0.25-0.3"), 10: _v("~0.75"), 20: _v("~0.9"), 40: _v("~0.97"), 70: _v("~0.99")}
"""Section 3.1 merge accuracy at full purity by cluster size (read off the paper's figure)."""
