"""The dashboard's door: who may talk to the server, how fast, and how the server listens and stops.

Every request passes `check_request`, a Flask before_request hook that create_app installs:
1. its Host header names this server (a page under a foreign name reaching a loopback server is DNS
   rebinding): 421 otherwise;
2. a state-changing request (POST, PUT, PATCH, DELETE: uploads, what-if jobs, live attaches, Dash's
   callbacks) comes from one of this server's own pages (its Origin, else its Referer, names this server; a
   request with neither is not from a browser): 403 otherwise;
3. with a token, it carries `Authorization: Bearer TOKEN` or this server's session cookie, which `GET
   /any/page?token=TOKEN` sets: named for the port the server listens on (`fragviz_session_8050`: browsers
   send a host's cookies to every port on it), HttpOnly, SameSite=Strict, and holding HMAC-SHA256 under the
   token of a nonce drawn at random when the server starts and of that port, never the token, so no other
   server and no earlier run of this one takes it: 401 otherwise.
Every answer says it may not be framed (X-Frame-Options: DENY, CSP frame-ancestors 'none'), and a Dash
callback whose JSON body is nested too deep to decode gets 400 and one line, not a 500.

`serve` runs werkzeug's threaded server whose connections read under a fragviz.ui.http.pace.Pace (a client silent
for read_timeout is dropped; an upload slower than upload_min_rate too), logs no token, and on SIGTERM or
SIGINT stops in order: what the app registered in `server.extensions[ON_STOP]` runs (the ingest children
end, the spool with every temporary file is removed).
"""
from __future__ import annotations

import hashlib
import hmac
import io
import ipaddress
import re
import secrets
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import quote, unquote_plus, urlencode, urlsplit

from flask import Flask, Response, jsonify, make_response, redirect, request
from werkzeug.serving import WSGIRequestHandler, make_server

from fragviz.live.protocol import (bearer_token, bind_address, is_loopback, names_this_machine, split_host_header,
                                   tokens_match)
from fragviz.ui.http.pace import PACE_KEY, Pace, PacedReader

SESSION_COOKIE = "fragviz_session"  # the prefix: each server's cookie is named for its port (session_cookie)
_SESSION_LABEL = b"fragviz dashboard session v2"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
NOT_FRAMED = {"X-Frame-Options": "DENY"}
FRAME_ANCESTORS = "frame-ancestors 'none'"
ON_STOP = "fragviz.on_stop"  # server.extensions: callables `serve` runs as the server stops


@dataclass(frozen=True)
class Door:
    """Where the server listens and what it asks of a request."""

    bind_host: str = "127.0.0.1"
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()  # NAME or NAME:PORT that clients may call a non-loopback server by
    nonce: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)  # this run's own

    @property
    def loopback(self) -> bool:
        return names_this_machine(self.bind_host)


def session_cookie(port: int) -> str:
    """The session cookie's name for the server listening on `port`."""
    return f"{SESSION_COOKIE}_{port}"


def session_value(token: str, nonce: bytes, port: int) -> str:
    """What the session cookie holds: HMAC-SHA256 under the token of the server's nonce and port (hex), never
    the token; a server started again draws a new nonce, so the cookies of its earlier runs are refused."""
    return hmac.new(token.encode(), _SESSION_LABEL + nonce + str(port).encode(), hashlib.sha256).hexdigest()


def install_guard(server: Flask, door: Door) -> None:
    server.before_request(lambda: check_request(door))
    server.after_request(not_framed)
    server.register_error_handler(RecursionError, _too_deep)


def not_framed(response: Response) -> Response:
    """No page of this server may be framed by another (clickjacking): X-Frame-Options and CSP both say so."""
    response.headers.update(NOT_FRAMED)
    policy = response.headers.get("Content-Security-Policy")
    if not policy:
        response.headers["Content-Security-Policy"] = FRAME_ANCESTORS
    elif "frame-ancestors" not in policy:
        response.headers["Content-Security-Policy"] = f"{policy.rstrip('; ')}; {FRAME_ANCESTORS}"
    return response


def _too_deep(exc: RecursionError) -> Response:
    """A Dash callback's JSON nested past what the decoder recurses through: 400, one line."""
    if not request.path.startswith("/_dash-"):
        raise exc  # anywhere else a fragviz bug: Flask's 500
    return _refuse(400, "the request's JSON is nested too deeply")


def check_request(door: Door) -> Response | None:
    """None to let the request through; else the answer that refuses it (or trades a ?token= for a cookie)."""
    refusal = _host_refusal(door) or _origin_refusal()
    if refusal is None and door.token:
        refusal = _token_answer(door)
    return refusal


# -- Host ------------------------------------------------------------------------------------------------

def host_allowed(door: Door, name: str, port: int, server_port: int, local_address: str | None) -> bool:
    """Whether a Host header naming `name:port` names this server, listening on `server_port` and reached
    at `local_address` (the address the connection came in on; None where unknown)."""
    name = name.lower().rstrip(".") or name
    for entry in door.allowed_hosts:
        allowed_name, allowed_port = split_host_header(entry) or (entry, None)
        if allowed_name.lower().rstrip(".") == name and port == (allowed_port or server_port):
            return True
    if port != server_port:
        return False
    if names_this_machine(name):
        return door.loopback if local_address is None else is_loopback(local_address)
    return _same_address(name, local_address) or _same_address(name, door.bind_host)


def _same_address(a: str, b: str | None) -> bool:
    try:
        x, y = ipaddress.ip_address(a.strip("[]")), ipaddress.ip_address((b or "").strip("[]"))
    except ValueError:
        return False
    return not y.is_unspecified and _unmapped(x) == _unmapped(y)


def _unmapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Any:
    return getattr(address, "ipv4_mapped", None) or address


def _host_refusal(door: Door) -> Response | None:
    value = request.headers.get("Host")
    if value is None:
        return None  # an HTTP/1.0 client may send none; a browser always does
    parsed = split_host_header(value)
    if parsed and host_allowed(door, parsed[0], parsed[1] or _default_port(), _server_port(), _local_address()):
        return None
    hint = "use the address it listens on" if door.loopback else "use its address, or start it with --allowed-host NAME"
    return _refuse(421, f"this server does not answer to the name {value[:80]!r} (Host header): {hint}")


def _default_port() -> int:
    return 443 if request.scheme == "https" else 80


def _local_address() -> str | None:
    sock = request.environ.get("werkzeug.socket")
    try:
        return str(sock.getsockname()[0]) if sock is not None else None
    except (OSError, AttributeError, IndexError):
        return None


# -- same origin -----------------------------------------------------------------------------------------

def _origin_refusal() -> Response | None:
    if request.method in SAFE_METHODS:
        return None
    origin = request.headers.get("Origin")
    what, source = ("Origin", origin) if origin is not None else ("Referer", request.headers.get("Referer"))
    if source is None:
        return None  # not sent by a browser (curl, scripts): the Host check and the token guard those
    if _origin_of(source) == _this_origin():
        return None
    return _refuse(403, f"cross-site {request.method} refused: its {what} {source[:80]!r} is not this server "
                        "(state-changing requests must come from this dashboard's own pages)")


def _origin_of(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None  # "null" (a sandboxed or privacy-hidden origin) names no server
    scheme = parts.scheme.lower()
    return scheme, parts.hostname.lower().rstrip("."), port or (443 if scheme == "https" else 80)


def _this_origin() -> tuple[str, str, int] | None:
    parsed = split_host_header(request.headers.get("Host") or "")
    if parsed is None:
        return None
    return request.scheme, parsed[0].lower().rstrip("."), parsed[1] or _default_port()


# -- tokens ----------------------------------------------------------------------------------------------

def _token_answer(door: Door) -> Response | None:
    token = door.token or ""
    if "token" in request.args and request.method in ("GET", "HEAD"):
        return _exchange_token(door)  # a person in a browser; anything else sends its token in a header
    header = request.headers.get("Authorization")
    if header is not None:
        if tokens_match(bearer_token(header), token):
            return None
        return _unauthorized("missing or wrong access token: send Authorization: Bearer TOKEN")
    port = _server_port()
    if tokens_match(request.cookies.get(session_cookie(port)), session_value(token, door.nonce, port)):
        return None
    return _unauthorized("this dashboard needs its access token: open it once as /?token=TOKEN (again after "
                         "the server restarts), or send Authorization: Bearer TOKEN")


def _exchange_token(door: Door) -> Response:
    """`GET /page?token=TOKEN`: the session cookie, and 303 to the same page without the token in its URL."""
    if not tokens_match(request.args.get("token"), door.token or ""):
        return _unauthorized("wrong access token")
    query = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "token"])
    path = "/" + quote(request.path.lstrip("/\\"), safe="/:@!$&'()*+,;=-._~")  # never "//elsewhere"
    response = redirect(path + (f"?{query}" if query else ""), 303)
    port = _server_port()
    response.set_cookie(session_cookie(port), session_value(door.token or "", door.nonce, port), httponly=True,
                        samesite="Strict", path="/")
    return response


def _server_port() -> int:
    """The port this server listens on (never the Host header's: a client names that)."""
    return int(request.environ.get("SERVER_PORT") or 0)


def _unauthorized(message: str) -> Response:
    return _refuse(401, message, {"WWW-Authenticate": 'Bearer realm="fragviz"'})


def _refuse(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """One line: JSON for the API and Dash's own requests, text for pages."""
    if request.path.startswith(("/api/", "/_dash")):
        response = jsonify({"error": message})
    else:
        response = make_response(f"fragviz: {message}\n")
        response.mimetype = "text/plain"
    response.status_code = status
    response.headers.update(headers or {})
    response.headers["Cache-Control"] = "no-store"
    return response


# -- the server ------------------------------------------------------------------------------------------

_QUERY_PAIR = re.compile(r"([?&;])([^=&;?#\s\"']*)=([^&;#\s\"']*)")


def redact_tokens(line: str) -> str:
    """`line` with the value of every `token=` query parameter (its name decoded) replaced."""
    def pair(m: re.Match[str]) -> str:
        name = unquote_plus(m.group(2)).strip().lower()
        return f"{m.group(1)}{m.group(2)}=[redacted]" if name == "token" else m.group(0)

    return _QUERY_PAIR.sub(pair, line)


class DoorRequestHandler(WSGIRequestHandler):
    """werkzeug's request handler whose reads go through a Pace (`serve` gives it its socket timeout, so a
    client that goes silent is dropped; an upload that trickles is dropped too) and whose log lines (the
    request line above all) never show a token."""

    def setup(self) -> None:
        super().setup()
        self.pace = Pace(self.connection, self.timeout)
        self.rfile = io.BufferedReader(PacedReader(self.rfile.detach(), self.pace))

    def make_environ(self) -> dict[str, Any]:
        environ = super().make_environ()
        environ[PACE_KEY] = self.pace  # fragviz.ui.http.uploads asks it for the upload's rate
        return environ

    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002  (werkzeug's signature)
        text = message % args if args else message
        super().log(type, "%s", redact_tokens(text))


def request_handler(read_timeout: float) -> type[DoorRequestHandler]:
    """The handler class whose connections are dropped after `read_timeout` seconds of silence (0: never)."""
    return type("FragvizRequestHandler", (DoorRequestHandler,), {"timeout": read_timeout or None})


class _Stopping(Exception):
    """SIGTERM: leave serve_forever and stop in order."""


def serve(server: Flask, host: str, port: int, read_timeout: float, ready: Callable[[int], None]) -> None:
    """Serve `server` on host:port, one thread per connection, each dropped after `read_timeout` seconds of
    silence; `ready(port)` is called once it listens (port 0: the port it got). On SIGTERM or SIGINT (which
    werkzeug's serve_forever takes as its end) it returns, after running `server.extensions[ON_STOP]`."""
    httpd = make_server(bind_address(host), port, server, threaded=True, request_handler=request_handler(read_timeout))
    ready(int(httpd.server_address[1]))
    try:
        with _stop_on_sigterm():
            httpd.serve_forever()
    except _Stopping:
        pass
    finally:
        httpd.server_close()
        for stop in server.extensions.get(ON_STOP, ()):
            stop()


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread takes signals
        return

    def stopping(_signum: int, _frame: Any) -> None:
        raise _Stopping()

    previous = signal.signal(signal.SIGTERM, stopping)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
