"""A lean HTTP/1.1 client over asyncio streams: JSON POSTs and GETs with keep-alive reuse.

Why not a library: the floor of a model call's CPU is a bare asyncio client (0.1 ms a request
on the issue's bench, httpx 0.8 ms, the openai SDK 1.6 ms), and a provider call needs only
this much of HTTP: one request at a time per connection, `Content-Length`, chunked or
close-delimited replies, TLS from the standard library, the environment's proxy (`proxy.py`).
Connections are kept per event loop (they cannot move between loops) and per origin, and
reused as long as the server keeps them open, so a run with 512 calls in flight opens 512
connections, not thousands.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import select
import ssl
import weakref
from dataclasses import dataclass
from urllib.parse import urlsplit

from . import proxy

MAX_HEADER = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
"""A reply larger than this is refused (a model's answer is far smaller)."""
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = weakref.WeakKeyDictionary()
_tls: ssl.SSLContext | None = None


class HttpError(Exception):
    """No reply could be read: the connection failed, closed early or sent garbage."""


class Unanswered(HttpError):
    """The request was sent, but no reply could be read: the server may have billed it."""


@dataclass(frozen=True, slots=True)
class Response:
    """A whole reply: status, headers with lower-case names, body."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a connection goes."""

    tls: bool
    host: str
    port: int


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Pool:
    """Idle keep-alive connections of one event loop, per origin, and the proxy (if any) each
    origin is reached through, from the environment as the pool was made."""

    def __init__(self) -> None:
        self.idle: dict[Origin, list[Connection]] = {}
        self.opened = 0
        """Connections opened so far (the bench reports it)."""
        self.pid = os.getpid()
        self.proxies = proxy.from_environment()
        self.routes: dict[Origin, proxy.Proxy | None] = {}

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> Response:
        """Send one request and read its whole reply. A kept connection the server closed
        meanwhile is dropped before anything is written to it; once the request is written, a
        lost connection is an HttpError, never a second send (the server may have acted on,
        and billed, the first): the caller's retry policy decides."""
        origin, target = _split(url)
        via = self._route(origin)
        if via is not None and not origin.tls:  # a forward proxy takes absolute-form targets
            target = f"http://{authority(origin)}{target}"
            headers = {**via.headers, **headers}
        head = _head(method, target, origin, headers, body)
        conn = await self._send(origin, via, head + body if body else head)
        try:
            response, keep = await _reply(conn[0])
        except HttpError as exc:
            _close(conn)
            raise Unanswered(str(exc)) from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            _close(conn)
            what = f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)
            raise Unanswered(
                f"the connection was lost after the request was sent ({what})"
            ) from None
        except BaseException:
            _close(conn)  # cancelled mid-reply: the connection's state is unknown
            raise
        if keep:
            self.idle.setdefault(origin, []).append(conn)
        else:
            _close(conn)
        return response

    async def _send(self, origin: Origin, via: proxy.Proxy | None, data: bytes) -> Connection:
        """A connection `data` was written to: a kept one still open, else a new one."""
        idle = self.idle.get(origin)
        while idle:
            conn = idle.pop()
            if _quiet(conn):
                conn[1].write(data)
                if not conn[1].is_closing():
                    return conn
            _close(conn)  # closed, or its write failed at once: nothing of `data` was sent
        conn = await self._open(origin, via)
        conn[1].write(data)
        return conn

    def _route(self, origin: Origin) -> proxy.Proxy | None:
        try:
            return self.routes[origin]
        except KeyError:
            pass
        try:
            found = proxy.choose(self.proxies, origin.tls, origin.host, origin.port)
        except proxy.ProxyError as exc:
            raise HttpError(str(exc)) from None
        self.routes[origin] = found
        return found

    async def _open(self, origin: Origin, via: proxy.Proxy | None) -> Connection:
        tls = _tls_context() if origin.tls else None
        if via is not None:
            target = authority(origin, port=True)
            try:
                conn = await proxy.connect(via, target, origin.host, tls, MAX_HEADER)
            except proxy.ProxyError as exc:
                raise HttpError(str(exc)) from None
        else:
            try:
                conn = await asyncio.open_connection(
                    origin.host, origin.port, ssl=tls, limit=MAX_HEADER
                )
            except OSError as exc:
                raise HttpError(
                    f"cannot connect to {authority(origin, port=True)}: {exc}"
                ) from None
        self.opened += 1
        return conn

    def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                _close(conn)
        self.idle.clear()


def pool() -> Pool:
    """The running loop's pool (a forked child starts its own)."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None or found.pid != os.getpid():
        found = _pools[loop] = Pool()
    return found


def forget() -> None:
    """The session is over: its idle connections are closed."""
    for found in list(_pools.values()):
        found.close()
    _pools.clear()


def _tls_context() -> ssl.SSLContext:
    global _tls
    if _tls is None:
        _tls = ssl.create_default_context()
    return _tls


@functools.lru_cache(maxsize=64)  # a provider's URL, parsed once
def _split(url: str) -> tuple[Origin, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"not an http(s) URL: {url!r}")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError:
        raise HttpError(f"not a port in the URL: {url!r}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(tls, parts.hostname, port), target


def authority(origin: Origin, *, port: bool = False) -> str:
    """`host[:port]` as a Host header or a CONNECT names it: an IPv6 address in brackets, the
    port left out when it is the scheme's own (unless `port`)."""
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    if port or origin.port != (443 if origin.tls else 80):
        return f"{host}:{origin.port}"
    return host


def _head(
    method: str, target: str, origin: Origin, headers: dict[str, str], body: bytes | None
) -> bytes:
    lines = [
        f"{method} {target} HTTP/1.1",
        f"host: {authority(origin)}",
        "accept-encoding: identity",
    ]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _quiet(conn: Connection) -> bool:
    """Whether a kept connection may carry a request: open, and nothing came on it since its
    last reply. A server's close (or a parting 408) the event loop has not read yet makes its
    socket readable; a request written then would be lost, maybe after the server read it."""
    reader, writer = conn
    if reader.at_eof() or writer.is_closing():
        return False
    sock = writer.get_extra_info("socket")
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return not poller.poll(0)


async def _reply(reader: asyncio.StreamReader) -> tuple[Response, bool]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError("the reply's headers are too long") from None
    status, headers, keep = _parse_head(raw)
    if "chunked" in headers.get("transfer-encoding", ""):
        data = await _chunked(reader)
    elif "content-length" in headers:
        size = _int(headers["content-length"])
        if size > MAX_BODY:
            raise HttpError(f"a reply of {size} bytes is too large")
        data = await reader.readexactly(size)
    elif status in (204, 304):
        data = b""
    else:
        data, keep = await _to_eof(reader), False
    return Response(status, headers, data), keep


def _parse_head(raw: bytes) -> tuple[int, dict[str, str], bool]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise HttpError(f"not an HTTP reply: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = connection != "close" and (parts[0] != "HTTP/1.0" or connection == "keep-alive")
    return _int(parts[1]), headers, keep


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    data = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        size = _int(line.split(b";", 1)[0].strip().decode("latin-1"), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(data)
        if len(data) + size > MAX_BODY:
            raise HttpError("the reply is too large")
        data += await reader.readexactly(size)
        await reader.readexactly(2)


async def _to_eof(reader: asyncio.StreamReader) -> bytes:
    """A body that ends where the server closes the connection, bounded by MAX_BODY."""
    data = bytearray()
    while chunk := await reader.read(64 * 1024):
        if len(data) + len(chunk) > MAX_BODY:
            raise HttpError("the reply is too large")
        data += chunk
    return bytes(data)


def _int(text: str, base: int = 10) -> int:
    try:
        return int(text, base)
    except ValueError:
        raise HttpError(f"not a number in the reply's head: {text[:40]!r}") from None


def _close(conn: Connection) -> None:
    with contextlib.suppress(Exception):  # a broken transport is already gone
        conn[1].close()
