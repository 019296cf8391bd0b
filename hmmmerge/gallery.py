"""A gallery of example worlds, available by name: ``world("maze")``.

=================  ==========================================================
name               world
=================  ==========================================================
``paper-grid``     the paper's 10x10 grid, 10 colours, balanced (:func:`~hmmmerge.worlds.gridworld`)
``maze``           a fixed 9x9 maze: walls form corridors, 51 open cells, 8 colours
``torus``          a 10x10 grid whose moves wrap around the borders, 10 colours
``two-rooms``      two 5x5 rooms joined by a corridor of 3 cells, 8 colours
``aliased-loop``   a 12-cycle coloured 0, 1, 2, 0, 1, 2, ...: Markov radius 1,
                   and no amount of experience tells same-coloured states apart
``cscg-room``      a 6x8 room with 4 colours (the size of the CSCG paper's room)
=================  ==========================================================

Every builder (and :func:`world`) takes ``slip=p`` (with probability ``p`` a
move is replaced by a uniformly random action, the intended one recorded) and
``obs_noise=q`` (each view replaced by a uniformly random colour with
probability ``q``): ``world("maze", slip=0.05)`` is the maze with slipping
moves (see :meth:`~hmmmerge.environment.Environment.with_noise`).

Grids keep the conventions of :func:`~hmmmerge.worlds.gridworld`: node labels
``(row, col)``, actions 0 left, 1 right, 2 up, 3 down, a blocked move stays
in place, start bottom-left.  The colouring is random (balanced by default)
and fixed by ``seed``, except for the aliased loop, which is periodic unless
asked otherwise.  Keyword arguments of :func:`world` go to the builder, e.g.
``world("torus", rows=6, cols=6, n_colours=5)``.
"""

from __future__ import annotations

import inspect

import networkx as nx
import numpy as np

from ._validation import check_float, check_int
from .environment import Environment
from .worlds import GRID_ACTIONS, grid_colours, gridworld

__all__ = ["WORLDS", "world", "torus", "cycle_world", "maze", "two_rooms", "MAZE_LAYOUT"]

MAZE_LAYOUT = (
    ".....#...",
    ".###.#.#.",
    ".#...#.#.",
    ".#.###.#.",
    ".#.....#.",
    ".#####.#.",
    "...#...#.",
    ".#.#.###.",
    ".#.......",
)
"""The maze: ``#`` is a wall, ``.`` an open cell (row 0 at the top)."""


def _positive(name, value):
    check_int(value, name, low=1)


def _noisy(env: Environment, slip, obs_noise) -> Environment:
    """``env`` with slipping moves / noisy views when asked (checked: probabilities in [0, 1])."""
    for name, v in (("slip", slip), ("obs_noise", obs_noise)):
        check_float(v, name, low=0, high=1)
    return env.with_noise(slip=slip, obs_noise=obs_noise) if slip or obs_noise else env


def torus(rows: int = 10, cols: int = 10, n_colours: int = 10, seed=0, colouring: str = "balanced",
          start=None, slip: float = 0.0, obs_noise: float = 0.0) -> Environment:
    """A grid whose moves wrap around: leaving one border enters at the opposite one.

    Every cell has four distinct neighbours (for sizes >= 3), so no cell is
    special: there are no corners or walls that give the position away.

    >>> env = torus(4, 5, n_colours=4, seed=0)
    >>> env.n_states, env.n_actions, env.start_node
    (20, 4, (3, 0))
    >>> env.nodes[env.next_state[0, env.start]], env.nodes[env.next_state[3, env.start]]  # left, down
    ((3, 4), (0, 0))
    """
    _positive("rows", rows)
    _positive("cols", cols)
    _positive("n_colours", n_colours)
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    colours = grid_colours(len(cells), n_colours, colouring, seed)
    g = nx.MultiDiGraph(name=f"torus {rows}x{cols}")
    for cell, colour in zip(cells, colours.tolist()):
        g.add_node(cell, obs=colour)
    for r, c in cells:
        for action, (dr, dc) in GRID_ACTIONS.items():
            g.add_edge((r, c), ((r + dr) % rows, (c + dc) % cols), action=action)
    start = (rows - 1, 0) if start is None else tuple(start)
    if start not in g:
        raise ValueError(f"start {start!r} is not a cell of the {rows}x{cols} torus")
    return _noisy(Environment(g, start=start, n_obs=n_colours), slip, obs_noise)


def cycle_world(length: int = 12, n_colours: int = 3, colouring: str = "periodic", seed=0,
                slip: float = 0.0, obs_noise: float = 0.0) -> Environment:
    """A ring of ``length`` states; action 0 steps forward (i -> i+1), action 1 back.

    ``colouring="periodic"`` colours state ``i`` with ``i % n_colours``.  When
    ``n_colours`` divides ``length`` (and ``length > n_colours``), the Markov
    radius is ``(n_colours - 1) // 2`` and rotating the ring by ``n_colours``
    maps the world onto itself, so same-coloured states are never told apart.  ``"balanced"`` and
    ``"iid"`` colour at random as :func:`~hmmmerge.worlds.grid_colours` does.

    >>> env = cycle_world(6, n_colours=3)
    >>> env.obs.tolist(), env.next_state.tolist()
    ([0, 1, 2, 0, 1, 2], [[1, 2, 3, 4, 5, 0], [5, 0, 1, 2, 3, 4]])
    """
    _positive("length", length)
    _positive("n_colours", n_colours)
    if colouring == "periodic":
        obs = np.arange(length) % n_colours
    else:
        obs = grid_colours(length, n_colours, colouring, seed)
    i = np.arange(length)
    env = Environment.from_arrays(np.vstack([(i + 1) % length, (i - 1) % length]), obs, n_obs=int(n_colours))
    env.graph.graph["name"] = f"ring of {length}"
    return _noisy(env, slip, obs_noise)


def maze(n_colours: int = 8, seed=0, colouring: str = "balanced", layout=MAZE_LAYOUT, slip: float = 0.0,
         obs_noise: float = 0.0) -> Environment:
    """A grid maze: the walls of ``layout`` (``#``) are obstacles, the rest are open cells.

    The default layout (:data:`MAZE_LAYOUT`, 9x9) has 51 open cells joined by
    corridors one cell wide, with two loops.  Start bottom-left.

    >>> env = maze(seed=0)
    >>> env.n_states, env.n_obs, env.start_node
    (51, 8, (8, 0))
    """
    rows = [str(line) for line in layout]
    if not rows or any(len(line) != len(rows[0]) for line in rows):
        raise ValueError("layout must be non-empty rows of equal length")
    bad = {ch for line in rows for ch in line} - {"#", "."}
    if bad:
        raise ValueError(f"layout may hold only '#' and '.', found {sorted(bad)}")
    obstacles = [(r, c) for r, line in enumerate(rows) for c, ch in enumerate(line) if ch == "#"]
    env = gridworld(len(rows), len(rows[0]), n_colours=n_colours, seed=seed, colouring=colouring,
                    obstacles=obstacles)
    env.graph.graph["name"] = "maze"
    return _noisy(env, slip, obs_noise)


def two_rooms(room: int = 5, corridor: int = 3, n_colours: int = 8, seed=0,
              colouring: str = "balanced", slip: float = 0.0, obs_noise: float = 0.0) -> Environment:
    """Two square rooms of ``room`` x ``room`` cells joined at mid-height by a corridor.

    The grid is ``room`` rows by ``2 * room + corridor`` columns; the columns
    between the rooms are walls except for the corridor's row.

    >>> env = two_rooms(5, 3)
    >>> env.n_states, env.start_node   # 2 * 25 room cells + 3 corridor cells
    (53, (4, 0))
    """
    _positive("room", room)
    _positive("corridor", corridor)
    mid = room // 2
    obstacles = [(r, c) for r in range(room) for c in range(room, room + corridor) if r != mid]
    env = gridworld(room, 2 * room + corridor, n_colours=n_colours, seed=seed, colouring=colouring,
                    obstacles=obstacles)
    env.graph.graph["name"] = "two rooms"
    return _noisy(env, slip, obs_noise)


def _paper_grid(n_colours: int = 10, seed=0, colouring: str = "balanced", slip: float = 0.0,
                obs_noise: float = 0.0) -> Environment:
    return gridworld(10, 10, n_colours=n_colours, seed=seed, colouring=colouring, slip=slip, obs_noise=obs_noise)


def _cscg_room(n_colours: int = 4, seed=0, colouring: str = "balanced", slip: float = 0.0,
               obs_noise: float = 0.0) -> Environment:
    return gridworld(6, 8, n_colours=n_colours, seed=seed, colouring=colouring, slip=slip, obs_noise=obs_noise)


_BUILDERS = {
    "paper-grid": _paper_grid,
    "maze": maze,
    "torus": torus,
    "two-rooms": two_rooms,
    "aliased-loop": cycle_world,
    "cscg-room": _cscg_room,
}

WORLDS = tuple(_BUILDERS)
"""Names :func:`world` knows."""


def world(name: str, seed=0, **kw) -> Environment:
    """The gallery world called ``name`` (one of :data:`WORLDS`), coloured with ``seed``.

    Extra keyword arguments go to the world's builder (``n_colours``,
    ``colouring``, ``slip`` and ``obs_noise`` for all of them; sizes for
    ``torus``, ``two-rooms`` and ``aliased-loop``).

    >>> env = world("cscg-room", seed=1)
    >>> env.n_states, env.n_obs
    (48, 4)
    >>> world("torus", rows=3, cols=3, n_colours=9).n_states
    9
    >>> world("maze", slip=0.05, obs_noise=0.05)
    Environment(n_states=51, n_actions=4, n_obs=8, start=(8, 0), stochastic moves, obs_noise=0.05)
    >>> world("labyrinth")
    Traceback (most recent call last):
    ...
    ValueError: unknown world 'labyrinth'; choose one of: paper-grid, maze, torus, two-rooms, aliased-loop, cscg-room
    """
    if not isinstance(name, str) or name not in _BUILDERS:
        raise ValueError(f"unknown world {name!r}; choose one of: {', '.join(WORLDS)}")
    builder = _BUILDERS[name]
    allowed = [p for p in inspect.signature(builder).parameters if p != "seed"]
    unknown = sorted(set(kw) - set(allowed))
    if unknown:
        raise TypeError(f"world {name!r} takes no option {unknown[0]!r}; its options: {', '.join(allowed)}")
    return builder(seed=seed, **kw)
