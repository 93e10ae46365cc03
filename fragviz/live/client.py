"""A careful client of one live agent: every answer bounded in bytes and in time, every failure named.

Whatever listens on the port may be a fragviz agent, a job shutting down mid-answer, or something else
entirely (an SSH daemon, a web server, a hostile program). So each request has a byte limit (checked against
Content-Length before reading and as the body arrives) and a whole-answer deadline (a watchdog shuts the
socket when it passes, so a trickling server cannot hold a reader), and what goes wrong is one of two things:

- `AgentUnreachable` (an OSError): nothing answered, or the answer broke off (refused, reset, truncated,
  too slow). The job may be starting or restarting: a poller marks a gap and retries.
- `NotAnAgent` (a ValueError): something answered that is not a fragviz agent (not HTTP, not 200, too large,
  not a stats object). A poller that never reached an agent stops there.

A refused token is an AgentError: retrying cannot help.
"""
from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Callable

from fragviz.base.errors import AgentError, UsageError
from fragviz.live import protocol
from fragviz.live.door import Deadline
from fragviz.base.units import format_bytes

STATS_TIMEOUT = 5.0
STATE_TIMEOUT = 10.0
SNAPSHOT_TIMEOUT = 120.0
_READ_CHUNK = 1 << 16


class AgentUnreachable(OSError):
    """Nothing answered, or the answer broke off: the job may be (re)starting."""


class NotAnAgent(ValueError):
    """Something answered that is not a fragviz agent."""


class AgentClient:
    """HTTP to one agent, with its token in an Authorization header."""

    def __init__(self, target: str, token: str | None) -> None:
        try:
            self.host, self.port = protocol.parse_target(target)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.target = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        self.token = token

    def get(self, path: str, limit: int, deadline: float) -> bytes:
        """The body of a 200 answer of at most `limit` bytes, whole within `deadline` seconds."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=deadline)
        watchdog = Deadline(lambda: conn.sock, deadline)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            _check_status(self.target, path, resp.status)
            return _read_body(resp, limit, path)
        except http.client.HTTPException as exc:
            if watchdog.fired:
                raise AgentUnreachable(f"no whole answer to {path} within {deadline:g} s") from None
            raise _http_failure(path, exc) from None
        except OSError as exc:
            if watchdog.fired:
                raise AgentUnreachable(f"no whole answer to {path} within {deadline:g} s") from None
            raise exc if isinstance(exc, AgentUnreachable) else AgentUnreachable(_socket_reason(exc)) from None
        finally:
            watchdog.cancel()
            conn.close()

    def stats(self) -> dict[str, Any]:
        """One stats object, checked (protocol.check_stats); NotAnAgent when it is not one."""
        body = self.get(protocol.PATH_STATS, protocol.MAX_STATS_BYTES, STATS_TIMEOUT)
        return _checked(protocol.check_stats, _json(body, protocol.PATH_STATS))

    def state(self) -> dict[str, Any]:
        """The current segments, checked (protocol.check_state)."""
        body = self.get(protocol.PATH_STATE, protocol.MAX_STATE_BYTES, STATE_TIMEOUT)
        return _checked(protocol.check_state, _json(body, protocol.PATH_STATE))

    def snapshot(self, limit: int) -> bytes:
        """The current snapshot with its trace, as the agent pickled it."""
        return self.get(protocol.PATH_SNAPSHOT + "?trace=1", limit, SNAPSHOT_TIMEOUT)

    def oom_snapshot(self, limit: int) -> bytes | None:
        """The snapshot taken at the job's last OOM; None when the agent has none."""
        try:
            return self.get(protocol.PATH_OOM, limit, SNAPSHOT_TIMEOUT)
        except _NoSuchPath:
            return None

    def check(self) -> dict[str, Any]:
        """One stats request, with what went wrong as one AgentError line."""
        try:
            return self.stats()
        except NotAnAgent as exc:
            raise AgentError(f"{self.target}: what answers there is not a fragviz agent ({exc})") from None
        except OSError as exc:
            raise AgentError(f"{self.target}: no fragviz agent answers there ({exc})") from None


class _NoSuchPath(NotAnAgent):
    """404: an agent with nothing at this path (no OOM yet), or a server that is not an agent."""


def _check_status(target: str, path: str, status: int) -> None:
    if status == 200:
        return
    if status in (401, 403):
        raise AgentError(f"{target}: the agent refused us ({status}: "
                         f"{'wrong or missing token' if status == 401 else 'forbidden'})")
    if status == 404:
        raise _NoSuchPath(f"{path} answered 404")
    if status in (429, 502, 503, 504):
        raise AgentUnreachable(f"{path} answered {status} (busy)")
    raise NotAnAgent(f"{path} answered HTTP {status}")


def _read_body(resp: http.client.HTTPResponse, limit: int, path: str) -> bytes:
    """The body, refused past `limit`; an answer shorter than its Content-Length broke off."""
    text = (resp.getheader("Content-Length") or "").strip()
    declared = int(text) if text.isdigit() else None
    if declared is not None and declared > limit:
        raise NotAnAgent(f"{path} declares {format_bytes(declared)}, over the {format_bytes(limit)} "
                         "an agent's answer may take")
    body = bytearray()
    while chunk := resp.read(min(_READ_CHUNK, limit + 1 - len(body))):
        body += chunk
        if len(body) > limit:
            raise NotAnAgent(f"{path} sent over {format_bytes(limit)}, more than an agent's answer may take")
    if declared is not None and len(body) < declared:  # http.client returns what came, without IncompleteRead
        raise AgentUnreachable(f"the answer to {path} broke off after {len(body):,} of {declared:,} bytes")
    return bytes(body)


def _http_failure(path: str, exc: http.client.HTTPException) -> Exception:
    if isinstance(exc, http.client.RemoteDisconnected):  # a job shutting down closes its connections
        return AgentUnreachable("the connection closed without an answer")
    if isinstance(exc, http.client.IncompleteRead):
        return AgentUnreachable(f"the answer to {path} broke off after {len(exc.partial):,} bytes")
    return NotAnAgent(f"not an HTTP answer ({type(exc).__name__})")  # a banner, a line too long, ...


def _socket_reason(exc: OSError) -> str:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timed out"
    return (exc.strerror or str(exc) or type(exc).__name__)[:200]


def _json(body: bytes, path: str) -> Any:
    """JSON as an agent writes it: NaN and infinities are not numbers any agent sends."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise NotAnAgent(f"{path} is nested too deeply") from None
    except ValueError as exc:
        raise NotAnAgent(f"{path} is not JSON ({str(exc)[:80]})") from None


def _checked(check: Callable[[Any], dict[str, Any]], data: Any) -> dict[str, Any]:
    try:
        return check(data)
    except ValueError as exc:
        raise NotAnAgent(str(exc).removeprefix("not a fragviz agent: ")) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")
