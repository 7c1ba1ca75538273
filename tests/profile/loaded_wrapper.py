"""What the backend doubles of the profile tests share: a loaded model wrapping a real one."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.define
class WrappedLoaded:
    """A real backend's loaded model, passed through (a double adds what it injects)."""

    inner: Any

    @property
    def memory_bytes(self) -> int:
        return int(self.inner.memory_bytes)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.inner.input_names)
