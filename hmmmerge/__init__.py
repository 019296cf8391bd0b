"""hmmmerge: learn cognitive maps from experience.

An online episodic memory (level 1) whose states are grouped into clusters
(level 2) by successor-feature guided merging, measured against exact
baselines with one likelihood / surprise evaluator.

>>> import hmmmerge
>>> env = hmmmerge.gridworld(10, 10, n_colours=10, seed=0)
>>> env.n_states, hmmmerge.markov_radius(env) >= 0
(100, True)
"""

from .environment import Environment
from .hmm import ActionHMM
from .rollouts import Trajectories, random_walk
from .structure import compact_subgraph, is_markov_subspace, markov_radii, markov_radius
from .worlds import gridworld

__version__ = "0.1.0"

__all__ = [
    "ActionHMM",
    "Environment",
    "Trajectories",
    "compact_subgraph",
    "gridworld",
    "is_markov_subspace",
    "markov_radii",
    "markov_radius",
    "random_walk",
]
