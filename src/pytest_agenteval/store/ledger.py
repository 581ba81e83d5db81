"""The run's ledger of money: every model call any session of the run paid for, and what the
calls in flight hold.

`spend.ledger` in the run folder is a small binary file, changed in place under its own flock
(a model call's hold and settle are each a locked read and one pwrite: ~10 µs of CPU).
Its 64-byte header is the magic `agenteval.spend/2` (the format's version, the 16-byte `spend`
file of earlier versions being the first; a newer one is refused) and the spend settled before
the slots (an older run's); then one 64-byte slot per
process that ever held or paid in the run: its pid and start time, what its calls in flight
*hold* (their worst case) and what it *settled* (`cost`, `tokens`, `calls`: paid, or possibly
paid). Nothing resets it: a resumed run adds to it, so a cap is the run's whole budget and
summary.json's `spend` is what the run paid in all (settled and held). A process that died
holding reservations (kill -9) may have been billed for those calls: a sweep (a session's
start, a call that does not fit under a cap) settles them at their reservation and frees the
slot for another process. A run folder of an older version holds a 16-byte `spend` file (cost
and tokens, reservations mixed in): its totals are taken as settled.

Every write is one pwrite of a 64-byte record at a multiple of 64 (never across a page): a
kill -9 lets the syscall finish or not start, so a record is never torn and a change never
half made (a slot holds its own settled spend, so settling a call changes one record only).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar

from ..core.errors import StoreError, os_failure
from ..core.files import NotRegular, open_fd
from ..core.pids import own_identity, still_runs
from .files import FILE_MODE, not_followed

LEDGER_FILE = "spend.ledger"
OLD_FILE = "spend"
"""The ledger of versions before 0.x: `<dq` cost and tokens, reservations mixed in."""
LEDGER_SCHEMA = "agenteval.spend/2"
_MAGIC = LEDGER_SCHEMA.encode().ljust(24, b"\0")
_HEAD = struct.Struct("<24sdqq16x")
"""The magic (the schema, NUL-padded) and the spend settled before the slots."""
_SLOT = struct.Struct("<qqdqqdqq")
"""A process's pid and start time (-1: not known), its held and its settled spend."""
SLOTS = 4096
"""Processes that may hold spend at once in a run (a gone one's slot is reused once swept)."""
LEDGER_LIMIT = _HEAD.size + SLOTS * _SLOT.size
_OLD = struct.Struct("<dq")
T = TypeVar("T")


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


NOTHING = Paid()


@dataclass(slots=True)
class Book:
    """The ledger's content: what was settled, and what each process holds."""

    settled: Paid = NOTHING
    held: dict[str, Paid] = field(default_factory=dict)
    """Reservations by holder (`pid start-time`)."""

    def holding(self) -> Paid:
        """Every reservation held now, by any process."""
        return sum(self.held.values(), NOTHING)


class _Slot(NamedTuple):
    """A process's slot as stored (a tuple: made for every slot at every change)."""

    pid: int = 0
    """0: free (a gone process's, swept: its settled spend stays counted)."""
    start: int = 0
    cost: float = 0.0
    """What its calls in flight hold: `cost`, `tokens`, `calls`."""
    tokens: int = 0
    calls: int = 0
    paid_cost: float = 0.0
    """What it settled: `paid_cost`, `paid_tokens`, `paid_calls`."""
    paid_tokens: int = 0
    paid_calls: int = 0

    @property
    def held(self) -> Paid:
        return Paid(self.cost, self.tokens, self.calls)

    @property
    def settled(self) -> Paid:
        return Paid(self.paid_cost, self.paid_tokens, self.paid_calls)

    def changed(self, owner: tuple[int, int], held: Paid, settled: Paid) -> _Slot:
        calls = self.calls + held.calls  # nothing held is exactly nothing (no float residue)
        cost, tokens = (self.cost + held.cost, self.tokens + held.tokens) if calls else (0.0, 0)
        return _Slot(
            *owner, cost, tokens, calls, self.paid_cost + settled.cost,
            self.paid_tokens + settled.tokens, self.paid_calls + settled.calls,
        )  # fmt: skip


class Ledger:
    """The run's ledger in `folder` (shared by every process of the run); without a folder,
    this process's own. The file stays open (a forked child opens its own)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._pid = 0
        self._me = (0, 0)
        self._fd: int | None = None
        self._file = Path()
        self._close: weakref.finalize[..., Ledger] | None = None
        self._slot = 0
        self._here: list[_Slot] = []
        """Without a folder: the slots (this process's one)."""

    def add(self, paid: Paid) -> None:
        """An answer's spend the agent reported (no reservation was held for it)."""
        self._change(NOTHING, paid)

    def hold(self, paid: Paid) -> None:
        """A call is about to be sent: hold its worst case."""
        self._change(paid, NOTHING)

    def settle(self, reserved: Paid, actual: Paid) -> None:
        """A call ended: its reservation is given back and what it cost is settled."""
        self._change(NOTHING - reserved, actual)

    def reserve(self, paid: Paid, refuse: Callable[[Book], T | None]) -> T | None:
        """Hold `paid` unless `refuse` says why not on the ledger now (one locked read and
        write, so two processes cannot both take the last room). A refusal is asked again
        once gone holders are settled: the room they hold is not coming back."""
        return self._change(paid, NOTHING, refuse)

    def sweep(self) -> None:
        """Settle what gone processes held, and free their slots (a session's start)."""
        with self._lock, self._locked(fcntl.LOCK_EX) as (_, slots):
            self._sweep(slots, everyone=True)

    def read(self) -> Book:
        """The ledger now (under its lock: a reader never sees a change half made)."""
        with self._lock:
            opened = self._fd is not None and self._pid == os.getpid()
            if not opened and self.folder is not None and self.folder.is_dir():
                return _peek(self.folder)  # read without making the file
            with self._locked(fcntl.LOCK_SH) as (base, slots):
                return _book(base, slots)

    def paid(self) -> Paid:
        """Everything the run paid or may have been billed for: settled, and every
        reservation still held (a call in flight, or of a process that died)."""
        book = self.read()
        return book.settled + book.holding()

    def _change(
        self, held: Paid, settled: Paid, refuse: Callable[[Book], T | None] | None = None
    ) -> T | None:
        with self._lock, self._locked(fcntl.LOCK_EX) as (base, slots):
            why = refuse(_book(base, slots)) if refuse is not None else None
            if why is not None and refuse is not None and self._sweep(slots, everyone=False):
                why = refuse(_book(base, slots))
            if why is None:
                i = self._mine(slots)
                old = slots[i] if i < len(slots) else _Slot()
                self._put(slots, i, old.changed(self._me, held, settled))
            return why

    def _mine(self, slots: list[_Slot]) -> int:
        """This process's slot: remembered, else found, else a free one, else a new one (a
        full ledger frees the slots of gone processes first)."""
        if self._slot < len(slots) and (slots[self._slot].pid, slots[self._slot].start) == self._me:
            return self._slot
        for full in (False, True):
            if full:
                self._sweep(slots, everyone=True)
            ids = [(slot.pid, slot.start) for slot in slots]
            found = [ids.index(i) for i in (self._me, (0, 0)) if i in ids]
            self._slot = found[0] if found else len(slots)
            if self._slot < SLOTS:
                return self._slot
        raise StoreError(f"{self._file}: more than {SLOTS} processes hold spend in this run")

    def _sweep(self, slots: list[_Slot], everyone: bool) -> bool:
        """Settle the reservations of holders that are gone at their reservation (the server
        may have billed their calls) and free their slots (`everyone`: those holding nothing
        too); whether any held something."""
        found = False
        for i, slot in enumerate(slots):
            other = slot.pid and (slot.pid, slot.start) != self._me
            if other and (everyone or slot.calls) and not still_runs(slot.pid, slot.start):
                found = found or slot.held != NOTHING
                self._put(slots, i, _Slot().changed((0, 0), NOTHING, slot.settled + slot.held))
        return found

    def _put(self, slots: list[_Slot], i: int, slot: _Slot) -> None:
        """Write slot `i` (one pwrite of 64 bytes at a multiple of 64: never torn)."""
        if i == len(slots):
            slots.append(slot)
        slots[i] = slot
        if self._fd is None:
            return
        try:
            os.pwrite(self._fd, _SLOT.pack(*slot), _HEAD.size + i * _SLOT.size)
        except OSError as exc:
            raise StoreError(os_failure("write", self._file, exc)) from None

    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[tuple[Paid, list[_Slot]]]:
        """The ledger's header and slots under its flock (`how`) for the block."""
        fd = self._open()
        if fd is None:
            yield NOTHING, self._here
            return
        fcntl.flock(fd, how)
        try:
            yield _load(fd, self._file, write=how == fcntl.LOCK_EX)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int | None:
        """The ledger's descriptor for this process (a forked child's copy shares the
        parent's flock: the child opens its own); None without a run folder."""
        pid = os.getpid()
        if self._fd is not None and self._pid == pid:
            return self._fd
        if self._close is not None:  # a forked child: its copy is closed, the parent's lock stays
            self._close()
            self._close, self._fd = None, None
        if self.folder is None or not self.folder.is_dir():
            self._pid, self._me = pid, (pid, -1)
            return None
        self._file = path = self.folder / LEDGER_FILE
        try:
            self._fd = open_fd(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except NotRegular as exc:
            raise StoreError(not_followed(path, exc.why)) from None
        except OSError as exc:
            raise StoreError(os_failure("open", path, exc)) from None
        self._close = weakref.finalize(self, os.close, self._fd)
        self._me = own_identity()
        self._pid, self._slot = pid, 0
        return self._fd


def _load(fd: int, path: Path, write: bool) -> tuple[Paid, list[_Slot]]:
    """The header's settled spend and the slots; an empty file (just made) gets its header,
    which counts an older version's `spend` file as settled."""
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            base = _old(path.with_name(OLD_FILE))
            if write:
                os.pwrite(fd, _HEAD.pack(_MAGIC, *_fields(base)), 0)
            return base, []
        data = os.pread(fd, min(size, LEDGER_LIMIT + 1), 0)
    except OSError as exc:
        raise StoreError(os_failure("read", path, exc)) from None
    size = len(data)
    if size > LEDGER_LIMIT or (size - _HEAD.size) % _SLOT.size or not data.startswith(_MAGIC):
        raise StoreError(_refused(path, data))
    _, *settled = _HEAD.unpack_from(data)
    slots = list(map(_Slot._make, _SLOT.iter_unpack(data[_HEAD.size :])))
    for spend in (settled, *(slot[2:5] for slot in slots), *(slot[5:] for slot in slots)):
        if not math.isfinite(spend[0]) or spend[1] < 0 or spend[2] < 0:
            raise StoreError(f"{path}: the spend ledger is damaged ({', '.join(map(str, spend))})")
    return Paid(*settled), slots


def _refused(path: Path, data: bytes) -> str:
    """Why a ledger's bytes are not read: another file, a newer format, or damage."""
    schema = data[:24].rstrip(b"\0").decode("ascii", "replace")
    if not schema.startswith("agenteval.spend/"):
        return f"{path}: not a spend ledger (no magic {LEDGER_SCHEMA!r})"
    if schema != LEDGER_SCHEMA:
        return (
            f"{path}: the spend ledger is {schema!r}, newer than this version reads "
            f"({LEDGER_SCHEMA!r}); upgrade pytest-agenteval to resume this run"
        )
    return f"{path}: the spend ledger is damaged ({len(data)} bytes)"


def _peek(folder: Path) -> Book:
    """The ledger in `folder`, read without writing (a report of a run it may not change)."""
    path = folder / LEDGER_FILE
    try:
        fd = open_fd(path, os.O_RDONLY)
    except FileNotFoundError:
        return Book(_old(folder / OLD_FILE))
    except NotRegular as exc:
        raise StoreError(not_followed(path, exc.why)) from None
    except OSError as exc:
        raise StoreError(os_failure("open", path, exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # closing the file unlocks it
        return _book(*_load(fd, path, write=False))
    finally:
        os.close(fd)


def _book(base: Paid, slots: list[_Slot]) -> Book:
    held = {f"{s.pid} {s.start}": s.held for s in slots if s.pid and s.held != NOTHING}
    return Book(sum((s.settled for s in slots), base), held)


def _fields(paid: Paid) -> tuple[float, int, int]:
    return paid.cost, paid.tokens, paid.calls


def _old(path: Path) -> Paid:
    """What an older version's `spend` file counted (taken as settled), else nothing."""
    try:
        fd = open_fd(path)
    except NotRegular as exc:
        raise StoreError(not_followed(path, exc.why)) from None
    except OSError:
        return NOTHING
    try:
        data = os.pread(fd, _OLD.size, 0)
    finally:
        os.close(fd)
    if len(data) != _OLD.size:
        return NOTHING
    cost, tokens = _OLD.unpack(data)
    return Paid(cost, tokens) if cost >= 0 and tokens >= 0 else NOTHING


def run_spend(folder: Path) -> dict[str, float | int] | None:
    """summary.json's `spend`: everything the run in `folder` paid for (a reservation still
    held counted at its worst); None for a run stored without a ledger. An unreadable
    ledger raises a StoreError."""
    if not (folder / LEDGER_FILE).exists() and not (folder / OLD_FILE).exists():
        return None
    book = _peek(folder)
    return (book.settled + book.holding()).to_json()
