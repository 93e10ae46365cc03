"""The poller: records running jobs' live agents into the store.

Each target (one per rank) gets a thread that polls `/v1/stats` every interval and writes a sample per
device; takes a full snapshot (with its trace) into the library every `snapshot_every` seconds; fetches
the OOM snapshot as soon as an agent counts a new OOM; keeps the latest segments for live pages. When an
agent cannot be reached it marks the gap, retries with backoff and carries on when the agent (or a
restarted job, with a new pid) answers again. A refused token stops that target: retrying cannot help; so
does an answer that is not an agent's before any good one (fragviz.live.client says which is which). After a
good one, a bad answer (NaN, too many devices, too large) is dropped and recorded once per run of them.
"""
from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from fragviz.base.errors import AgentError, StoreError, UsageError
from fragviz.library.ingest import ingest_bytes
from fragviz.base.limits import Limits
from fragviz.live.client import AgentClient, NotAnAgent
from fragviz.store.live import LiveRecorder
from fragviz.store.engine import Store, open_store

BACKOFF_MAX = 5.0
MIN_INTERVAL = 0.05  # at most 20 samples a second per attachment, whatever is asked
Log = Callable[[str], None]


@dataclass
class PollerStatus:
    polls: int = 0
    snapshots: list[int] = field(default_factory=list)
    ooms: list[int] = field(default_factory=list)
    gaps: int = 0
    dropped: int = 0
    error: str | None = None


class TargetPoller:
    """Polls one agent into one attachment of the store, until `stop` is set or the deadline passes."""

    def __init__(self, db_path: str, client: AgentClient, interval: float, snapshot_every: float | None,
                 state_every: float | None = None, owner: str = "cli", log: Log | None = None) -> None:
        self.db_path = db_path
        self.client = client
        self.interval = max(interval, MIN_INTERVAL)
        self.snapshot_every = snapshot_every
        self.state_every = state_every if state_every is not None else max(2.0, 2 * interval)
        self.owner = owner
        self.log = log or (lambda _: None)
        self.stop = threading.Event()
        self.status = PollerStatus()
        self.store = open_store(db_path)
        self.recorder = LiveRecorder(self.store)
        self.attachment_id = self.recorder.open_attachment(client.target, owner)
        self._pid: int | None = None
        self._ooms: dict[int, int] = {}
        self._down_since: float | None = None
        self._next_snapshot = time.monotonic() + snapshot_every if snapshot_every else None
        self._next_state = 0.0
        self._thread: threading.Thread | None = None
        self._waiting_logged = False
        self._last_sample: float | None = None  # the agent's time of the last sample recorded
        self._gap_pending = False  # a gap to mark on the next sample row (the last poll had no device to mark it on)
        self._refusing: set[str] = set()  # what was last refused (stats, state): said once until a good one
        self._state_digest: bytes | None = None
        self._fetcher = Fetcher(db_path, self._fetched, client.target)

    def start(self) -> "TargetPoller":
        self._thread = threading.Thread(target=self.run, name=f"fragviz-poll-{self.client.target}", daemon=True)
        self._thread.start()
        return self

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self, deadline: float | None = None) -> PollerStatus:
        backoff = self.interval
        try:
            while not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
                started = time.monotonic()
                if self._poll_guarded():
                    backoff = self.interval
                    wait = self.interval - (time.monotonic() - started)
                else:
                    wait, backoff = backoff, min(BACKOFF_MAX, backoff * 2)
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                self.stop.wait(max(0.0, wait))
        except AgentError as exc:
            self._stopped(str(exc), "refused")
        except Exception as exc:  # noqa: BLE001  a bug must end the recording properly, not kill the thread
            self._stopped(f"{self.client.target}: internal error ({type(exc).__name__}: {exc}); this is a fragviz bug",
                          "error")
        finally:
            self._fetcher.finish()  # the snapshot being fetched is kept (a lingering OOM's above all)
            try:
                self.recorder.end(self.attachment_id)
            except StoreError as exc:
                self.log(f"fragviz: {self.client.target}: the recording's end was not stored ({exc})")
            finally:
                self.store.close()
        return self.status

    def _stopped(self, why: str, kind: str) -> None:
        self.status.error = why
        self.log(f"fragviz: {why}")
        try:
            self.recorder.event(self.attachment_id, kind, why)
        except StoreError:
            pass

    def _poll_guarded(self) -> bool:
        """A poll whose store write failed (a store busy for longer than its timeout) loses that sample, not
        the recording."""
        try:
            return self.poll_once()
        except StoreError as exc:
            self.status.dropped += 1
            self.log(f"fragviz: {self.client.target}: a sample was not recorded ({exc})")
            return True

    def poll_once(self) -> bool:
        """One poll: True when the agent answered."""
        try:
            stats = self.client.stats()
        except OSError as exc:
            self._went_away(exc)
            return False
        except NotAnAgent as exc:
            self._refused_answer(exc, "stats")
            return True
        gap = self._came_back(stats) or self._hole_before(stats["time"]) or self._gap_pending
        self.recorder.record(self.attachment_id, stats, gap)
        # a job that has not imported torch yet has no devices, so no sample row: the gap waits for the first
        self._gap_pending = gap and not stats["devices"]
        self._last_sample = stats["time"]
        self.status.polls += 1
        self._refusing.discard("stats")
        try:
            self._follow_ups(stats)
        except OSError as exc:
            self._went_away(exc)
            return False
        return True

    def _hole_before(self, t: float) -> bool:
        """Whether samples are missing before one taken at `t` (a poll that waited, a job that stalled): the
        sample is marked as after a gap, so no chart draws a line across the hole."""
        return self._last_sample is not None and t - self._last_sample > max(3 * self.interval, self.interval + 2.0)

    def _refused_answer(self, exc: NotAnAgent, what: str) -> None:
        """An answer that is not a usable sample (NaN, too many devices, too large): before any good one, what
        answers is not an agent (the recording stops); after, that answer is dropped, said once per run of them."""
        if self._pid is None:
            raise AgentError(f"{self.client.target}: what answers there is not a fragviz agent ({exc})")
        self.status.dropped += 1
        if what not in self._refusing:
            self._refusing.add(what)
            self.recorder.event(self.attachment_id, "bad_answer", str(exc))
            self.log(f"fragviz: {self.client.target}: an answer was refused ({exc}); dropping such answers")

    def _went_away(self, exc: BaseException) -> None:
        if self._pid is None:  # never reached yet: the job may still be starting, nothing is missing
            if self.status.polls == 0 and not self._waiting_logged:
                self._waiting_logged = True
                self.log(f"fragviz: {self.client.target}: no agent answers yet ({exc}); waiting for it")
            return
        if self._down_since is None:
            self._down_since = time.time()
            self.status.gaps += 1
            self.recorder.event(self.attachment_id, "disconnected", str(exc), t=self._down_since)
            self.log(f"fragviz: {self.client.target}: the agent went away ({exc}); retrying")

    def _came_back(self, stats: dict[str, Any]) -> bool:
        gap = self._down_since is not None
        if gap:
            self._down_since = None
            self.recorder.event(self.attachment_id, "reconnected", f"pid {stats['pid']}", t=stats["time"])
            self.log(f"fragviz: {self.client.target}: the agent is back (pid {stats['pid']})")
        if self._pid is not None and stats["pid"] != self._pid:
            self.recorder.event(self.attachment_id, "restarted", f"pid {self._pid} -> {stats['pid']}", t=stats["time"])
            self._ooms = {}
            gap = True
        elif self._pid is None:
            self.log(f"fragviz: {self.client.target}: recording pid {stats['pid']}"
                     + (" (a simulated device)" if stats.get("simulated") else ""))
        self._pid = stats["pid"]
        return gap

    def _follow_ups(self, stats: dict[str, Any]) -> None:
        """Snapshots (an OOM's, the periodic one) are fetched on the fetcher's thread, so a snapshot that takes
        long leaves no hole in the series; the segments are read here (small, and the live page's map)."""
        ooms = {d["device"]: int(d.get("num_ooms") or 0) for d in stats["devices"]}
        if any(n > self._ooms.get(dev, 0) for dev, n in ooms.items()):
            previous = self._ooms
            self._fetcher.ask("oom", lambda store: self._take_oom(LiveRecorder(store), stats),
                              lambda: setattr(self, "_ooms", previous))  # not fetched: asked again next poll
        self._ooms = ooms
        now = time.monotonic()
        if self._next_snapshot is not None and now >= self._next_snapshot:
            self._next_snapshot = now + (self.snapshot_every or 0)
            self._fetcher.ask("snapshot", lambda store: self.take_snapshot(store, "snapshot"), lambda: None)
        if now >= self._next_state:
            self._next_state = now + self.state_every
            self._record_state()

    def _fetched(self, fetch: Callable[[Store], Any], store: Store, failed: Callable[[], None]) -> None:
        """A snapshot fetched (on the fetcher's thread), or its answer (one past the file size limit) refused,
        or the agent not reached (the stats polls say so: here it is only asked again)."""
        try:
            fetch(store)
        except NotAnAgent as exc:
            self._refused_answer(exc, "snapshot")
        except (OSError, StoreError) as exc:
            failed()
            self.log(f"fragviz: {self.client.target}: a snapshot could not be fetched or stored ({exc})")
        except Exception as exc:  # noqa: BLE001  a bug: said, and the fetcher goes on
            failed()
            self.log(f"fragviz: {self.client.target}: internal error fetching a snapshot ({type(exc).__name__}: "
                     f"{exc}); this is a fragviz bug")

    def _record_state(self) -> None:
        """The latest segments, written only when they changed (a page redraws its map when they do)."""
        try:
            state = self.client.state()
        except NotAnAgent as exc:
            self._refused_answer(exc, "state")
            return
        self._refusing.discard("state")
        digest = hashlib.sha1(json.dumps(state["segments"], sort_keys=True).encode()).digest()
        if digest != self._state_digest:
            self.recorder.state(self.attachment_id, state["time"], state["segments"])
            self._state_digest = digest

    def _take_oom(self, recorder: LiveRecorder, stats: dict[str, Any]) -> None:
        blob = self.client.oom_snapshot(Limits.current().max_file_size)
        if blob is None:
            return
        sid = self._ingest(recorder, blob, "oom", stats["pid"])
        if sid is not None:
            self.status.ooms.append(sid)
            detail = json.dumps({d["device"]: d.get("num_ooms") for d in stats["devices"]})
            recorder.event(self.attachment_id, "oom", detail, sid, t=stats["time"])
            self.log(f"fragviz: {self.client.target}: out of memory; the state at the failure is snapshot {sid}")

    def take_snapshot(self, store: Store, kind: str = "snapshot") -> int | None:
        """Fetch the current snapshot with its trace into the library: its id (None if it could not be read).
        OSError when the agent cannot be reached, NotAnAgent for an answer past the file size limit."""
        blob = self.client.snapshot(Limits.current().max_file_size)
        recorder = self.recorder if store is self.store else LiveRecorder(store)
        sid = self._ingest(recorder, blob, kind, self._pid)
        if sid is not None:
            self.status.snapshots.append(sid)
            recorder.event(self.attachment_id, kind, "", sid)
            self.log(f"fragviz: {self.client.target}: snapshot {sid} taken")
        return sid

    def _ingest(self, recorder: LiveRecorder, blob: bytes, kind: str, pid: int | None) -> int | None:
        when = datetime.now().isoformat(timespec="seconds")
        name = f"live {self.client.target} pid {pid} {kind} {when}"
        result = ingest_bytes(recorder.store, blob, name)
        if result.id is None:
            recorder.event(self.attachment_id, "error", result.error or "")
            self.log(f"fragviz: {result.error}")
            return None
        return result.id


def attach_command(db_path: str, targets: list[str], token: str | None, interval: float,
                   snapshot_every: float | None, duration: float | None, log: Log | None = None) -> int:
    """`fragviz attach`: poll every target until Ctrl-C (or SIGTERM) or `duration`. 0; 2 when a target refused
    us, turned out not to be an agent, or (with a duration) never answered."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if interval < MIN_INTERVAL:
        raise UsageError(f"--interval {interval:g}s: polls may come at most every {MIN_INTERVAL:g}s "
                         f"({1 / MIN_INTERVAL:.0f} a second)")
    clients = [AgentClient(t, token) for t in targets]
    pollers = [TargetPoller(db_path, c, interval, snapshot_every, owner="cli", log=log) for c in clients]
    deadline = None if duration is None else time.monotonic() + duration
    threads = [threading.Thread(target=p.run, args=(deadline,), name=f"fragviz-poll-{p.client.target}", daemon=True)
               for p in pollers]
    log(f"fragviz: attached to {', '.join(c.target for c in clients)}; recording into {db_path} "
        f"(attachment {', '.join(str(p.attachment_id) for p in pollers)}); Ctrl-C to stop")
    # Ctrl-C and SIGTERM only ask the pollers to stop, so each ends its attachment in the store. (A
    # KeyboardInterrupt raised inside Thread.join could mark a running thread finished: cpython#90882.)
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: _stop_all(pollers)) for sig in handled} \
        if threading.current_thread() is threading.main_thread() else {}
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for p in pollers:
        _summary(p, log)
    return 2 if any(p.status.error for p in pollers) else 0


def _summary(p: TargetPoller, log: Log) -> None:
    """The closing line of one target; one that never answered in the whole duration (not stopped by Ctrl-C)
    becomes an error."""
    s = p.status
    if s.error and s.polls == 0:
        return  # its one line is said
    if s.polls == 0 and not p.stop.is_set():
        s.error = f"{p.client.target}: no fragviz agent answered there"
        log(f"fragviz: {s.error}")
        return
    log(f"fragviz: {p.client.target}: {s.polls} polls, {len(s.snapshots)} snapshots, {len(s.ooms)} OOM "
        f"snapshots{' (' + ', '.join(map(str, s.ooms)) + ')' if s.ooms else ''}, {s.gaps} gaps"
        + (f", {s.dropped} answers dropped" if s.dropped else "") + (f"; stopped: {s.error}" if s.error else ""))


def _stop_all(pollers: list[TargetPoller]) -> None:
    for p in pollers:
        p.stop.set()


class Fetcher:
    """Snapshots fetched one at a time on a thread of their own, with a store of their own: a kind asked for
    while one of it waits is not asked twice. `finish()` lets what was asked end, then stops."""

    def __init__(self, db_path: str, run: Callable[..., None], target: str) -> None:
        self.db_path = db_path
        self._run = run
        self._target = target
        self._lock = threading.Condition()
        self._asked: dict[str, tuple[Callable[[Store], Any], Callable[[], None]]] = {}
        self._thread: threading.Thread | None = None
        self._finishing = False

    def ask(self, kind: str, fetch: Callable[[Store], Any], failed: Callable[[], None]) -> None:
        with self._lock:
            if self._finishing or kind in self._asked:
                return
            self._asked[kind] = (fetch, failed)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"fragviz-fetch-{self._target}",
                                                daemon=True)
                self._thread.start()
            self._lock.notify()

    def _work(self) -> None:
        store = open_store(self.db_path)
        try:
            while True:
                with self._lock:
                    while not self._asked and not self._finishing:
                        self._lock.wait()
                    if not self._asked:
                        return
                    kind = "oom" if "oom" in self._asked else next(iter(self._asked))
                    fetch, failed = self._asked[kind]
                try:
                    self._run(fetch, store, failed)
                finally:
                    with self._lock:
                        self._asked.pop(kind, None)
        finally:
            store.close()

    def finish(self, timeout: float = 300.0) -> None:
        with self._lock:
            self._finishing = True
            self._lock.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
