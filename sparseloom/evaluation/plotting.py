"""What every figure writer shares: pyplot on the Agg backend, and saving a figure as a PNG.

matplotlib is imported when a figure is drawn, never when a module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend: figures go to files, no display is needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path, dpi: int = 110) -> Path:
    """Lay ``figure`` out, write it to ``path`` at ``dpi`` and close it (pyplot keeps every
    figure it made open until then); returns ``path``."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path
