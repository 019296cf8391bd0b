"""Pictures of environments and models (matplotlib is imported inside each function)."""

from __future__ import annotations

import numpy as np

from .environment import Environment

__all__ = ["grid_shape", "plot_grid_values", "plot_environment"]


def grid_shape(env: Environment) -> tuple[int, int] | None:
    """``(rows, cols)`` if every node label is a ``(row, col)`` pair, else ``None``.

    >>> from hmmmerge import gridworld
    >>> grid_shape(gridworld(3, 4))
    (3, 4)
    """
    labels = env.nodes
    if not all(isinstance(x, tuple) and len(x) == 2 and all(isinstance(v, (int, np.integer)) for v in x) for x in labels):
        return None
    rows = 1 + max(r for r, _ in labels)
    cols = 1 + max(c for _, c in labels)
    return rows, cols


#: grids with more cells than this get no per-cell text (it is unreadable and slow to draw)
MAX_ANNOTATED_CELLS = 2500


def plot_grid_values(env: Environment, values, ax=None, cmap="viridis", title=None, annotate="obs", colorbar=True):
    """Draw per-state ``values`` on the grid as a heat map, with each cell's colour number written in it.

    Obstacle cells are left blank.  Returns the matplotlib Axes.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> env = gridworld(3, 3, n_colours=3)
    >>> ax = plot_grid_values(env, env.obs)
    """
    import matplotlib.pyplot as plt

    shape = grid_shape(env)
    if shape is None:
        raise ValueError("plot_grid_values needs (row, col) node labels; use plot_environment for other graphs")
    values = np.asarray(values, dtype=float)
    if values.shape != (env.n_states,):
        raise ValueError(f"values must have shape ({env.n_states},), got {values.shape}")
    grid = np.full(shape, np.nan)
    for i, (r, c) in enumerate(env.nodes):
        grid[r, c] = values[i]
    if ax is None:
        scale = 0.45 * min(1.0, 60 / max(shape))  # at most about 27 x 27 inches
        _, ax = plt.subplots(figsize=(scale * shape[1] + 1.5, scale * shape[0] + 0.8))
    im = ax.imshow(grid, cmap=cmap)
    if annotate == "obs" and env.n_states <= MAX_ANNOTATED_CELLS:  # larger grids: the colours say it, no text
        for i, (r, c) in enumerate(env.nodes):
            ax.text(c, r, str(env.obs[i]), ha="center", va="center", fontsize=7, color="white",
                    path_effects=_outline())
    if env.start is not None:
        r, c = env.start_node
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_environment(env: Environment, ax=None, title=None):
    """Draw any environment: the colour map on a grid, else a networkx drawing coloured by observation.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from hmmmerge import gridworld
    >>> ax = plot_environment(gridworld(3, 3, n_colours=3))
    """
    import matplotlib.pyplot as plt

    if grid_shape(env) is not None:
        return plot_grid_values(env, env.obs, ax=ax, cmap="tab10" if env.n_obs <= 10 else "tab20",
                                title=title, colorbar=False)
    import networkx as nx

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    simple = nx.DiGraph(env.graph)
    simple.remove_edges_from(nx.selfloop_edges(simple))
    pos = nx.spring_layout(simple, seed=0)
    nx.draw_networkx(simple, pos, ax=ax, node_color=[env.obs[env.index[n]] for n in simple.nodes],
                     cmap="tab10", labels={n: str(env.obs[env.index[n]]) for n in simple.nodes},
                     node_size=220, font_size=7, arrows=False)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax


def _outline():
    import matplotlib.patheffects as pe

    return [pe.withStroke(linewidth=1.5, foreground="black")]
