"""Validated task specs of unchanged task files, so that re-runs skip parsing YAML.

Like pytest's own bytecode cache, a file counts as unchanged while its size and modification
time (ns) are. Only specs are kept; defaults, workspaces and graders are derived afresh.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pydantic

CACHE_VERSION = 1
Entries = list[tuple[Any, int, tuple[Any, ...]]]
"""Per task of a file: (TaskSpec, line, location in the file)."""


def _header() -> tuple[Any, ...]:
    from .. import __version__

    return (CACHE_VERSION, __version__, pydantic.VERSION, sys.version_info[:2])


class SpecCache:
    """A pickle of {path: (size, mtime_ns, entries)}; loaded once, saved when it grew."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, tuple[int, int, Entries]] = {}
        self._dirty = False
        if path is not None:
            with contextlib.suppress(
                OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError
            ):
                header, entries = pickle.loads(path.read_bytes())
                if header == _header():
                    self._entries = entries

    def get(self, file: Path) -> Entries | None:
        found = self._entries.get(str(file))
        if found is None:
            return None
        try:
            stat = os.stat(file)
        except OSError:
            return None
        return found[2] if (stat.st_size, stat.st_mtime_ns) == found[:2] else None

    def put(self, file: Path, entries: Entries) -> None:
        try:
            stat = os.stat(file)
        except OSError:
            return
        self._entries[str(file)] = (stat.st_size, stat.st_mtime_ns, entries)
        self._dirty = True

    def save(self) -> None:
        """Write the cache atomically (xdist workers may race: the last complete one wins).

        Called when collection is done; the entries are dropped then, as collected tasks hold
        their own specs and nothing is collected again."""
        if self.path is not None and self._dirty:
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            with contextlib.suppress(OSError):
                tmp.write_bytes(pickle.dumps((_header(), self._entries), pickle.HIGHEST_PROTOCOL))
                os.replace(tmp, self.path)
        self._entries = {}
        self._dirty = False
