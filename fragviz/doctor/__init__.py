"""The OOM doctor: what caused each "CUDA out of memory", in numbers, and what would help.

- `message`: reading OOM messages of every PyTorch era into figures.
- `verdicts`: the verdict, its figures and advice, from a snapshot's `oom` entries or a pasted message.
- `text`: the findings for a terminal.
"""
from __future__ import annotations

from fragviz.doctor.verdicts import PUBLIC_KEYS, OomFacts, diagnose, diagnose_message, verdict_of

__all__ = ["PUBLIC_KEYS", "OomFacts", "diagnose", "diagnose_message", "verdict_of"]
