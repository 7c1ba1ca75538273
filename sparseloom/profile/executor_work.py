"""The units of profiling work that every executor runs, in this process or in a Ray worker.

Kept apart from the executors so that both the in-process and the Ray executor (and the Ray
workers, which import only what they run) use exactly the same code: a fidelity computed
anywhere is the same number.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sparseloom.core.errors import ProfileError
from sparseloom.profile.features import relative_error

if TYPE_CHECKING:
    from sparseloom.zoo.evaluate import SubgraphRunner
    from sparseloom.zoo.types import Zoo

#: What every position reads (or the dense subgraph writes), position by position.
Activations = Sequence[Mapping[str, np.ndarray]]


def variant_fidelity(zoo: Zoo, position: int, variants: Iterable[int],
                     activations: Mapping[str, np.ndarray], dense: Mapping[str, np.ndarray],
                     runner: SubgraphRunner) -> list[float]:
    """The relative output error of each of ``variants`` at ``position`` against the dense
    subgraph's outputs ``dense``, all fed ``activations`` (the mean over output tensors)."""
    errors = []
    for variant in variants:
        out = runner.run(zoo.subgraph_path(position, variant), activations)
        errors.append(float(np.mean([relative_error(out[k], dense[k]) for k in dense])))
    return errors


def missing_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Those of ``paths`` that are not files here."""
    return sorted({str(p) for p in paths if not Path(p).is_file()})


def require_zoo_files(paths: Iterable[str | os.PathLike[str]], where: str) -> None:
    """Raise :class:`ProfileError` naming the first zoo file ``where`` cannot read, and the fix:
    a worker on another node sees only the files of a filesystem shared with the driver."""
    missing = missing_files(paths)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ProfileError(
            f"{where} on host {socket.gethostname()} cannot find zoo file {missing[0]}{more}; "
            f"every Ray node must see the sparseloom cache at the same path: put it on a "
            f"shared filesystem and set SPARSELOOM_CACHE_DIR to it on the driver and on every "
            f"node, or profile with --executor local")
