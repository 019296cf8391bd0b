"""Numba kernels of Algorithm 1 (the episodic memory, :mod:`hmmmerge.episodic`).

Imported lazily (numba takes about half a second to import).  Level-1
scalars travel in a small int array ``scal = [n_states, current_state,
root_next]``: ``current_state == -1`` is the fixed start state of an episode
(before its first observation), and ``root_next`` is its one transition
``T(start, -1)``.
"""

from __future__ import annotations

from numba import njit

N_STATES, CURRENT, ROOT = 0, 1, 2


@njit(cache=True)
def l1_observe(next_state, emission, labels, scal, a, o, label):
    """Algorithm 1 for one observation; returns the new current state.

    ``a == -1`` is the first observation of an episode (from the start state).
    """
    cur = scal[CURRENT]
    if a < 0:
        h = scal[ROOT]
    else:
        h = next_state[a, cur]
    if h < 0 or emission[h] != o:
        h = scal[N_STATES]
        scal[N_STATES] = h + 1
        emission[h] = o
        labels[h] = label
        for b in range(next_state.shape[0]):
            next_state[b, h] = -1
        if a < 0:
            scal[ROOT] = h
        else:
            next_state[a, cur] = h
    scal[CURRENT] = h
    return h


@njit(cache=True)
def observe_batch(obs, actions, states, next_state, emission, labels, scal, out_states, out_pred):
    """Algorithm 1 over episodes (N, L); ``actions[:, 0] == -1`` starts each episode.

    ``out_states`` gets the level-1 state after each observation, ``out_pred``
    the observation level 1 predicted before it (-1: no prediction).
    """
    N, L = obs.shape
    for n in range(N):
        for t in range(L):
            a = actions[n, t]
            if a < 0:
                h = scal[ROOT]
            else:
                h = next_state[a, scal[CURRENT]]
            out_pred[n, t] = emission[h] if h >= 0 else -1
            label = states[n, t] if states.shape[0] > 0 else -1
            out_states[n, t] = l1_observe(next_state, emission, labels, scal, a, obs[n, t], label)
