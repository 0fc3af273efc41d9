"""Who may read: loopback by default, a token for anything else, GET only.

- ``--host`` must be a loopback address unless a token is set (:func:`check_binding`).
- With a token, every request must carry it: ``Authorization: Bearer <token>``, the
  ``theseus_token`` cookie, or ``?token=<token>`` (the URL the command prints; the answer then
  sets the cookie, so the page's own requests carry it). Anything else is 403.
- Without a token the ``Host`` header must name a loopback host, so a web page elsewhere
  cannot read the server through DNS rebinding (403 otherwise).
- Only GET and HEAD are answered (405): the view never changes a run.
- Every answer says ``nosniff``, no framing, no referrer (the token may be in the URL) and a
  content security policy that allows only this server's own scripts.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from theseus.core.errors import TheseusError

COOKIE = "theseus_token"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
    ),
]


class ServeUsageError(TheseusError):
    """A binding the server refuses (exit 2)."""


def is_loopback_literal(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback IP written out (no DNS lookup: a name
    that an attacker's DNS points at 127.0.0.1 is not loopback here)."""
    host = host.strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (for ``--host``)."""
    if is_loopback_literal(host):
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_binding(host: str, token: str | None) -> None:
    if not token and not is_loopback(host):
        raise ServeUsageError(
            f"--host {host} is not a loopback address: serving runs beyond this machine needs "
            "--token TOKEN (or THESEUS_SERVE_TOKEN; --token auto makes one)"
        )


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):  # [::1]:8080
        return host_header[1 : host_header.find("]")]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware applying the rules above to every HTTP request."""

    def __init__(self, app, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":  # the view has none; never an unchecked way in
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["method"] not in ("GET", "HEAD"):
            await _refuse(send, 405, "the theseus web view is read-only: GET and HEAD only")
            return
        set_cookie = False
        if self.token:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = _bearer(headers.get("authorization", "")) or _cookie(headers.get("cookie", ""))
            if not given and query.get("token"):
                given, set_cookie = query["token"][0], True
            if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
                await _refuse(
                    send, 403, "a valid token is needed: open the URL theseus serve printed"
                )
                return
        elif not is_loopback_literal(_host_name(headers.get("host", ""))):
            await _refuse(send, 403, "this server answers only requests addressed to localhost")
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if set_cookie:
                    cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    extra.append((b"set-cookie", cookie.encode("latin-1")))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _bearer(value: str) -> str | None:
    scheme, _, credential = value.partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None


def _cookie(value: str) -> str | None:
    if not value:
        return None
    cookies = SimpleCookie()
    try:
        cookies.load(value)
    except Exception:  # a malformed Cookie header is no token
        return None
    return cookies[COOKIE].value if COOKIE in cookies else None


async def _refuse(send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
