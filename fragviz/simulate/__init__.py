"""The allocator model put to work on a recorded trace.

- `follow`: at each recorded malloc, predict what PyTorch's allocator did, then continue from the truth
  (how far the model can be trusted on this trace).
- `freerun`: replay the workload (requests and frees) under any settings and device size.
- `whatif`: free-runs side by side with the recording, as the CLI, the doctor and the what-if page show them.
- `text`: the same for a terminal.
- `records`: the results (`WhatIfResult`, `FollowResult` and their per-device records), `as_dict()` for `--json`.
"""
from __future__ import annotations

from fragviz.simulate.follow import follow, follow_device
from fragviz.simulate.freerun import FreeRunResult, free_run
from fragviz.simulate.records import DeviceFollow, DeviceWhatIf, FollowResult, WhatIfResult
from fragviz.simulate.whatif import recorded_capacity, run_free, simulated_snapshot, what_if

__all__ = ["DeviceFollow", "DeviceWhatIf", "FollowResult", "FreeRunResult", "WhatIfResult", "follow",
           "follow_device", "free_run", "recorded_capacity", "run_free", "simulated_snapshot", "what_if"]
