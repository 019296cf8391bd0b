"""Pictures of environments and models (matplotlib is imported inside each function).

Worlds whose nodes carry positions are drawn on their grid, whatever file
format they came from.  A node's position comes from its label or, failing
that, its attributes:

* a pair ``(row, col)`` of integers (hmmmerge's grids; row 0 at the top), or
  attributes ``row`` and ``col``;
* a triple ``(x, y, direction)`` of integers (MiniGrid's agent state: ``x``
  the column, ``y`` the row, direction 0 right, 1 down, 2 left, 3 up), or
  attributes ``x``, ``y`` and ``direction``; each state is drawn as a triangle
  pointing its way, a quarter cell from the cell's centre;
* the same written as text (``"(5, 0)"``, as GraphML stores tuples).

Other worlds are drawn as networkx graphs (spring layout).
"""

from __future__ import annotations

import numpy as np

from .environment import Environment, _parse_label

__all__ = ["node_positions", "grid_shape", "plot_grid_values", "plot_environment", "plot_learned_map", "plot_map",
           "plot_path", "plot_place_fields"]

DIRECTION_OFFSETS = {0: (0.0, 0.25), 1: (0.25, 0.0), 2: (0.0, -0.25), 3: (-0.25, 0.0)}
"""MiniGrid direction -> (d_row, d_col) drawing offset: 0 right, 1 down, 2 left, 3 up."""

_MARKERS = {0: ">", 1: "v", 2: "<", 3: "^"}
MAX_ANNOTATED_STATES = 400
"""Above this many states, grid plots write no per-cell text (it would be unreadable and slow)."""


def _as_int(x):
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    return None


def _cell(node, attrs):
    """``(row, col, direction or None)`` for one node, or ``None``."""
    label = _parse_label(node) if isinstance(node, str) else node
    if isinstance(label, tuple) and len(label) in (2, 3):
        values = [_as_int(v) for v in label]
        if None not in values:
            if len(values) == 2:
                return values[0], values[1], None
            x, y, d = values
            return (y, x, d) if d in _MARKERS else None
    if "row" in attrs and "col" in attrs:
        r, c = _as_int(attrs["row"]), _as_int(attrs["col"])
        return None if r is None or c is None else (r, c, None)
    if "x" in attrs and "y" in attrs and "direction" in attrs:
        x, y, d = (_as_int(attrs[k]) for k in ("x", "y", "direction"))
        return None if None in (x, y) or d not in _MARKERS else (y, x, d)
    return None


def node_positions(env: Environment):
    """``(cells, directions)``: int arrays (S, 2) of ``(row, col)`` and (S,) of directions (-1: none), or ``None``.

    ``None`` unless every node has a position (see the module docstring) of the same kind.

    >>> from hmmmerge import gridworld
    >>> cells, dirs = node_positions(gridworld(2, 3))
    >>> cells[:2].tolist(), int(dirs.max())
    ([[0, 0], [0, 1]], -1)
    >>> env = Environment.from_arrays([[1, 0]], [0, 1], nodes=[(4, 1, 0), (4, 1, 2)])  # (x, y, direction)
    >>> [c.tolist() for c in node_positions(env)]
    [[[1, 4], [1, 4]], [0, 2]]
    """
    cells = np.empty((env.n_states, 2), dtype=np.int64)
    dirs = np.empty(env.n_states, dtype=np.int64)
    for i, node in enumerate(env.nodes):
        cell = _cell(node, env.graph.nodes[node])
        if cell is None or cell[0] < 0 or cell[1] < 0:
            return None
        cells[i] = cell[:2]
        dirs[i] = -1 if cell[2] is None else cell[2]
    if (dirs < 0).any() and (dirs >= 0).any():
        return None  # a mix of cells with and without directions
    return cells, dirs


def grid_shape(env: Environment) -> tuple[int, int] | None:
    """``(rows, cols)`` of the grid the nodes' positions lie on, else ``None``.

    >>> from hmmmerge import gridworld
    >>> grid_shape(gridworld(3, 4))
    (3, 4)
    """
    pos = node_positions(env)
    if pos is None:
        return None
    cells = pos[0]
    return int(cells[:, 0].max()) + 1, int(cells[:, 1].max()) + 1


def plot_grid_values(env: Environment, values, ax=None, cmap="viridis", title=None, annotate="obs", colorbar=True):
    """Draw per-state ``values`` on the grid: a heat map of cells, or triangles for (x, y, direction) states.

    Cells that are not states (walls) are left blank; the start is outlined in red.  With at most
    :data:`MAX_ANNOTATED_STATES` cell states, each cell shows its observation (``annotate="obs"``).
    Returns the matplotlib Axes.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> env = gridworld(3, 3, n_colours=3)
    >>> ax = plot_grid_values(env, env.obs)
    """
    import matplotlib.pyplot as plt

    pos = node_positions(env)
    if pos is None:
        raise ValueError("plot_grid_values needs node positions ((row, col) or (x, y, direction)); "
                         "use plot_environment for other graphs")
    cells, dirs = pos
    shape = grid_shape(env)
    values = np.asarray(values, dtype=float)
    if values.shape != (env.n_states,):
        raise ValueError(f"values must have shape ({env.n_states},), got {values.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(min(0.45 * shape[1], 12) + 1.5, min(0.45 * shape[0], 12) + 0.8))
    finite = values[np.isfinite(values)]
    vmin, vmax = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    if dirs[0] < 0:
        grid = np.full(shape, np.nan)
        grid[cells[:, 0], cells[:, 1]] = values
        im = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax)
        if annotate == "obs" and env.n_states <= MAX_ANNOTATED_STATES:
            for i, (r, c) in enumerate(cells.tolist()):
                ax.text(c, r, str(env.obs[i]), ha="center", va="center", fontsize=7, color="white",
                        path_effects=_outline())
        r, c = cells[env.start]
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
    else:
        occupied = np.zeros(shape, dtype=bool)
        occupied[cells[:, 0], cells[:, 1]] = True
        ax.imshow(np.where(occupied, np.nan, 0.0), cmap="Greys", vmin=-1, vmax=1)  # walls grey, cells blank
        size = _cell_points(ax, shape)
        im = None
        for d, marker in _MARKERS.items():
            sel = np.flatnonzero(dirs == d)
            if sel.size == 0:
                continue
            dr, dc = DIRECTION_OFFSETS[d]
            im = ax.scatter(cells[sel, 1] + dc, cells[sel, 0] + dr, c=values[sel], cmap=cmap, vmin=vmin, vmax=vmax,
                            marker=marker, s=(0.3 * size) ** 2, linewidths=0)
        dr, dc = DIRECTION_OFFSETS[int(dirs[env.start])]
        r, c = cells[env.start]
        ax.scatter([c + dc], [r + dr], marker=_MARKERS[int(dirs[env.start])], s=(0.45 * size) ** 2, facecolors="none",
                   edgecolors="red", linewidths=1.2)
        ax.set_xlim(-0.5, shape[1] - 0.5)
        ax.set_ylim(shape[0] - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title)
    if colorbar and im is not None:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_environment(env: Environment, ax=None, title=None):
    """Draw any environment: the observation map on its grid if nodes have positions, else a networkx drawing.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> ax = plot_environment(gridworld(3, 3, n_colours=3))
    """
    import matplotlib.pyplot as plt

    cmap = "tab10" if env.n_obs <= 10 else "tab20" if env.n_obs <= 20 else "nipy_spectral"
    if grid_shape(env) is not None:
        return plot_grid_values(env, env.obs, ax=ax, cmap=cmap, title=title, colorbar=False)
    import networkx as nx

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    simple = nx.DiGraph(env.graph)
    simple.remove_edges_from(nx.selfloop_edges(simple))
    pos = nx.spring_layout(simple, seed=0)
    labels = {n: str(env.obs[env.index[n]]) for n in simple.nodes} if env.n_states <= MAX_ANNOTATED_STATES else {}
    nx.draw_networkx(simple, pos, ax=ax, node_color=[env.obs[env.index[n]] for n in simple.nodes],
                     cmap=cmap, labels=labels, node_size=220 if labels else 30, font_size=7, arrows=False)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax


def plot_learned_map(env: Environment, membership, transitions=None, ax=None, title=None, min_weight=0.2):
    """A learned model's states drawn on the grid: each at the mean position of the true states it stands for.

    ``membership`` is (K, S): how much model state ``k`` stands for true state
    ``s`` (e.g. visit counts of its members); each model state is a dot at the
    weighted mean cell, its size its total weight, its colour its purity (the
    largest share of one true state).  ``transitions`` (K x K, optional, e.g.
    the sum over actions of a level-2 ``T``) adds an arrow for every
    transition of probability >= ``min_weight``.  The world's observation map
    is drawn faintly underneath.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> env = gridworld(2, 2, n_colours=2)
    >>> ax = plot_learned_map(env, np.eye(4), transitions=np.roll(np.eye(4), 1, axis=1))
    """
    import matplotlib.pyplot as plt

    pos = node_positions(env)
    if pos is None:
        raise ValueError("plot_learned_map needs node positions ((row, col) or (x, y, direction))")
    cells, dirs = pos
    m = np.asarray(membership, dtype=float)
    if m.ndim != 2 or m.shape[1] != env.n_states:
        raise ValueError(f"membership must have shape (K, {env.n_states}), got {m.shape}")
    if (m < 0).any() or not np.isfinite(m).all():
        raise ValueError("membership must be finite and non-negative")
    xy = cells[:, ::-1].astype(float)  # (col, row) for drawing
    if dirs[0] >= 0:
        xy += np.array([DIRECTION_OFFSETS[d][::-1] for d in dirs.tolist()])
    weight = m.sum(axis=1)
    keep = weight > 0
    centre = np.zeros((m.shape[0], 2))
    centre[keep] = (m[keep] @ xy) / weight[keep, None]
    purity = np.zeros(m.shape[0])
    purity[keep] = m[keep].max(axis=1) / weight[keep]
    if ax is None:
        shape = grid_shape(env)
        _, ax = plt.subplots(figsize=(min(0.45 * shape[1], 12) + 1.5, min(0.45 * shape[0], 12) + 0.8))
    plot_grid_values(env, env.obs, ax=ax, cmap="Pastel1" if env.n_obs <= 9 else "tab20", annotate=None,
                     colorbar=False)
    for layer in ax.collections + ax.images:  # the world underneath, faint
        layer.set_alpha(0.3)
    if transitions is not None:
        t = np.asarray(transitions, dtype=float)
        if t.shape != (m.shape[0], m.shape[0]):
            raise ValueError(f"transitions must have shape ({m.shape[0]}, {m.shape[0]}), got {t.shape}")
        rows = t.sum(axis=1, keepdims=True)
        p = np.divide(t, rows, out=np.zeros_like(t), where=rows > 0)
        for a, b in zip(*np.nonzero((p >= min_weight) & keep[:, None] & keep[None, :])):
            if a != b:
                ax.annotate("", xy=centre[b], xytext=centre[a],
                            arrowprops=dict(arrowstyle="->", color="0.3", lw=0.6, alpha=0.7))
    sizes = 12 + 120 * weight[keep] / weight.max()
    dots = ax.scatter(centre[keep, 0], centre[keep, 1], s=sizes, c=purity[keep], cmap="RdYlGn", vmin=0, vmax=1,
                      edgecolors="black", linewidths=0.4, zorder=3)
    ax.figure.colorbar(dots, ax=ax, fraction=0.046, pad=0.04, label="purity")
    if title:
        ax.set_title(title)
    return ax


def _summed_transitions(model) -> np.ndarray:
    """``sum_a T[a]`` of an :class:`~hmmmerge.hmm.ActionHMM`, dense (for drawing)."""
    if model.is_sparse:
        total = model.T[0].copy()
        for m in model.T[1:]:
            total = total + m
        return total.toarray()
    return np.asarray(model.T).sum(axis=0)


def plot_map(model, env: Environment | None = None, correspondence=None, ax=None, title=None, min_weight=0.2):
    """A learned map (an :class:`~hmmmerge.hmm.ActionHMM`) drawn as a graph.

    With a world whose nodes have positions and a
    :class:`~hmmmerge.planning.Correspondence`, each learned state sits where
    the true states it stands for are (:func:`plot_learned_map` with the
    correspondence's counts); otherwise the graph of transitions (probability
    >= ``min_weight`` under some action) is laid out spectrally, each state
    coloured by its most likely observation.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> ax = plot_map(gridworld(3, 3, n_colours=3).to_hmm())
    """
    import matplotlib.pyplot as plt
    import networkx as nx

    total = _summed_transitions(model)
    if env is not None and correspondence is not None and node_positions(env) is not None:
        return plot_learned_map(env, correspondence.counts, transitions=total, ax=ax, title=title,
                                min_weight=min_weight)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    rows = total.sum(axis=1, keepdims=True)
    p = np.divide(total, rows, out=np.zeros_like(total), where=rows > 0)
    g = nx.Graph()
    g.add_nodes_from(range(model.n_states))
    g.add_edges_from((int(a), int(b)) for a, b in zip(*np.nonzero(p >= min_weight)) if a != b)
    pos = nx.spectral_layout(g) if g.number_of_edges() else nx.circular_layout(g)
    colour = model.E.argmax(axis=1)
    cmap = "tab10" if model.n_obs <= 10 else "tab20" if model.n_obs <= 20 else "nipy_spectral"
    nx.draw_networkx(g, pos, ax=ax, node_color=colour, cmap=cmap, vmin=0, vmax=max(model.n_obs - 1, 1),
                     with_labels=False, node_size=40 if model.n_states > 100 else 120, width=0.5, edge_color="0.5")
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax


def plot_path(env: Environment, path, ax=None, title=None, colour="black", label=None):
    """A path of true states (indices, e.g. ``NavigationResult.paths[i]``) drawn on the world's map.

    The path is a line from cell to cell, its start a circle and its end a star
    (the world needs node positions, see :func:`node_positions`).  Call again
    with the same ``ax`` to draw a second path.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> ax = plot_path(gridworld(3, 3, n_colours=3), [6, 7, 4, 1])
    """
    import matplotlib.pyplot as plt

    path = np.asarray(path, dtype=np.int64)
    if path.ndim != 1 or not len(path) or path.min() < 0 or path.max() >= env.n_states:
        raise ValueError(f"path must be a non-empty list of state indices in 0..{env.n_states - 1}")
    pos = node_positions(env)
    if pos is None:
        raise ValueError("plot_path needs node positions ((row, col) or (x, y, direction)); "
                         "draw other worlds with plot_environment")
    if ax is None:
        ax = plot_environment(env, title=title)
    elif title:
        ax.set_title(title)
    cells, dirs = pos
    xy = cells[:, ::-1].astype(float)
    if dirs[0] >= 0:
        xy += np.array([DIRECTION_OFFSETS[d][::-1] for d in dirs.tolist()])
    line = xy[path]
    ax.plot(line[:, 0], line[:, 1], "-", color=colour, lw=2, alpha=0.8, label=label, zorder=4)
    ax.plot(*line[0], "o", color=colour, ms=9, zorder=5)
    ax.plot(*line[-1], "*", color=colour, ms=14, zorder=5)
    if label:
        ax.legend(loc="upper right", fontsize=8)
    return ax


def plot_place_fields(env: Environment, counts, states, ncols: int = 4, title=None):
    """Place fields: for each learned state of ``states``, where in the world it is active.

    ``counts`` is (H, S), e.g. :attr:`hmmmerge.planning.Correspondence.counts`
    (posterior mass of learned state ``h`` on true state ``s``); each panel
    shows one row, normalised.  Returns the Figure.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> fig = plot_place_fields(gridworld(2, 2, n_colours=2), np.eye(4), [0, 3])
    """
    import matplotlib.pyplot as plt

    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2 or counts.shape[1] != env.n_states:
        raise ValueError(f"counts must have shape (H, {env.n_states}), got {counts.shape}")
    states = [int(h) for h in states]
    if not states or min(states) < 0 or max(states) >= counts.shape[0]:
        raise ValueError(f"states must be learned states in 0..{counts.shape[0] - 1}")
    ncols = min(ncols, len(states))
    nrows = -(-len(states) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3 * ncols, 3 * nrows), squeeze=False)
    for ax, h in zip(axes.ravel(), states):
        row = counts[h]
        field = row / row.sum() if row.sum() > 0 else row
        plot_grid_values(env, field, ax=ax, cmap="magma", annotate=None, colorbar=False, title=f"state {h}")
    for ax in axes.ravel()[len(states):]:
        ax.set_axis_off()
    if title:
        fig.suptitle(title)
    return fig


def _cell_points(ax, shape) -> float:
    """The side of one grid cell in points, for marker sizes."""
    box = ax.get_window_extent()
    return min(box.width / shape[1], box.height / shape[0]) * 72.0 / ax.figure.dpi


def _outline():
    import matplotlib.patheffects as pe

    return [pe.withStroke(linewidth=1.5, foreground="black")]
