"""Ready-made worlds: the paper's colour gridworld.

Grid conventions: node labels are ``(row, col)`` with row 0 at the *top*;
actions are 0 left, 1 right, 2 up (row - 1), 3 down (row + 1); a move into the
border or into an obstacle leaves the agent in place.  The default start is
the bottom-left cell ``(rows - 1, 0)``, as in the paper.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_float, check_int
from ._random import as_generator
from .environment import Environment

__all__ = ["gridworld", "grid_colours", "GRID_ACTIONS"]

GRID_ACTIONS = {0: (0, -1), 1: (0, 1), 2: (-1, 0), 3: (1, 0)}
"""Action -> (d_row, d_col): 0 left, 1 right, 2 up, 3 down."""


def grid_colours(n_cells: int, n_colours: int, colouring: str = "balanced", seed=0) -> np.ndarray:
    """Colours for ``n_cells`` cells.

    ``"balanced"``: every colour appears ``n_cells // n_colours`` times and the
    remainder goes to distinct colours chosen at random, then positions are
    shuffled.  ``"iid"``: each cell's colour is uniform and independent.

    >>> np.bincount(grid_colours(100, 10, seed=3)).tolist()
    [10, 10, 10, 10, 10, 10, 10, 10, 10, 10]
    """
    rng = as_generator(seed)
    check_int(n_colours, "n_colours", low=1)
    if colouring == "balanced":
        base = np.repeat(np.arange(n_colours), n_cells // n_colours)
        extra = rng.permutation(n_colours)[: n_cells % n_colours]
        return rng.permutation(np.concatenate([base, np.sort(extra)])).astype(np.int64)
    if colouring == "iid":
        return rng.integers(0, n_colours, size=n_cells).astype(np.int64)
    raise ValueError(f"colouring must be 'balanced' or 'iid', got {colouring!r}")


#: memory of one grid cell as a networkx node with its four edges, measured (about 6 KiB), with a margin
BYTES_PER_CELL = 8192
#: memory of one colour in the per-observation tables built from a world (counts, report entries)
BYTES_PER_COLOUR = 128


def _check_grid_size(rows: int, cols: int, n_colours: int) -> None:
    """Refuse a grid before building it if it is over the states bound or the memory budget."""
    from ._limits import check_count, check_memory

    check_count(f"a {rows}x{cols} grid: states", rows * cols, "world_states")
    check_memory(f"a {rows}x{cols} grid with {n_colours} colours",  # colours: the per-observation tables
                 rows * cols * BYTES_PER_CELL + BYTES_PER_COLOUR * n_colours)


def gridworld(
    rows: int = 10,
    cols: int = 10,
    n_colours: int = 10,
    seed=0,
    start=None,
    obstacles=(),
    colouring: str = "balanced",
    colours=None,
    slip: float = 0.0,
    obs_noise: float = 0.0,
) -> Environment:
    """The paper's partially observable colour gridworld.

    Parameters
    ----------
    rows, cols : grid size.
    n_colours : number of floor colours (observations).
    seed : int or numpy Generator for the colouring; same seed, same map.
    start : ``(row, col)`` of the start cell; default bottom-left ``(rows-1, 0)``.
    obstacles : cells ``(row, col)`` that are walls (not states).
    colouring : ``"balanced"`` (equal counts, shuffled) or ``"iid"``.
    colours : optional explicit colours, an int array (rows x cols) overriding
        the random colouring (entries at obstacles are ignored).
    slip : probability that a move is replaced by a uniformly random action (the
        intended one is recorded); see :meth:`~hmmmerge.environment.Environment.with_noise`.
    obs_noise : probability that a view is replaced by a uniformly random colour.

    Examples
    --------
    >>> env = gridworld(3, 4, n_colours=2, seed=1)
    >>> env.n_states, env.n_actions, env.n_obs, env.start_node
    (12, 4, 2, (2, 0))
    >>> env.nodes[env.next_state[3, env.start]]  # down from the bottom row: stay
    (2, 0)
    >>> gridworld(3, 4, n_colours=2, seed=1, slip=0.1)
    Environment(n_states=12, n_actions=4, n_obs=2, start=(2, 0), stochastic moves)
    """
    for name, v in (("rows", rows), ("cols", cols), ("n_colours", n_colours)):
        check_int(v, name, low=1)
    for name, v in (("slip", slip), ("obs_noise", obs_noise)):
        check_float(v, name, low=0, high=1)
    _check_grid_size(int(rows), int(cols), int(n_colours))
    blocked = set()
    for cell in obstacles:
        cell = tuple(int(x) for x in cell)
        if len(cell) != 2 or not (0 <= cell[0] < rows and 0 <= cell[1] < cols):
            raise ValueError(f"obstacle {cell!r} is outside the {rows}x{cols} grid")
        blocked.add(cell)
    cells = [(r, c) for r in range(rows) for c in range(cols) if (r, c) not in blocked]
    if not cells:
        raise ValueError("every cell is an obstacle: the grid has no states")
    if colours is None:
        values = grid_colours(len(cells), n_colours, colouring, seed)
    else:
        grid = np.asarray(colours)
        if grid.shape != (rows, cols):
            raise ValueError(f"colours must have shape ({rows}, {cols}), got {grid.shape}")
        values = np.array([grid[r, c] for r, c in cells], dtype=np.int64)
        if values.min() < 0 or values.max() >= n_colours:
            raise ValueError(f"colours must lie in 0..{n_colours - 1}")
    if start is None:
        start = (rows - 1, 0)
    start = tuple(start)
    if start in blocked:
        raise ValueError(f"start cell {start!r} is an obstacle")

    index = {cell: i for i, cell in enumerate(cells)}
    if start not in index:
        raise ValueError(f"start node {start!r} is not in the graph")
    next_state = np.empty((len(GRID_ACTIONS), len(cells)), dtype=np.int64)
    for i, (r, c) in enumerate(cells):
        for action, (dr, dc) in GRID_ACTIONS.items():
            next_state[action, i] = index.get((r + dr, c + dc), i)  # a wall or the border: stay
    # the graph (a networkx MultiDiGraph, nodes in row-major order) is built when env.graph is first used
    env = Environment._from_tables(cells, values, next_state, index[start], n_colours, f"gridworld {rows}x{cols}")
    return env.with_noise(slip=slip, obs_noise=obs_noise) if slip or obs_noise else env
