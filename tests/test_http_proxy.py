"""The providers' HTTP client through a proxy named in the environment: a real forward proxy
on 127.0.0.1 (absolute-form requests and CONNECT tunnels), NO_PROXY, and proxies that refuse."""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import pytest

from pytest_agenteval.providers import http, proxy
from pytest_agenteval.providers.http import HttpError

T = TypeVar("T")
VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def _no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class ForwardProxy:
    """A forward proxy: `CONNECT host:port` pipes bytes to there; an absolute-form request
    is sent on in origin form. `refuse` answers every request with that status line."""

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.lines: list[str] = []
        """The first line of each request the proxy got."""
        self.auth: list[str | None] = []
        """Each request's Proxy-Authorization."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        first, *fields = head.split("\r\n")
        self.lines.append(first)
        auth = [f.split(":", 1)[1].strip() for f in fields if f.lower().startswith("proxy-auth")]
        self.auth.append(auth[0] if auth else None)
        if self.refuse:
            writer.write(f"{self.refuse}\r\ncontent-length: 0\r\n\r\n".encode())
            writer.close()
            return
        method, target, version = first.split(" ")
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            url = urlsplit(target)
            upstream = await asyncio.open_connection(url.hostname, url.port)
            kept = [f for f in fields if f and not f.lower().startswith("proxy-auth")]
            start = f"{method} {url.path}?{url.query} {version}"
            upstream[1].write(("\r\n".join([start, *kept]) + "\r\n\r\n").encode("latin-1"))
        await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The API: every request gets its own request line back as the body."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":")[1]))
            body = head.split(b"\r\n", 1)[0]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def through(
    forward: ForwardProxy,
    run: Callable[[str, int], Awaitable[T]],
    tls: ssl.SSLContext | None = None,
) -> T:
    """`run(api_url, proxy_port)` with the API (TLS with `tls`) and `forward` on 127.0.0.1."""

    async def main() -> T:
        api = await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=tls)
        relay = await asyncio.start_server(forward.handle, "127.0.0.1", 0)
        scheme = "https" if tls else "http"
        url = f"{scheme}://127.0.0.1:{api.sockets[0].getsockname()[1]}/v1/chat?x=1"
        try:
            return await run(url, relay.sockets[0].getsockname()[1])
        finally:
            http.forget()
            api.close()
            relay.close()

    return asyncio.run(main())


async def post(url: str) -> bytes:
    return (await http.pool().request("POST", url, {"x-key": "k"}, b"{}")).body


def test_an_http_url_goes_to_the_proxy_whole_with_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With HTTP_PROXY, an http request goes to the proxy with its whole URL as the target
    and the proxy URL's (percent-decoded) credentials as Proxy-Authorization."""
    forward = ForwardProxy()

    async def run(url: str, port: int) -> bytes:
        monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{port}")
        return await post(url)

    body = through(forward, run)
    assert body == b"POST /v1/chat?x=1 HTTP/1.1"
    assert (
        forward.lines[0].startswith("POST http://127.0.0.1:") and "/v1/chat?x=1" in forward.lines[0]
    )
    assert forward.auth == ["Basic " + base64.b64encode(b"user:p@ss").decode()]


def test_an_https_url_goes_through_a_connect_tunnel_with_tls_to_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With https_proxy, an https request is a `CONNECT host:port` to the proxy, then TLS with
    the server itself (its certificate checked) inside the tunnel."""
    server, client = _certificates(tmp_path)
    monkeypatch.setattr(http, "_tls", client)
    forward = ForwardProxy()

    async def run(url: str, port: int) -> tuple[bytes, bytes]:
        monkeypatch.setenv("https_proxy", f"127.0.0.1:{port}")
        return await post(url), await post(url)

    assert through(forward, run, tls=server) == (b"POST /v1/chat?x=1 HTTP/1.1",) * 2
    assert len(forward.lines) == 1  # the tunnel is kept for the second request
    assert forward.lines[0].startswith("CONNECT 127.0.0.1:") and forward.auth == [None]


def test_no_proxy_hosts_go_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host NO_PROXY names is reached directly, though ALL_PROXY names a proxy."""
    forward = ForwardProxy()

    async def run(url: str, port: int) -> bytes:
        monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("NO_PROXY", "localhost, 127.0.0.1")
        return await post(url)

    assert through(forward, run) == b"POST /v1/chat?x=1 HTTP/1.1" and forward.lines == []


def test_a_proxy_that_refuses_connect_is_named_without_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy answering CONNECT with a 407 is an HttpError naming the proxy, its variable
    and its answer, with a hint about credentials, and never the password."""
    forward = ForwardProxy(refuse="HTTP/1.1 407 Proxy Authentication Required")

    async def run(url: str, port: int) -> str:
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:hunter2@127.0.0.1:{port}")
        with pytest.raises(HttpError) as raised:
            await post(url.replace("http:", "https:"))
        return f"{port} {raised.value}"

    port, message = through(forward, run).split(" ", 1)
    assert message.startswith(f"the proxy http://127.0.0.1:{port} (HTTPS_PROXY) refused CONNECT")
    assert "407 Proxy Authentication Required" in message and "credentials" in message
    assert "hunter2" not in message and forward.lines[0].startswith("CONNECT ")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("socks5://user:hunter2@127.0.0.1:1080", "the proxy socks5://127.0.0.1:1080 in ALL_PROXY"),
        ("https://127.0.0.1:3128", "the proxy https://127.0.0.1:3128 in ALL_PROXY"),
        ("http://127.0.0.1:port", "the proxy http://127.0.0.1 in ALL_PROXY"),
    ],
    ids=["socks", "tls-proxy", "bad-port"],
)
def test_a_proxy_that_cannot_be_used_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    """A proxy URL that is not http://host:port is an HttpError naming it (no credentials) and
    its variable, and saying how to go around it."""
    monkeypatch.setenv("ALL_PROXY", value)
    with pytest.raises(HttpError) as raised:
        asyncio.run(post("https://api.example.com/v1"))
    message = str(raised.value)
    assert message.startswith(problem) and "NO_PROXY" in message and "hunter2" not in message


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "direct"),
    [
        ("*", "api.example.com", 443, True),
        ("example.com", "api.example.com", 443, True),
        (".example.com", "api.example.com", 443, True),
        ("example.com", "notexample.com", 443, False),
        ("api.example.com:443", "api.example.com", 443, True),
        ("api.example.com:8443", "api.example.com", 443, False),
        ("::1", "::1", 8000, True),
        ("[::1]:8000", "::1", 8000, True),
        ("", "api.example.com", 443, False),
    ],
)
def test_what_no_proxy_names(no_proxy: str, host: str, port: int, direct: bool) -> None:
    """NO_PROXY entries: `*`, a host, a domain and its subdomains (leading dot or not),
    `host:port`, IPv6 addresses with or without brackets."""
    proxies = {"https": "http://proxy:3128", "no": no_proxy}
    assert (proxy.choose(proxies, True, host, port) is None) is direct


def test_lower_case_variables_win_and_an_empty_one_unsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """`https_proxy` wins over `HTTPS_PROXY`; an empty `http_proxy` unsets `HTTP_PROXY`."""
    monkeypatch.setenv("HTTPS_PROXY", "http://upper:1")
    monkeypatch.setenv("https_proxy", "http://lower:2")
    monkeypatch.setenv("HTTP_PROXY", "http://upper:3")
    monkeypatch.setenv("http_proxy", "")
    assert proxy.from_environment() == {"https": "http://lower:2"}


def _certificates(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for 127.0.0.1, and a client context
    that trusts only it."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    command = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
    names = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [*command.split(), "-keyout", str(key), "-out", str(cert), *names],
        check=True,
        capture_output=True,
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))
