"""What every figure of the project shares: pyplot without a display, and one way to save."""

from __future__ import annotations

from pathlib import Path

PYPLOT_BACKEND = "Agg"  # files only: scripts run on machines without a display


def pyplot():
    """`matplotlib.pyplot` on the file-only backend (imported on first use: plotting is optional)."""
    import matplotlib

    matplotlib.use(PYPLOT_BACKEND)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 120, tight: bool = True) -> Path:
    """Lay out (`tight_layout`, unless the figure placed its axes itself), write and close
    `fig`; returns the path written."""
    path = Path(path)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
