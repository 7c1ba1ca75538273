"""Every hookspec is documented in docs/plugins.md with its exact signature."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from sparseloom.core import hookspecs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _hookspecs():
    return [
        (name, fn)
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("sparseloom_")
    ]


def _signature_text(name: str, fn) -> str:
    signature = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in signature.parameters.values())
    return f"{name}({params}) -> {signature.return_annotation}"


def test_there_are_registration_and_lifecycle_hooks():
    names = {name for name, _ in _hookspecs()}
    assert {f"sparseloom_register_{k}" for k in (
        "backends", "compressors", "estimators", "policies", "workloads")} <= names
    assert len(names) >= 8


@pytest.mark.parametrize(("name", "fn"), _hookspecs())
def test_hook_is_documented_with_exact_signature(name, fn):
    assert f"`{_signature_text(name, fn)}`" in DOCS.read_text()
    assert fn.__doc__ and "Called:" in fn.__doc__ and "Implemented by:" in fn.__doc__
