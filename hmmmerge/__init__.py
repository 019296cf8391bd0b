"""hmmmerge: learn cognitive maps from experience.

An online episodic memory (level 1) whose states are grouped into clusters
(level 2) by successor-feature guided merging, measured against exact
baselines with one likelihood / surprise evaluator.

The public names below are imported on first use (PEP 562 module
``__getattr__``), so ``import hmmmerge`` costs almost nothing and numba,
scipy, networkx, pgmpy and matplotlib load only when a name that needs them
is touched.

>>> import hmmmerge
>>> env = hmmmerge.gridworld(10, 10, n_colours=10, seed=0)
>>> env.n_states, hmmmerge.markov_radius(env) >= 0
(100, True)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "TwoLevelMemory": "agent",
    "build_model": "models",
    "fit_model": "models",
    "Clusters": "clusters",
    "level2_hmm": "clusters",
    "Environment": "environment",
    "EpisodicMemory": "episodic",
    "evaluate_model": "evaluate",
    "position_transition_matrix": "evaluate",
    "surprise": "evaluate",
    "weighted_purity": "evaluate",
    "from_gymnasium": "gym_worlds",
    "world": "gallery",
    "ActionHMM": "hmm",
    "RandomMerger": "merging",
    "SFMerger": "merging",
    "Trajectories": "trajectories",
    "random_walk": "rollouts",
    "aliasing_depths": "structure",
    "compact_subgraph": "structure",
    "is_markov_subspace": "structure",
    "markov_radii": "structure",
    "markov_radius": "structure",
    "observation_sequence_counts": "structure",
    "pairwise_similarity": "successor",
    "successor_features": "successor",
    "true_successor_features": "successor",
    "gridworld": "worlds",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hmmmerge' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
