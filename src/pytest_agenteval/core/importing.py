"""Resolve user references `module:function` and `path/to/file.py:function` to callables."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_cache: dict[tuple[str, Path], Callable[..., Any]] = {}


class UnresolvedReference(LookupError):
    """A reference that does not resolve; the message says what was tried."""


def resolve_callable(ref: str, base: Path) -> Callable[..., Any]:
    """The callable `ref` names; file paths are relative to `base`, modules import normally."""
    key = (ref, base)
    found = _cache.get(key)
    if found is None:
        found = _cache[key] = _resolve(ref, base)
    return found


def _resolve(ref: str, base: Path) -> Callable[..., Any]:
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name:
        raise UnresolvedReference(f"{ref!r} is not of the form module:function or file.py:function")
    module = _load_file(where, base) if _is_path(where) else _import(where, base)
    obj: Any = module
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnresolvedReference(f"{where!r} has no attribute {name!r}") from None
    if not callable(obj):
        raise UnresolvedReference(f"{ref!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _is_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def _import(name: str, base: Path) -> Any:
    if str(base) not in sys.path:
        sys.path.append(str(base))
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise UnresolvedReference(
            f"cannot import module {name!r}: {exc} (searched {base} too)"
        ) from exc


def _load_file(where: str, base: Path) -> Any:
    path = (base / where).resolve()
    if not path.is_file():
        raise UnresolvedReference(f"file {where!r} not found (looked for {path})")
    name = f"agenteval_user_{abs(hash(str(path))):x}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
