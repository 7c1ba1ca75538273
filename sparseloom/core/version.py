"""sparseloom's version, in a module of its own so that every layer can read it.

``sparseloom.__version__`` re-exports it; a module inside the package imports it from here,
since importing ``sparseloom`` itself would import its whole Python API (``sparseloom.api``)
and close an import cycle through every stage. ``pyproject.toml`` reads it from here too.
"""

__version__ = "0.1.0"
