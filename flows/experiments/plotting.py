"""Shared matplotlib helpers: one figure style for every example (Agg backend, no display)."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

__all__ = ["PANEL_SIZE", "annotate_vline", "colors", "figure", "log_time_axis"]

#: Default (width, height) in inches of one panel.
PANEL_SIZE = (4.0, 3.0)


def figure(
    nrows: int = 1, ncols: int = 1, *, width: float | None = None, height: float | None = None, **kw: Any
) -> tuple[Figure, Any]:
    """Create ``(fig, axes)`` with constrained layout and ``PANEL_SIZE`` per panel.

    ``width``/``height`` (inches) override the total size; other keywords go to
    :func:`matplotlib.pyplot.subplots` (e.g. ``sharex=True``, ``squeeze=False``).
    """
    for arg, value in (("nrows", nrows), ("ncols", ncols)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg} must be a positive int, got {value!r}")
    figsize = (
        width if width is not None else PANEL_SIZE[0] * ncols,
        height if height is not None else PANEL_SIZE[1] * nrows,
    )
    kw.setdefault("layout", "constrained")
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, **kw)
    for ax in np.atleast_1d(axes).ravel():
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.tick_params(labelsize=8)
    return fig, axes


def log_time_axis(ax: Axes, label: str = "t") -> Axes:
    """Put the x axis on a log scale and label it; returns ``ax``."""
    ax.set_xscale("log")
    ax.set_xlabel(label)
    return ax


def colors(n: int, cmap: str | None = None) -> list:
    """``n`` distinguishable RGBA colours: ``tab10`` for up to 10, else samples of ``viridis``."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if cmap is None and n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    cm = plt.get_cmap(cmap or "viridis")
    return [cm(x) for x in np.linspace(0.0, 0.9, n)]


def annotate_vline(ax: Axes, x: float, label: str, **kw: Any) -> Line2D:
    """Dashed vertical line at ``x`` with a small rotated ``label`` at the top; returns the line."""
    kw = {"color": "0.35", "linestyle": "--", "linewidth": 1.0, **kw}
    line = ax.axvline(x, **kw)
    ax.annotate(
        label,
        xy=(x, 0.98),
        xycoords=("data", "axes fraction"),
        rotation=90,
        ha="right",
        va="top",
        fontsize=8,
        color=kw["color"],
    )
    return line
