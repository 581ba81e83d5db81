"""The proxy a provider call goes through, from the environment as curl and the SDKs read it.

`HTTPS_PROXY` for https URLs, `HTTP_PROXY` for http ones, `ALL_PROXY` for both (any case,
lower case first), and `NO_PROXY` for the hosts that go direct (names, domain suffixes,
`host:port`, `*`), read as the standard library's `urllib.request` reads them (not imported:
it costs a process 16 ms). An http URL is sent
to the proxy whole (absolute-form target); an https one goes through a `CONNECT` tunnel with
TLS to the server itself. `user:password@` in the proxy's URL is sent as `Proxy-Authorization`
and never shown in an error.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class ProxyError(Exception):
    """A proxy setting that cannot be used, a proxy that cannot be reached or refused."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """Where a proxied connection goes, and what each request to it carries."""

    host: str
    port: int
    headers: dict[str, str]
    """`proxy-authorization` when the proxy's URL has credentials."""
    name: str
    """The proxy's URL without credentials, and the variable that named it."""


def from_environment() -> dict[str, str]:
    """The proxy variables of the environment by scheme (`https`, `http`, `all`, `no`); a
    lower-case variable wins over its upper-case twin, an empty one unsets it."""
    found: dict[str, str] = {}
    for lower in (False, True):
        for name, value in os.environ.items():
            if name[-6:].lower() == "_proxy" and (name.islower() or not lower):
                found[name[:-6].lower()] = value
    if "REQUEST_METHOD" in os.environ:  # a CGI script: HTTP_PROXY may be a request's header
        found.pop("http", None)
    return {scheme: value for scheme, value in found.items() if value}


def choose(proxies: dict[str, str], tls: bool, host: str, port: int) -> Proxy | None:
    """The proxy for `host:port`, or None to connect directly."""
    scheme = "https" if tls else "http"
    url = proxies.get(scheme) or proxies.get("all")
    if not url or _bypassed(proxies, host, port):
        return None
    variable = f"{scheme if proxies.get(scheme) else 'all'}_proxy".upper()
    return parse(url, variable)


def parse(url: str, variable: str) -> Proxy:
    """A proxy URL (`http://[user:password@]host[:port]`, the scheme optional)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or 80
    except ValueError:
        port = 0
    host = parts.hostname or ""
    bracketed = f"[{host}]" if ":" in host else host
    shown = f"{parts.scheme}://{bracketed}" + (f":{port}" if port else "")
    if parts.scheme != "http" or not parts.hostname or not port:
        raise ProxyError(
            f"the proxy {shown} in {variable} cannot be used: only http://host:port proxies "
            "are supported; set NO_PROXY to the API's host to go around it"
        )
    headers = {}
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["proxy-authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return Proxy(parts.hostname, port, headers, f"{shown} ({variable})")


async def connect(
    via: Proxy, target: str, hostname: str, tls: ssl.SSLContext | None, limit: int
) -> Connection:
    """A connection to the proxy; for TLS (`tls`), a `CONNECT target` tunnel through it, with
    TLS to `hostname` inside."""
    try:
        reader, writer = await asyncio.open_connection(via.host, via.port, limit=limit)
    except OSError as exc:
        raise ProxyError(f"cannot connect to the proxy {via.name}: {exc}") from None
    if tls is None:
        return reader, writer
    try:
        await _tunnel(reader, writer, via, target)
        await writer.start_tls(tls, server_hostname=hostname)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        writer.close()
        raise ProxyError(
            f"cannot connect to {target} through the proxy {via.name}: {exc}"
        ) from None
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _tunnel(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, via: Proxy, target: str
) -> None:
    lines = [f"CONNECT {target} HTTP/1.1", f"host: {target}"]
    lines += [f"{name}: {value}" for name, value in via.headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].startswith("2"):
        hint = "; check the credentials in its URL" if parts[1:2] == ["407"] else ""
        writer.close()
        raise ProxyError(f"the proxy {via.name} refused CONNECT {target}: {status[:80]!r}{hint}")


def _bypassed(proxies: dict[str, str], host: str, port: int) -> bool:
    """Whether NO_PROXY names the host: `*`, the host, a domain it is in (`example.com` or
    `.example.com`), or `host:port` (an IPv6 address with or without its brackets)."""
    names = proxies.get("no", "")
    if names.strip() == "*":
        return True
    host = host.lower()
    bracketed = f"[{host}]" if ":" in host else host
    forms = {host, bracketed, f"{bracketed}:{port}"}
    for name in names.lower().split(","):
        name = name.strip().lstrip(".")
        if name and any(form == name or form.endswith(f".{name}") for form in forms):
            return True
    return False
