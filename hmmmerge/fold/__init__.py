"""The fold family: red-blue state merging of level 1 into level 2, one engine with a pluggable test.

:mod:`~hmmmerge.fold.engine` is the engine (prefix tree, blocks, union-find,
undo journal, state-file checks) and the plug interface;
:class:`FoldMerger` (``merge="fold"``, :mod:`~hmmmerge.fold.exact`) runs it
with the exact colour-clash test in numba kernels,
:class:`StatisticalFoldMerger` (``merge="fold-noisy"``,
:mod:`~hmmmerge.fold.noisy`) with a likelihood-ratio test for noisy colours.
"""

from .exact import FoldMerger, default_min_evidence
from .noisy import StatisticalFoldMerger, pair_llr

__all__ = ["FoldMerger", "StatisticalFoldMerger", "default_min_evidence", "pair_llr"]
