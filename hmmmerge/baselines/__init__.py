"""The baseline learners; each becomes an :class:`~hmmmerge.hmm.ActionHMM` by ``to_hmm()``.

First order (:class:`FirstOrderModel`), the context model (:class:`ContextModel`),
EM on clone HMMs (:class:`CloneHMM`), best-first model merging
(:class:`BestFirstMerging`), the true world (:class:`~hmmmerge.baselines.oracle.Oracle`)
and AALpy's RPNI / ALERGIA (:mod:`hmmmerge.baselines.aalpy_models`, extra ``[bench]``).
They are built by name, with one set of defaults, by the model catalogue
:mod:`hmmmerge.models` (``build_model``, ``fit_model`` and ``MODELS`` are
re-exported here for older code).
"""

from __future__ import annotations

from .bfmm import BestFirstMerging
from .context import ContextModel
from .em import CloneHMM
from .first_order import FirstOrderModel

__all__ = ["BestFirstMerging", "CloneHMM", "ContextModel", "FirstOrderModel"]


def __getattr__(name: str):
    if name in ("MODELS", "build_model", "fit_model", "ModelEntry", "Option"):
        from .. import models

        return getattr(models, name)
    raise AttributeError(f"module 'hmmmerge.baselines' has no attribute {name!r}")
