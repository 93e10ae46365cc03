"""The OOM doctor: what caused each "CUDA out of memory", in numbers, and what would help.

- `paste`, `message`: finding OOM messages in pasted text (wrapped, escaped, log-prefixed) and reading their
  figures, every PyTorch era, ROCm too.
- `facts`, `cause`, `consistency`, `advice`, `advice_outside`, `verdicts`: the figures of one OOM, its verdict
  (exhaustion, fragmentation, memory outside PyTorch, a capacity cap, or undetermined), what the figures cannot
  all mean, and what to do, from a snapshot's `oom` entries or a pasted message.
- `inforce`: the allocator settings known to be in force, so advice never names one already on.
- `together`: whether a pasted message and a snapshot can be one run on one device.
- `whatifs`: the suggested settings simulated on the trace, where it can answer.
- `records`: the results (`Diagnosis`, one per OOM, and its `WhatIfEntry`s), `as_dict()` for `--json`.
- `pools`: private pools and pending frees, where they matter.
- `summary`, `summary_text`, `summary_checks`: a pasted torch.cuda.memory_summary() table.
- `text`: the findings for a terminal.
"""
from __future__ import annotations

from fragviz.doctor.verdicts import (PUBLIC_KEYS, Diagnosis, OomFacts, diagnose, diagnose_message,
                                     diagnose_message_with, verdict_of)

__all__ = ["PUBLIC_KEYS", "Diagnosis", "OomFacts", "diagnose", "diagnose_message", "diagnose_message_with",
           "verdict_of"]
