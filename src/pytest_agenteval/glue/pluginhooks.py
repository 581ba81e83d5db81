"""Calling our `firstresult` hooks per path, and naming the plugin that answered.

pytest calls its own per-path hooks (`pytest_collect_file`, ...) through a node's hook proxy,
so a conftest.py applies only below its folder. Ours are asked about a dataset, not a node, so
they are called the same way here for the dataset's folder: a conftest of one dataset does not
supply graders or agents to another. The answer comes with the plugin that gave it, so a bad
one can be blamed on its conftest or plugin.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..core.errors import display_path


def hook_at(config: pytest.Config, name: str, path: Path) -> Any:
    """Hook `name` with only the conftest.py files that apply at `path` (those in its folder
    and above it), as pytest's `Session.gethookproxy` would give, and every other plugin.

    Decided from where each conftest lies, not from which pytest loaded for `path` (pytest
    loads a folder's conftest only when it collects the folder: an xdist controller, which
    collects nothing, still sees the conftests above its datasets)."""
    hook = getattr(config.pluginmanager.hook, name)
    folder = resolved_folder(path)
    elsewhere = [
        impl.plugin
        for impl in hook.get_hookimpls()
        if (place := conftest_folder(impl.plugin)) is not None and not folder.is_relative_to(place)
    ]
    return config.pluginmanager.subset_hook_caller(name, elsewhere) if elsewhere else hook


@cache
def resolved_folder(path: Path) -> Path:
    """The folder `path` is or lies in, symbolic links resolved (asked per grader built)."""
    return (path if path.is_dir() else path.parent).resolve()


@cache
def conftest_folder(plugin: object) -> Path | None:
    """The folder of a conftest.py plugin, resolved (None for any other plugin)."""
    if not isinstance(plugin, ModuleType):
        return None
    file = getattr(plugin, "__file__", None)
    path = Path(file) if file else None
    return resolved_folder(path) if path is not None and path.name == "conftest.py" else None


def first_answer(config: pytest.Config, name: str, path: Path, /, **kwargs: Any) -> tuple[Any, str]:
    """Call the `firstresult` hook `name` at `path`: its answer, and who gave it (a conftest's
    path or a plugin's name; `a plugin` when a hook wrapper took part and so cannot be told).

    Without wrappers this is pluggy's own firstresult call: the implementations in call order
    (tryfirst first, then the last registered), the first answer that is not None wins."""
    hook = hook_at(config, name, path)
    impls = hook.get_hookimpls()
    if any(impl.hookwrapper or impl.wrapper for impl in impls):
        return hook(**kwargs), "a plugin"
    for impl in reversed(impls):
        answer = impl.function(*[kwargs[arg] for arg in impl.argnames])
        if answer is not None:
            return answer, plugin_label(impl.plugin, impl.plugin_name)
    return None, ""


def plugin_label(plugin: object, name: str) -> str:
    """How an error names a plugin: `conftest.py at <path>`, or `plugin '<name>'`."""
    folder = conftest_folder(plugin)
    if folder is not None:
        return f"conftest {display_path(getattr(plugin, '__file__', None) or name)}"
    return f"plugin {name!r}"
