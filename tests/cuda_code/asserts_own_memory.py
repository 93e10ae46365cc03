"""A script that checks its own memory, as tests and benchmarks in real projects do: it resets the peak, runs a
step, and asserts on torch.cuda.max_memory_allocated() and memory_allocated()."""
import json

import torch

device = torch.device("cuda")
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
weights = torch.empty(1024, 1024, device=device)  # 4 MiB
activations = torch.empty(2048, 1024, device="cuda:0")  # 8 MiB
del activations
peak = torch.cuda.max_memory_allocated()
now = torch.cuda.memory_allocated()
assert peak - before == 12 * 2**20, peak
assert now - before == 4 * 2**20, now
stats = torch.cuda.memory_stats()
assert stats["allocated_bytes.all.peak"] == peak
torch.cuda.empty_cache()
print(json.dumps({"peak": peak, "now": now, "reserved_after_empty_cache": torch.cuda.memory_reserved(),
                  "mem_get_info": list(torch.cuda.mem_get_info())}))
