"""Resolve user references `module:function` and `path/to/file.py:function` to callables.

A reference that does not resolve says what was tried and, when something is close, what the
user may have meant: a module beside it, a file in that folder, a function in that module.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .errors import did_you_mean, display_path

_cache: dict[tuple[str, Path], Callable[..., Any]] = {}
_failed: dict[tuple[str, Path], tuple[str, str | None]] = {}
"""References that did not resolve, so a bad one is not imported again for every use."""
_added: list[str] = []
"""Folders this session put on sys.path (a dataset's root, a reference's base)."""
USER_MODULES = "agenteval_user_"
"""The prefix of the names files loaded by path are given in sys.modules."""


def on_path(folder: Path) -> None:
    """Put `folder` on sys.path (at its end) for this session, unless it is there already."""
    entry = str(folder)
    if entry not in sys.path:
        sys.path.append(entry)
        _added.append(entry)


def forget() -> None:
    """The session is over: forget what its references resolved to, take the folders it put
    on sys.path off it, and drop the modules imported from them or loaded by path, so a
    later session in this process (pytest run again from code, an IDE) imports its own
    datasets' modules afresh, even one of the same name."""
    _cache.clear()
    _failed.clear()
    folders = tuple(os.path.join(entry, "") for entry in _added)
    for entry in _added:
        while entry in sys.path:
            sys.path.remove(entry)
    _added.clear()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if name.startswith(USER_MODULES) or (folders and file.startswith(folders)):
            del sys.modules[name]


class UnresolvedReference(LookupError):
    """A reference that does not resolve; the message says what was tried, `hint` what is
    close to it (or None)."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


def resolve_callable(ref: str, base: Path) -> Callable[..., Any]:
    """The callable `ref` names; file paths are relative to `base`, modules import normally
    (with `base` on sys.path). Importing runs the module's top level, once per process."""
    key = (ref, base)
    found = _cache.get(key)
    if found is not None:
        return found
    failed = _failed.get(key)
    if failed is not None:
        raise UnresolvedReference(*failed)
    try:
        found = _cache[key] = _resolve(ref, base)
    except UnresolvedReference as exc:
        _failed[key] = (exc.problem, exc.hint)
        raise
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
            hint = did_you_mean(part, _public_callables(obj)) or _defines(obj)
            raise UnresolvedReference(f"{where!r} has no attribute {name!r}", hint) from None
    if not callable(obj):
        raise UnresolvedReference(f"{ref!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _is_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def _import(name: str, base: Path) -> Any:
    on_path(base)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if name == missing or name.startswith(missing + "."):
            searched = f"searched {display_path(base)} and sys.path"
            raise UnresolvedReference(
                f"no module named {missing!r}", _near_module(missing, base) or searched
            ) from None
        raise UnresolvedReference(_import_failure(name, exc)) from None
    except Exception as exc:
        raise UnresolvedReference(_import_failure(name, exc)) from None
    own = base / f"{name}.py"
    if "." not in name and own.is_file() and not _is_module_of(module, own):
        # Another folder's module of this name came first (two datasets' `agent.py`): importing
        # by name would silently give that one, so this folder's file is loaded by its path.
        return _load_file(own.name, base)
    return module


def _is_module_of(module: Any, path: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve() == path.resolve()


def _load_file(where: str, base: Path) -> Any:
    path = (base / where).resolve()
    if not path.is_file():
        siblings = path.parent.glob("*.py") if path.parent.is_dir() else ()
        hint = did_you_mean(where, (str(Path(where).with_name(p.name)) for p in siblings))
        raise UnresolvedReference(f"file {where!r} not found (looked for {path})", hint)
    if path.suffix != ".py":
        raise UnresolvedReference(
            f"{where!r} is not a Python file (it is {path})",
            "a reference is `module:function` or `path/to/file.py:function` (a .py file, "
            "relative to the dataset root)",
        )
    name = f"{USER_MODULES}{abs(hash(str(path))):x}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # a .py file importlib still cannot load
        raise UnresolvedReference(f"{where!r} cannot be loaded as a Python module ({path})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise UnresolvedReference(_import_failure(where, exc)) from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_failure(name: str, exc: BaseException) -> str:
    """`importing 'agent' failed at agent.py:3: ModuleNotFoundError: ...`: the module exists
    but its top level raised; where it raised is the user's line to look at."""
    at = _raised_at(exc)
    return f"importing {name!r} failed{at}: {type(exc).__name__}: {exc}"


def _raised_at(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {display_path(exc.filename)}:{exc.lineno}"
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
    ]
    frames = [f for f in frames if f.filename != __file__]
    return f" at {display_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def _near_module(missing: str, base: Path) -> str | None:
    """A did-you-mean among the modules where `missing` was looked for: its package's
    submodules, else the dataset folder's modules, else every top-level module."""
    parent, _, leaf = missing.rpartition(".")
    if parent:
        try:
            paths = importlib.import_module(parent).__path__
        except (ImportError, AttributeError):
            return None
        return did_you_mean(missing, (f"{parent}.{m.name}" for m in pkgutil.iter_modules(paths)))
    local = [m.name for m in pkgutil.iter_modules([str(base)])]
    return did_you_mean(leaf, local) or did_you_mean(leaf, _top_level_modules())


def _top_level_modules() -> Iterable[str]:
    return {m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)


def _public_callables(obj: Any) -> list[str]:
    """The public callables of a module (those it defines) or of a class."""
    names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))]
    own = getattr(obj, "__name__", None)
    if isinstance(obj, type(sys)):
        names = [n for n in names if getattr(getattr(obj, n), "__module__", None) == own]
    return names


def _defines(obj: Any) -> str | None:
    """What a module (or class) offers instead, when nothing is close to the name asked for."""
    names = _public_callables(obj)
    if not names:
        return None
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"it defines {shown}"
