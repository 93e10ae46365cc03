"""Live attach: an agent inside a running job serves its allocator over HTTP; a poller records it.

`fragviz.live.start_agent(...)` is the agent (agent.py: standard library, lazy torch and fragviz's core
only), which serves through a server process of its own (server.py, handler.py, joblink.py, building.py:
the port, HTTP, and snapshots built outside the job; link.py between the two); poller.py records agents
into the store; protocol.py is what both sides agree on.
"""
from __future__ import annotations

from typing import Any


def start_agent(*args: Any, **kwargs: Any):
    """See fragviz.live.agent.start_agent."""
    from fragviz.live.agent import start_agent as _start

    return _start(*args, **kwargs)
