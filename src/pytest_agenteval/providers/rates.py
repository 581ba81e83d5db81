"""A provider's `requests_per_minute` and `tokens_per_minute`, held by all its calls together.

Each limit is a token bucket that refills at the limit's rate and holds at most one second's
worth (so any minute sees at most the limit and one second's burst more). A request takes one
from the requests bucket and its reservation from the tokens bucket: the bytes of its body
(an upper bound of its input tokens) plus its `max_tokens`; when the answer says what it used,
the bucket is settled to that (`settle`). A reservation larger than the bucket passes once the
bucket is full and leaves it in debt, so no request waits forever. With a run folder the
buckets live in one small file per provider beside the gate's, read and written under flock,
so every xdist worker draws from the same ones; without one they are this process's.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .seam import Route

_STATE = struct.Struct("<ddd")
"""A provider's buckets: requests left, tokens left, when they were last refilled."""
MIN_WAIT = 0.002


@dataclass
class Buckets:
    """The two buckets of one provider at time `at` (pure: the file or the process holds it)."""

    requests: float
    tokens: float
    at: float

    def refill(self, now: float, rpm: int | None, tpm: int | None) -> None:
        elapsed = max(0.0, now - self.at)
        if rpm is not None:
            self.requests = min(_burst(rpm), self.requests + elapsed * rpm / 60)
        if tpm is not None:
            self.tokens = min(_burst(tpm), self.tokens + elapsed * tpm / 60)
        self.at = now

    def take(self, need: int, rpm: int | None, tpm: int | None) -> float:
        """Take one request and `need` tokens when both are there (0.0), else the seconds
        until they will be (nothing taken)."""
        wait = 0.0
        if rpm is not None and self.requests < 1:
            wait = (1 - self.requests) * 60 / rpm
        if tpm is not None:
            enough = min(float(need), _burst(tpm))  # a larger one waits for a full bucket
            if self.tokens < enough:
                wait = max(wait, (enough - self.tokens) * 60 / tpm)
        if wait > 0:
            return wait
        if rpm is not None:
            self.requests -= 1
        if tpm is not None:
            self.tokens -= need
        return 0.0

    def settle(self, reserved: int, used: int, tpm: int) -> float:
        """Tokens reserved and not used return to the bucket, tokens used beyond the
        reservation are taken too (no wait: 0.0)."""
        self.tokens = min(_burst(tpm), self.tokens + reserved - used)
        return 0.0


def _burst(per_minute: int) -> float:
    """What a bucket holds: one second's worth, at least one request's."""
    return max(1.0, per_minute / 60)


class Rates:
    """The per-minute limits of every provider, shared through `folder` (None: this process)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._local: dict[str, Buckets] = {}
        self._lock = threading.Lock()

    @staticmethod
    def limited(route: Route) -> bool:
        limits = route.limits
        return limits.requests_per_minute is not None or limits.tokens_per_minute is not None

    async def admit(self, route: Route, tokens: int) -> None:
        """Wait until the provider may start a request reserving `tokens`, and take them."""
        if not self.limited(route):
            return
        while True:
            wait = self._change(route, lambda b, r, t: b.take(tokens, r, t))
            if wait <= 0:
                return
            await asyncio.sleep(max(MIN_WAIT, wait))

    def settle(self, route: Route, reserved: int, used: int) -> None:
        """The request used `used` tokens where it reserved `reserved`: the bucket counts
        what it used."""
        tpm = route.limits.tokens_per_minute
        if tpm is None or used == reserved:
            return
        self._change(route, lambda b, r, t: b.settle(reserved, used, tpm))

    def _change(self, route: Route, change: _Change) -> float:
        rpm, tpm = route.limits.requests_per_minute, route.limits.tokens_per_minute
        now = time.time()  # the wall clock: the same in every worker
        if self.folder is None:
            with self._lock:
                found = self._local.get(route.label)
                if found is None:
                    found = self._local[route.label] = _full(rpm, tpm, now)
                found.refill(now, rpm, tpm)
                return change(found, rpm, tpm)
        return self._shared(route, change, now)

    def _shared(self, route: Route, change: _Change, now: float) -> float:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        rpm, tpm = route.limits.requests_per_minute, route.limits.tokens_per_minute
        digest = hashlib.sha256(route.label.encode()).hexdigest()[:16]
        path = self.folder / f"{route.name[:40]}-{digest}.rate"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.pread(fd, _STATE.size, 0)
            buckets = Buckets(*_STATE.unpack(data)) if len(data) == _STATE.size else None
            buckets = buckets or _full(rpm, tpm, now)
            buckets.refill(now, rpm, tpm)
            wait = change(buckets, rpm, tpm)
            os.pwrite(fd, _STATE.pack(buckets.requests, buckets.tokens, buckets.at), 0)
            return wait
        finally:
            os.close(fd)  # releases the lock


def _full(rpm: int | None, tpm: int | None, now: float) -> Buckets:
    return Buckets(_burst(rpm or 60), _burst(tpm or 60), now)


if TYPE_CHECKING:
    from collections.abc import Callable

    _Change = Callable[[Buckets, int | None, int | None], float]

_rates = Rates()


def current() -> Rates:
    """The process's limits (the run's, once the runtime set a folder)."""
    return _rates


def use_rates(rates: Rates | None) -> None:
    """Every provider call from now on draws from `rates` (None: this process's own)."""
    global _rates
    _rates = Rates() if rates is None else rates
