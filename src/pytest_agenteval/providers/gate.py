"""The limits all of a provider's calls share: how many in flight, adaptive on 429.

A `Gate` admits a provider's requests. The in-process gate counts the requests in flight per
provider (every loop and thread of the process together); the run's gate (set by the runtime
when a run folder is known, `use_gate`) shares the count across xdist workers through flock'd
slot files. Either adapts: a 429, or a server saying `x-ratelimit-remaining-requests: 0`,
halves the provider's current limit (at least 1); each success regrows it by one over the
limit, up to `max_in_flight` (additive increase, multiplicative decrease).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .seam import Route

POLL = 0.002
"""Seconds between looks for room under a provider's limit."""


class Gate(Protocol):
    """Admits a provider's requests and learns from how they went."""

    def hold(self, route: Route, size: int) -> contextlib.AbstractAsyncContextManager[None]: ...

    def rate_limited(self, route: Route) -> None: ...

    def succeeded(self, route: Route, headers: Mapping[str, str]) -> None: ...


@dataclass
class Window:
    """One provider's adaptive limit and what is in flight under it."""

    ceiling: int
    limit: float
    in_flight: int = 0
    rate_limited: int = 0


class LocalGate:
    """Limits counted in this process (no run folder, or limits that need none shared)."""

    def __init__(self) -> None:
        self.windows: dict[str, Window] = {}
        self._lock = threading.Lock()

    def _window(self, route: Route) -> Window | None:
        ceiling = route.limits.max_in_flight
        if ceiling is None:
            return None
        found = self.windows.get(route.label)
        if found is None:
            found = self.windows[route.label] = Window(ceiling, float(ceiling))
        return found

    @contextlib.asynccontextmanager
    async def hold(self, route: Route, size: int) -> AsyncIterator[None]:
        with self._lock:
            window = self._window(route)
        if window is None:
            yield
            return
        while not self._enter(window):
            await asyncio.sleep(POLL)
        try:
            yield
        finally:
            with self._lock:
                window.in_flight -= 1

    def _enter(self, window: Window) -> bool:
        with self._lock:
            if window.in_flight < int(window.limit):
                window.in_flight += 1
                return True
            return False

    def rate_limited(self, route: Route) -> None:
        with self._lock:
            window = self._window(route)
            if window is not None:
                window.rate_limited += 1
                window.limit = max(1.0, window.limit / 2)

    def succeeded(self, route: Route, headers: Mapping[str, str]) -> None:
        if headers.get("x-ratelimit-remaining-requests") == "0":
            self.rate_limited(route)
            return
        with self._lock:
            window = self._window(route)
            if window is not None and window.limit < window.ceiling:
                window.limit = min(float(window.ceiling), window.limit + 1 / window.limit)

    def status(self) -> dict[str, dict[str, float | int]]:
        """Each provider's current limit and 429 count (for progress and the summary)."""
        with self._lock:
            return {
                label: {
                    "limit": int(w.limit),
                    "max_in_flight": w.ceiling,
                    "rate_limited": w.rate_limited,
                }
                for label, w in self.windows.items()
            }


_gate: Gate = LocalGate()


def local_gate() -> Gate:
    """The process's gate (the run's, once the runtime set one)."""
    return _gate


def use_gate(gate: Gate) -> None:
    """Every provider made from now on admits its calls through `gate`."""
    global _gate
    _gate = gate
