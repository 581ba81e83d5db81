"""The providers' HTTP client against a raw server on 127.0.0.1: keep-alive reuse, a reused
connection the server dropped, and every reply it refuses with an HttpError."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from pytest_agenteval.core.llm import ProviderSpec
from pytest_agenteval.core.trace import Trace
from pytest_agenteval.providers import http, seam
from pytest_agenteval.providers.bound import attempt_llm
from pytest_agenteval.providers.client import ProviderError
from pytest_agenteval.providers.http import HttpError, Response

Reply = Callable[[int, int], bytes | None] | None
"""The bytes to answer request `r` on connection `c` with; None: close without a reply.
A Reply of None: a server that speaks first, as a TLS client does not expect."""
T = TypeVar("T")


def ok(body: bytes = b"{}", *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def served(reply: Reply, run: Callable[[str], Awaitable[T]], drop_after: int = 0) -> T:
    """`run(url)` against a server answering with `reply`, in a fresh event loop; with
    `drop_after`, the server closes each connection after that many replies."""

    async def main() -> T:
        connections = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            conn, count = connections, 0
            connections += 1
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    for line in head.decode().split("\r\n"):
                        if line.lower().startswith("content-length:"):
                            await reader.readexactly(int(line.split(":")[1]))
                    assert reply is not None
                    answer = reply(conn, count)
                    count += 1
                    if answer is None:
                        break
                    writer.write(answer)
                    await writer.drain()
                    if b"connection: close" in answer.lower() or b"HTTP/1.0" in answer[:8]:
                        break
                    if count == drop_after:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(ok())  # plain text where a TLS client waits for its handshake
            await writer.drain()
            writer.close()

        tls = reply is None
        server = await asyncio.start_server(handshake if tls else handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await run(f"http://127.0.0.1:{port}/v1/chat?x=1")
        finally:
            http.forget()
            server.close()

    return asyncio.run(main())


async def post(url: str) -> Response:
    return await http.pool().request("POST", url, {"x-key": "k"}, b'{"a": 1}')


def test_a_request_a_kept_connection_lost_after_it_was_written_is_not_sent_again() -> None:
    """Replies with a length keep the connection for the next request; when the server reads
    a request on a kept connection and drops it without a reply, that is an HttpError and the
    request is not sent again (the server may have acted on it, and billed it)."""
    seen: list[tuple[int, int]] = []

    def reply(conn: int, request: int) -> bytes | None:
        seen.append((conn, request))
        return None if (conn, request) == (0, 2) else ok(b'{"n": %d}' % conn)

    async def three(url: str) -> list[bytes]:
        bodies = [(await post(url)).body for _ in range(2)]
        with pytest.raises(HttpError, match="lost after the request was sent"):
            await post(url)
        return bodies

    assert served(reply, three) == [b'{"n": 0}', b'{"n": 0}']
    assert seen == [(0, 0), (0, 1), (0, 2)]


def test_a_kept_connection_closed_while_the_loop_was_busy_is_dropped_before_writing() -> None:
    """A server that closed a kept connection before the event loop noticed: the next request
    goes on a new connection, written once, not on the closed one."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    closed, seen = threading.Event(), []

    def serve() -> None:
        for n in range(2):
            conn, _ = listener.accept()
            with conn:
                seen.append(read_request(conn))
                conn.sendall(ok(b"%d" % n))
            closed.set()

    async def twice() -> tuple[bytes, bytes, int]:
        url = f"http://127.0.0.1:{port}/v1"
        first = await post(url)
        closed.wait(10)  # blocks the loop: it cannot see the close before the next request
        return first.body, (await post(url)).body, http.pool().opened

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with listener:
        assert asyncio.run(twice()) == (b"0", b"1", 2)
        thread.join(10)
    assert len(seen) == 2


def read_request(conn: socket.socket) -> bytes:
    """One request's head and body from a blocking socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    size = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))[15:])
    while len(body) < size:
        body += conn.recv(65536)
    return head


def test_a_kept_connection_the_server_closed_meanwhile_is_not_reused() -> None:
    """A server that closes an idle kept connection: the next request opens a new one."""

    async def apart(url: str) -> tuple[list[bytes], int]:
        first = await post(url)
        await asyncio.sleep(0.05)  # the server's close arrives meanwhile
        return [first.body, (await post(url)).body], http.pool().opened

    def numbered(conn: int, request: int) -> bytes:
        return ok(b"%d" % conn)

    assert served(numbered, apart, drop_after=1) == ([b"0", b"1"], 2)


def test_a_fresh_connection_that_fails_is_an_error_not_retried() -> None:
    """A new connection the server closes without a reply is an HttpError at once."""
    with pytest.raises(HttpError, match="IncompleteReadError"):
        served(lambda conn, request: None, post)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (b"SMTP ready\r\n\r\n", "not an HTTP reply: 'SMTP ready'"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n", "not a number .*'lots'"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "not a number .*'abc'"),
        (
            f"HTTP/1.1 200 OK\r\ncontent-length: {http.MAX_BODY + 1}\r\n\r\n".encode(),
            "a reply of 67108865 bytes is too large",
        ),
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (http.MAX_HEADER + 10), "headers are too long"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "not a number .*'zz'"),
    ],
    ids=["not-http", "bad-length", "bad-status", "too-large", "long-headers", "bad-chunk"],
)
def test_replies_that_cannot_be_read_are_http_errors(answer: bytes, problem: str) -> None:
    """Garbage, a head that is not numbers where numbers belong, or a reply larger than the
    client takes is an HttpError naming what was wrong."""
    with pytest.raises(HttpError, match=problem):
        served(lambda conn, request: answer, post)


def test_chunked_replies_are_joined_and_trailers_skipped() -> None:
    """A chunked reply is its chunks joined (chunk extensions and trailers ignored); the
    connection is kept."""
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Id: 7\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n"
    )

    async def twice(url: str) -> tuple[Response, Response, int]:
        return await post(url), await post(url), http.pool().opened

    first, second, opened = served(lambda conn, request: chunked, twice)
    assert first.body == second.body == b"hello world"
    assert first.headers["x-id"] == "7" and opened == 1


def test_a_chunked_reply_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunks' total is held to MAX_BODY as they come."""
    monkeypatch.setattr(http, "MAX_BODY", 8)
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld\r\n"
    with pytest.raises(HttpError, match="the reply is too large"):
        served(lambda conn, request: chunked, post)


@pytest.mark.parametrize(
    ("answer", "body", "kept"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (ok(b"bye", "Connection: close"), b"bye", False),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nhi", b"hi", False),
        (b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nhi", b"hi", True),
        (b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nto the end", b"to the end", False),
    ],
    ids=["no-content", "close", "http-1.0", "http-1.0-keep-alive", "until-eof"],
)
def test_what_is_kept_for_the_next_request(answer: bytes, body: bytes, kept: bool) -> None:
    """A reply's length comes from its head or, without one, from the server closing; the
    connection is kept only when the server lets it be."""

    async def once(url: str) -> tuple[Response, int]:
        response = await post(url)
        return response, sum(map(len, http.pool().idle.values()))

    response, idle = served(lambda conn, request: answer, once)
    assert response.body == body and idle == int(kept)


def test_urls_and_servers_that_cannot_be_reached() -> None:
    """Not an http(s) URL, a port nobody listens on, or TLS to a plain server: HttpError
    saying so, before any reply."""

    async def get(url: str) -> Response:
        return await http.pool().request("GET", url, {}, None)

    with pytest.raises(HttpError, match="not an http"):
        asyncio.run(get("ftp://127.0.0.1/x"))
    with pytest.raises(HttpError, match=r"cannot connect to 127\.0\.0\.1:1"):
        asyncio.run(get("http://127.0.0.1:1/"))

    with pytest.raises(HttpError, match=r"cannot connect to 127\.0\.0\.1"):
        served(None, lambda url: get(url.replace("http:", "https:")))


def test_a_request_cancelled_mid_reply_closes_its_connection() -> None:
    """Cancelled while the reply is read: the connection is closed, not kept half-read."""

    async def cancelled(url: str) -> int:
        task = asyncio.ensure_future(post(url))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sum(map(len, http.pool().idle.values()))

    partial = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part"
    assert served(lambda conn, request: partial, cancelled) == 0


def test_a_reply_without_a_length_is_read_to_the_servers_close() -> None:
    """A reply with neither a length nor chunks is everything until the server closes, also
    when it comes in several pieces."""
    body = bytes(range(256)) * 19 + b"x" * 179  # 5,043 bytes

    async def run() -> bytes:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + body[:1000])
            await writer.drain()
            await asyncio.sleep(0.02)  # the client reads the first piece meanwhile
            writer.write(body[1000:])
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return (await http.pool().request("GET", f"http://127.0.0.1:{port}/", {}, None)).body
        finally:
            http.forget()
            server.close()

    assert asyncio.run(run()) == body


def test_an_ipv6_literal_is_reached_and_named_in_brackets() -> None:
    """`http://[::1]:PORT/` connects to ::1 and says `host: [::1]:PORT`."""
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    hosts: list[str] = []

    async def run() -> tuple[Response, int]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            hosts.extend(x[5:].strip() for x in head.split("\r\n") if x.lower().startswith("host:"))
            writer.write(ok(b"six"))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "::1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await http.pool().request("GET", f"http://[::1]:{port}/v1", {}, None), port
        finally:
            http.forget()
            server.close()

    response, port = asyncio.run(run())
    assert response.body == b"six" and hosts == [f"[::1]:{port}"]


@pytest.mark.parametrize("retries", [0, 1])
def test_a_call_lost_after_it_was_sent_is_sent_again_only_by_the_providers_retries(
    monkeypatch: pytest.MonkeyPatch, retries: int
) -> None:
    """A model call on a kept connection the server drops after reading it reaches the
    server once per try the provider's `retries` allow, and fails saying it was lost after
    it was sent."""
    monkeypatch.setenv("LOCAL_KEY", "sk-local-test-key-0123456789")
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}

    def serve() -> None:  # answers the first request, then drops each one it has read
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    while True:
                        seen.append(read_request(conn))
                        if len(seen) > 1:
                            break
                        conn.sendall(ok(json.dumps(answer).encode()))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    spec = {"openai": {"base_url": base, "api_key_env": "LOCAL_KEY", "model": "m1"}}
    providers = {"oa": ProviderSpec.model_validate({**spec, "retries": retries, "backoff": 0})}
    try:
        client = attempt_llm(providers, "oa", Trace())
        assert client.chat([{"role": "user", "content": "x"}]).text == "hi"
        with pytest.raises(ProviderError, match="lost after the request was sent") as lost:
            client.chat([{"role": "user", "content": "y"}])
        assert lost.value.billed  # the server saw it: counted at its reservation under a cap
    finally:
        seam.forget()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        listener.close()
        thread.join(10)
    assert len(seen) == 2 + retries and not thread.is_alive()
