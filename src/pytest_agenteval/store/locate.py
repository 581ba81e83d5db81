"""Where a project keeps its pytest cache dir (and so its runs), found the way pytest finds it.

pytest's rootdir is the nearest folder, from where it is started upwards, holding a pytest
config file; its `cache_dir` setting (default `.pytest_cache`) is relative to the rootdir. The
`agenteval` command uses this to find the runs without being started in the rootdir itself.
"""

from __future__ import annotations

import configparser
import os
import tomllib
from pathlib import Path
from typing import Any

DEFAULT_CACHE_DIR = ".pytest_cache"
CONFIG_FILES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
"""The config files pytest looks for in each folder, first one wins."""


def find_rootdir(start: Path) -> Path:
    """The nearest folder at or above `start` with pytest settings, as pytest picks its rootdir.

    Falls back to the nearest pyproject.toml without pytest settings, then to `start`.
    """
    start = start.absolute()
    fallback = None
    for folder in (start, *start.parents):
        for name in CONFIG_FILES:
            path = folder / name
            if not path.is_file():
                continue
            if name == "pyproject.toml" and fallback is None:
                fallback = folder
            if pytest_settings(path) is not None:
                return folder
    return fallback or start


def cache_dir(rootdir: Path) -> Path:
    """The cache dir pytest uses when started in `rootdir`: its `cache_dir` setting, resolved."""
    settings: dict[str, Any] = {}
    for name in CONFIG_FILES:
        found = pytest_settings(rootdir / name) if (rootdir / name).is_file() else None
        if found is not None:
            settings = found
            break
    value = settings.get("cache_dir")
    return resolve_cache_dir(value if isinstance(value, str) else DEFAULT_CACHE_DIR, rootdir)


def resolve_cache_dir(value: str, rootdir: Path) -> Path:
    """As pytest resolves `cache_dir`: `~` and `$VARS` expanded, relative to the rootdir."""
    return Path(os.path.abspath(rootdir / os.path.expandvars(os.path.expanduser(value))))


def pytest_settings(path: Path) -> dict[str, Any] | None:
    """The pytest section of one config file; None when it has none (or cannot be read)."""
    try:
        if path.suffix == ".toml":
            return _toml_settings(path)
        return _ini_settings(path)
    except (OSError, ValueError, configparser.Error):
        return None


def _toml_settings(path: Path) -> dict[str, Any] | None:
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    if path.name != "pyproject.toml":
        native: dict[str, Any] = document.get("pytest", {})
        return native
    table = document.get("tool", {}).get("pytest")
    if not isinstance(table, dict):
        return None
    return {
        **{k: v for k, v in table.items() if k != "ini_options"},
        **table.get("ini_options", {}),
    }


def _ini_settings(path: Path) -> dict[str, Any] | None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(path.read_text(encoding="utf-8"))
    section = "tool:pytest" if path.name == "setup.cfg" else "pytest"
    if parser.has_section(section):
        return dict(parser[section])
    return {} if path.name in ("pytest.ini", ".pytest.ini") else None
