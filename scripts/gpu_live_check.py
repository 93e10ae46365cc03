"""The live agent on a real GPU, in one short run (for a machine with CUDA; a few minutes at most).

    python scripts/gpu_live_check.py OUTDIR

Starts a real CUDA training loop under `fragviz run` (the agent on a free port), polls /v1/stats and
/metrics while it trains, checks the figures against the job's own torch.cuda.memory_stats() (which the
job writes to a file each step) and NVML, then makes the job fragment its memory and run out of it, and
fetches /v1/oom. Writes OUTDIR/gpu_live_check.json with everything it saw, and prints a summary. With
--simulate it runs the same steps on a CPU (to check the script itself).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from fragviz.snapshot import load_snapshot_bytes

JOB = r'''
import json, sys, time, torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
out = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
opt = torch.optim.AdamW(model.parameters())
for step in range(60):
    x = torch.randn(512, 1024, device=dev)
    model(x).square().mean().backward(); opt.step(); opt.zero_grad()
    if dev == "cuda":
        torch.cuda.synchronize()
        s = torch.cuda.memory_stats()
        json.dump({"step": step, "reserved": s["reserved_bytes.all.current"],
                   "allocated": s["allocated_bytes.all.current"]}, open(out, "w"))
    time.sleep(0.05)
time.sleep(3)
# Fragment: many tensors of alternating sizes, free every other one, then ask for one bigger than any gap.
total = torch.cuda.get_device_properties(0).total_memory if dev == "cuda" else 1 << 30
keep, chunk = [], 64 << 20
try:
    while True:
        keep.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
        keep.append(torch.empty(chunk // 2, dtype=torch.uint8, device=dev))
except torch.OutOfMemoryError:
    pass
del keep[::2]
json.dump({"final": True}, open(out, "w"))
time.sleep(2)
torch.empty(int(chunk * 1.5), dtype=torch.uint8, device=dev)  # larger than any free gap: an OOM
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("outdir")
    p.add_argument("--simulate", action="store_true")
    args = p.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    work = tempfile.mkdtemp()
    job_py, stats_file = os.path.join(work, "job.py"), os.path.join(work, "stats.json")
    open(job_py, "w").write(JOB)
    port = free_port()
    fragviz = os.path.join(os.path.dirname(sys.executable), "fragviz")
    cmd = [fragviz, "run", "--port", str(port), "--linger", "30"]
    if args.simulate:
        cmd += ["--simulate", "--device-memory", "1GiB"]
    proc = subprocess.Popen(cmd + ["--", sys.executable, job_py, stats_file], stderr=subprocess.PIPE, text=True)
    base, seen = f"http://127.0.0.1:{port}", {"polls": [], "comparisons": []}
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                stats = json.loads(get(base + "/v1/stats"))
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
                continue
            seen["polls"].append(stats)
            if os.path.exists(stats_file) and stats["devices"] and "final" not in open(stats_file).read():
                try:
                    own = json.load(open(stats_file))
                    seen["comparisons"].append({"job": own, "agent_reserved": stats["devices"][0]["reserved_bytes"]})
                except ValueError:
                    pass
            if any(d["num_ooms"] for d in stats["devices"]) and "final" in open(stats_file).read():
                seen["metrics"] = get(base + "/metrics").decode()[:4000]
                oom = get(base + "/v1/oom")
                open(os.path.join(args.outdir, "gpu_live_oom.pickle"), "wb").write(oom)
                seen["oom_snapshot_bytes"] = len(oom)
                snap = load_snapshot_bytes(oom, "the OOM snapshot")  # fragviz's safe loader, never plain pickle
                seen["oom_actions"] = sorted({a for t in snap.traces.values() for a in t.action_counts()})
                break
            time.sleep(1.0)
    finally:
        proc.wait(60)
        seen["job_stderr"] = proc.stderr.read()[-3000:]
    last = seen["polls"][-1] if seen["polls"] else None
    seen["summary"] = {"polls": len(seen["polls"]), "simulated": last and last["simulated"],
                       "nvml_used_bytes": last and [d["nvml_used_bytes"] for d in last["devices"]],
                       "oom_fetched": "oom_snapshot_bytes" in seen,
                       "reserved_matches_job": sum(c["job"]["reserved"] == c["agent_reserved"]
                                                   for c in seen["comparisons"]),
                       "comparisons": len(seen["comparisons"])}
    json.dump(seen, open(os.path.join(args.outdir, "gpu_live_check.json"), "w"), indent=1, default=str)
    print(json.dumps(seen["summary"], indent=1))
    return 0 if seen["summary"]["oom_fetched"] else 1


if __name__ == "__main__":
    sys.exit(main())
