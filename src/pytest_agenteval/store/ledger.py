"""The run's ledger of money: every model call any session of the run paid for, and what the
calls in flight hold.

`spend.json` in the run folder, replaced atomically under the flock of `spend.lock`, holds
what was *settled* (`cost`, `tokens`, `calls`: paid, or possibly paid) and, per process (its
pid and start time), the reservations it *holds* for its calls in flight. Nothing resets it:
a resumed run adds to it, so a cap is the run's whole budget and summary.json's `spend` is
what the run paid in all. A process that died holding reservations (kill -9) may have been
billed for those calls: whoever finds them (a session's start, a call waiting for room, a
report) settles them at their reservation, never forgets them. A run folder of an older
version holds a 16-byte `spend` file (cost and tokens, reservations mixed in): its totals
are taken as settled.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import StoreError, os_failure
from ..core.pids import start_time
from .files import FILE_MODE
from .locks import locked

LEDGER_FILE = "spend.json"
LOCK_FILE = "spend.lock"
OLD_FILE = "spend"
"""The ledger of versions before 0.x: `<dq` cost and tokens, reservations mixed in."""
LEDGER_SCHEMA = "agenteval.spend/1"
LEDGER_LIMIT = 1 << 20
"""Bytes a ledger may have (a few hundred per process ever alive in the run)."""
_OLD = struct.Struct("<dq")


@dataclass(frozen=True, slots=True)
class Paid:
    """Cost, tokens and model calls."""

    cost: float = 0.0
    tokens: int = 0
    calls: int = 0

    def __add__(self, other: Paid) -> Paid:
        return Paid(self.cost + other.cost, self.tokens + other.tokens, self.calls + other.calls)

    def __sub__(self, other: Paid) -> Paid:
        return Paid(self.cost - other.cost, self.tokens - other.tokens, self.calls - other.calls)

    def to_json(self) -> dict[str, float | int]:
        return {"cost": round(self.cost, 10), "tokens": self.tokens, "calls": self.calls}


@dataclass(slots=True)
class Book:
    """The ledger's content: what was settled, and what each process holds."""

    settled: Paid = Paid()
    held: dict[str, Paid] = field(default_factory=dict)
    """Reservations by holder (`pid start-time`)."""

    def holding(self) -> Paid:
        """Every reservation held now, by any process."""
        total = Paid()
        for paid in self.held.values():
            total += paid
        return total

    def hold(self, who: str, paid: Paid) -> None:
        now = self.held.get(who, Paid()) + paid
        if now.calls <= 0 and abs(now.cost) < 1e-12 and now.tokens <= 0:
            self.held.pop(who, None)
        else:
            self.held[who] = now

    def sweep(self) -> bool:
        """Settle the reservations of holders that are gone at their reservation (the
        server may have billed their calls); whether there were any."""
        dead = [who for who in self.held if not _alive(who)]
        for who in dead:
            self.settled += self.held.pop(who)
        return bool(dead)


class Ledger:
    """The run's ledger in `folder` (shared by every process of the run); without a folder,
    this process's own."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._here = Book()
        self._lock = threading.Lock()
        self._me: tuple[int, str] | None = None

    def holder(self) -> str:
        """This process's name in the ledger (a forked child is another holder)."""
        pid = os.getpid()
        if self._me is None or self._me[0] != pid:
            self._me = (pid, f"{pid} {start_time(pid) or '?'}")
        return self._me[1]

    def add(self, paid: Paid) -> None:
        """An answer's spend the agent reported (no reservation was held for it)."""
        with self.book() as book:
            book.settled += paid

    def hold(self, paid: Paid) -> None:
        """A call is about to be sent: hold its worst case."""
        with self.book() as book:
            book.hold(self.holder(), paid)

    def settle(self, reserved: Paid, actual: Paid) -> None:
        """A call ended: its reservation is given back and what it cost is settled."""
        with self.book() as book:
            book.hold(self.holder(), Paid() - reserved)
            book.settled += actual

    def read(self) -> Book:
        """The ledger now (a reader never sees a half-written one)."""
        with self._lock:
            if self._path() is None:
                return Book(self._here.settled, dict(self._here.held))
        return self._load()

    def sweep(self) -> None:
        """Settle what gone processes held (a session's start, its end)."""
        with self.book():
            pass  # `book` sweeps whenever it is taken with holders it does not know alive

    def paid(self) -> Paid:
        """Everything the run paid or may have been billed for: settled, and every
        reservation still held (a call in flight, or of a process that died)."""
        book = self.read()
        return book.settled + book.holding()

    @contextlib.contextmanager
    def book(self, sweep: bool = True) -> Iterator[Book]:
        """The ledger for one change, under its lock (`sweep`: gone holders settled first
        when any other holder is in it)."""
        with self._lock:
            path = self._path()
            if path is None:
                yield self._here
                return
            with locked(path.with_name(LOCK_FILE)):
                book = self._load()
                was = (book.settled, dict(book.held)) if path.exists() else None
                if sweep and any(who != self.holder() for who in book.held):
                    book.sweep()
                yield book
                if (book.settled, book.held) != was:  # a call waiting for room writes nothing
                    self._store(book)

    def _path(self) -> Path | None:
        folder = self.folder
        return folder / LEDGER_FILE if folder is not None and folder.is_dir() else None

    def _load(self) -> Book:
        path = self._path()
        if path is None:
            return Book()
        try:
            data = _read(path)
        except FileNotFoundError:
            return Book(_old(path.with_name(OLD_FILE)))
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path}: the run's spend ledger cannot be read ({exc})") from None
        return _book(path, data)

    def _store(self, book: Book) -> None:
        path = self._path()
        assert path is not None
        data = {
            "schema": LEDGER_SCHEMA,
            **book.settled.to_json(),
            "held": {who: paid.to_json() for who, paid in book.held.items()},
        }
        tmp = path.with_name(f".{LEDGER_FILE}.tmp")  # one writer at a time: the lock's holder
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        try:
            fd = os.open(tmp, flags, FILE_MODE)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(data))
            os.replace(tmp, path)
        except OSError as exc:
            raise StoreError(os_failure("write", path, exc)) from None


def _read(path: Path) -> object:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        return json.loads(f.read(LEDGER_LIMIT + 1))


def _book(path: Path, data: object) -> Book:
    """A ledger's content, checked: a newer format is refused, damage is said."""
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("agenteval.spend/"):
        raise StoreError(f"{path}: not a spend ledger (no schema {LEDGER_SCHEMA!r})")
    if data["schema"] != LEDGER_SCHEMA:
        raise StoreError(
            f"{path}: the spend ledger is {data['schema']!r}, newer than this version reads "
            f"({LEDGER_SCHEMA!r}); upgrade pytest-agenteval to resume this run"
        )
    try:
        held = {str(who): _paid(paid) for who, paid in data["held"].items()}
        return Book(_paid(data), held)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"{path}: the spend ledger is damaged ({exc!r})") from None


def _paid(data: dict[str, object]) -> Paid:
    cost, tokens, calls = data["cost"], data["tokens"], data["calls"]
    if not isinstance(cost, float | int) or not isinstance(tokens, int):
        raise ValueError("cost and tokens must be numbers")
    if not isinstance(calls, int):
        raise ValueError("calls must be a number")
    return Paid(float(cost), tokens, calls)


def _old(path: Path) -> Paid:
    """What an older version's `spend` file counted (taken as settled), else nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return Paid()
    try:
        data = os.pread(fd, _OLD.size, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    if len(data) != _OLD.size:
        return Paid()
    cost, tokens = _OLD.unpack(data)
    return Paid(cost, tokens) if cost >= 0 and tokens >= 0 else Paid()


def _alive(who: str) -> bool:
    """Whether the holder `pid start-time` still runs (a reused pid is another process)."""
    pid, _, started = who.partition(" ")
    try:
        now = start_time(int(pid))
    except ValueError:
        return False
    return now is not None and (now == started or "?" in (now, started))


def run_spend(folder: Path) -> dict[str, float | int] | None:
    """summary.json's `spend`: everything the run in `folder` paid for (a reservation still
    held counted at its worst); None for a run stored without a ledger. An unreadable
    ledger raises a StoreError."""
    if not (folder / LEDGER_FILE).exists() and not (folder / OLD_FILE).exists():
        return None
    return Ledger(folder).paid().to_json()
