"""Our factory hooks per path, called by pluggy, and naming the plugin that gave a bad answer.

pytest calls its own per-path hooks (`pytest_collect_file`, ...) through a node's hook proxy,
so a conftest.py applies only below its folder. Ours are asked about a dataset, not a node, so
they are called the same way here for the dataset's folder: a conftest of one dataset does not
supply graders or agents to another. pluggy makes every call (so `--debug` traces it and hook
wrappers wrap it); an answer of the wrong shape is blamed on the conftest or plugin that gave
it (`answered_by`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pluggy import HookCaller

from ..core.errors import display_path


def hook_at(config: pytest.Config, name: str, path: Path) -> HookCaller:
    """Hook `name` with only the conftest.py files that apply at `path` (those in its folder
    and above it), as pytest's `Session.gethookproxy` would give, and every other plugin.

    Decided from where each conftest lies, not from which pytest loaded for `path` (pytest
    loads a folder's conftest only when it collects the folder: an xdist controller, which
    collects nothing, still sees the conftests above its datasets)."""
    hook: HookCaller = getattr(config.pluginmanager.hook, name)
    folder = resolved_folder(path)
    elsewhere = [
        impl.plugin
        for impl in hook.get_hookimpls()
        if (place := conftest_folder(impl.plugin)) is not None and not folder.is_relative_to(place)
    ]
    return config.pluginmanager.subset_hook_caller(name, elsewhere) if elsewhere else hook


def forget() -> None:
    """Forget the folders looked up (an in-process session after this one sees its own)."""
    resolved_folder.cache_clear()
    conftest_folder.cache_clear()


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


def answered_by(
    config: pytest.Config, hook: HookCaller, asked: dict[str, Any], good: Callable[[Any], bool]
) -> str:
    """Who gave the bad answer a call of `hook` with `asked` returned: a conftest's path or a
    plugin's name. pluggy says who implements a hook, not who answered, so on this error path
    each implementation is asked again alone (through pluggy, in its call order: tryfirst
    first, then the last registered) until one answers; a factory hook builds and starts
    nothing, so asking twice is harmless. A good answer alone means a hook wrapper changed it."""
    manager = config.pluginmanager
    implementations = hook.get_hookimpls()
    every = [impl.plugin for impl in getattr(manager.hook, hook.name).get_hookimpls()]
    wrappers = [impl for impl in implementations if impl.wrapper or impl.hookwrapper]
    for impl in reversed(implementations):
        if impl in wrappers:
            continue
        alone = manager.subset_hook_caller(hook.name, [p for p in every if p is not impl.plugin])
        answer = alone(**asked)
        if answer is None:
            continue
        if not good(answer):
            return plugin_label(impl.plugin, impl.plugin_name)
        break
    labels = ", ".join(plugin_label(w.plugin, w.plugin_name) for w in reversed(wrappers))
    return f"a hook wrapper ({labels})" if labels else "a plugin"


def plugin_label(plugin: object, name: str) -> str:
    """How an error names a plugin: `conftest.py at <path>`, or `plugin '<name>'`."""
    folder = conftest_folder(plugin)
    if folder is not None:
        return f"conftest {display_path(getattr(plugin, '__file__', None) or name)}"
    return f"plugin {name!r}"
