"""The old import path of :class:`~hmmmerge.fold.noisy.StatisticalFoldMerger` (``merge="fold-noisy"``)."""

from .fold.noisy import StatisticalFoldMerger, pair_llr

__all__ = ["StatisticalFoldMerger", "pair_llr"]
