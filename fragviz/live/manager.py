"""Attachments a server owns: the dashboard starts pollers itself, so no second command is needed."""
from __future__ import annotations

import threading

from fragviz.base.errors import AgentError, NotFoundError
from fragviz.live.client import AgentClient, NotAnAgent
from fragviz.live.poller import TargetPoller
from fragviz.store.engine import open_store


class LiveManager:
    """Pollers started from the dashboard, by attachment id. Thread-safe."""

    # Polled twice per refresh of the live page (every second): a change in the job reaches the chart within
    # 0.5 s (the poll) + 1 s (the page) + drawing, even when the two clocks are in their worst phase.
    def __init__(self, db_path: str, interval: float = 0.5, snapshot_every: float | None = None) -> None:
        self.db_path = db_path
        self.interval = interval
        self.snapshot_every = snapshot_every
        self._pollers: dict[int, TargetPoller] = {}
        self._lock = threading.Lock()

    def attach(self, target: str, token: str | None) -> int:
        """Start recording `target` (after one successful poll, else AgentError); its attachment id.
        A target this server already records is not attached twice."""
        client = AgentClient(target, token)
        with self._lock:
            for aid, p in self._pollers.items():
                if p.client.target == client.target and p.is_running:
                    return aid
        client.check()
        poller = TargetPoller(self.db_path, client, self.interval, self.snapshot_every, owner="dashboard")
        poller.poll_once()  # the first sample is in the store before the page asks for it
        with self._lock:
            self._pollers[poller.attachment_id] = poller.start()
        return poller.attachment_id

    def owns(self, aid: int) -> bool:
        with self._lock:
            return aid in self._pollers

    def detach(self, aid: int) -> None:
        with self._lock:
            poller = self._pollers.pop(aid, None)
        if poller is not None:
            poller.stop.set()
            poller.join(5.0)

    def save_snapshot(self, aid: int) -> int | None:
        """Take the job's snapshot with its trace into the library now: its id."""
        with self._lock:
            poller = self._pollers.get(aid)
        if poller is None:
            raise NotFoundError(f"attachment {aid} is not recorded by this server: attach to it here first")
        store = open_store(self.db_path)
        try:
            return poller.take_snapshot(store, "saved")
        except (OSError, NotAnAgent) as exc:
            raise AgentError(f"{poller.client.target}: the snapshot could not be fetched ({exc})") from None
        finally:
            store.close()

    def close(self) -> None:
        for aid in list(self._pollers):
            self.detach(aid)
