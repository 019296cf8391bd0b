"""hmmmerge: learn cognitive maps from experience.

An online episodic memory (level 1) whose states are grouped into clusters
(level 2) by successor-feature guided merging, measured against exact
baselines with one likelihood / surprise evaluator.

>>> import hmmmerge
>>> env = hmmmerge.gridworld(10, 10, n_colours=10, seed=0)
>>> env.n_states, hmmmerge.markov_radius(env) >= 0
(100, True)
"""

from .agent import TwoLevelMemory
from .clusters import Clusters, level2_hmm
from .environment import Environment
from .episodic import EpisodicMemory
from .evaluate import evaluate_model, position_transition_matrix, surprise, weighted_purity
from .gallery import world
from .hmm import ActionHMM
from .merging import RandomMerger, SFMerger
from .rollouts import Trajectories, random_walk
from .structure import (
    aliasing_depths,
    compact_subgraph,
    is_markov_subspace,
    markov_radii,
    markov_radius,
    observation_sequence_counts,
)
from .successor import pairwise_similarity, successor_features, true_successor_features
from .worlds import gridworld

__version__ = "0.1.0"

__all__ = [
    "ActionHMM",
    "Clusters",
    "Environment",
    "EpisodicMemory",
    "RandomMerger",
    "SFMerger",
    "Trajectories",
    "TwoLevelMemory",
    "aliasing_depths",
    "compact_subgraph",
    "evaluate_model",
    "gridworld",
    "is_markov_subspace",
    "level2_hmm",
    "markov_radii",
    "markov_radius",
    "observation_sequence_counts",
    "pairwise_similarity",
    "position_transition_matrix",
    "random_walk",
    "successor_features",
    "surprise",
    "true_successor_features",
    "weighted_purity",
    "world",
]
