"""What to do when the allocator's cache is not the cause: memory held outside PyTorch (other processes, the job's
own memory outside the allocator), a cap, or figures that do not tell.

Other processes are named with their pid and size; a listed process that is the job itself is named as such and
never offered for stopping. Settings for the job's own memory outside PyTorch (NCCL, cuBLAS) are offered only
where that memory is a real share; a memory fraction only where one can be set and limit anything.
"""
from __future__ import annotations

from fragviz.doctor.cause import co_tenant
from fragviz.doctor.facts import OomFacts
from fragviz.doctor.inforce import InForce
from fragviz.doctor.message import FIGURES, close
from fragviz.base.units import GiB
from fragviz.base.units import format_bytes as fb

REDUCE = ("Reduce the batch size or sequence length, use activation checkpointing (torch.utils.checkpoint), "
          "mixed precision (bf16), or shard parameters and optimizer state (FSDP, ZeRO).")
OWN_LIBRARIES = ("For the job's own memory outside PyTorch's allocator: lower NCCL_BUFFSIZE or NCCL_MAX_NCHANNELS "
                 "(NCCL buffers), set CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS workspaces).")
LEGACY_FRACTION = ("1.0", "1.5", "1.x")  # these eras print "allowed" whenever a fraction is set
OWN_SHARE = 0.05  # the job's memory outside the allocator that settings for it can win back: 5 % (at least 1 GiB)


def outside_advice(f: OomFacts, helps: dict[str, bool], in_force: InForce) -> list[str]:
    if f.requested is None:
        return ["The failure came from a CUDA call outside the caching allocator (a kernel launch, a library "
                "handle or its workspace, NCCL), not from a tensor allocation.",
                "Check what else uses the GPU (nvidia-smi), and leave headroom: reserve less for tensors "
                "(torch.cuda.set_per_process_memory_fraction) or shrink the batch."]
    out = [_headline(f)] + process_sentences(f)
    if _own_memory_matters(f):
        out.append(OWN_LIBRARIES)
    return out


def _headline(f: OomFacts) -> str:
    q = f.requested
    if f.free is not None and f.free >= q and co_tenant(f):
        return (f"Other processes hold {fb(f.others_bytes)} of the {fb(f.total)} device, and the device had "
                f"{fb(f.free)} free when the message was printed, {fb(f.free - q)} more than the {fb(q)} requested: "
                "their use changed while the job allocated (a co-tenant racing the job for memory), not a cap.")
    return (f"{fb(f.outside)} of the {fb(f.total)} device is used outside PyTorch's allocator (other processes, "
            "the CUDA context, library workspaces and buffers), more than PyTorch's own cached free memory "
            f"({fb(f.cached_free or 0)}).")


def process_sentences(f: OomFacts) -> list[str]:
    """The other processes by pid and size, what the message cannot list, and the job's own entry."""
    gpu = f" on GPU {f.device}" if f.device is not None else ""
    out = []
    if f.others:
        listed = ", ".join(f"process {p.pid} ({fb(p.bytes)})" for p in sorted(f.others, key=lambda p: -p.bytes))
        held = sum(p.bytes for p in f.others)
        out.append(f"Other processes{gpu} hold {fb(held)}: {listed}. Stop them or move them to another GPU, or give "
                   "this job a GPU of its own (CUDA_VISIBLE_DEVICES).")
    elif f.total is not None and (f.others_bytes or 0) >= 0.1 * f.total:
        why = "PyTorch before 2.1 does not list them" if f.era in LEGACY_FRACTION else "NVML cannot see them from here"
        out.append(f"The message lists no other process ({why}): nvidia-smi shows who holds the "
                   f"{fb(f.others_bytes)} outside this job{gpu}.")
    out.extend(f"Process {p.pid} ({fb(p.bytes)}) is this job itself, so it is left out: stopping it would stop the "
               "job." for p in f.processes if p.own)
    return out


def _own_memory_matters(f: OomFacts) -> bool:
    """Whether the job's own memory outside the allocator is a real share of the device (not where other processes
    hold most of it)."""
    if co_tenant(f):
        return False
    floor = max(GiB, OWN_SHARE * (f.total or 0))
    if f.job_bytes is not None and f.reserved is not None:
        return f.job_bytes - f.reserved >= floor
    if f.outside is None:
        return True
    return f.outside - sum(p.bytes for p in f.others) >= floor


def cap_advice(f: OomFacts, helps: dict[str, bool], in_force: InForce) -> list[str]:
    cap, q = f.cap, f.requested
    used = f.reserved if f.reserved is not None else (f.allocated if f.era == "async" else None)
    if cap is not None and q > cap:
        return [f"The request alone ({fb(q)}) is more than the {fb(cap)} that the per-process memory fraction "
                f"allows{_of_device(f)}: raise the fraction (torch.cuda.set_per_process_memory_fraction) or split the "
                "computation."]
    if cap is not None and used is not None and (used + q > cap or close(used + q, cap)):
        return [f"A per-process memory fraction caps PyTorch at {fb(cap)}{_of_device(f)}, and {fb(used)} reserved "
                f"plus {fb(q)} requested passes it. Raise or remove torch.cuda.set_per_process_memory_fraction."]
    return _unseen_limit(f)


def _of_device(f: OomFacts) -> str:
    return f" of the {fb(f.total)} device" if f.total is not None else ""


def _unseen_limit(f: OomFacts) -> list[str]:
    """The device had the room and the message shows no cap: a limit its figures do not show."""
    hidden_fraction = f.allowed is None and f.era not in LEGACY_FRACTION
    limits = ("a memory fraction, which PyTorch 2.1 to 2.4 do not print; " if hidden_fraction else "") + (
        "MIG or MPS limits; or the driver's own accounting, as under Windows WDDM")
    out = [f"The device reported {fb(f.free)} free, {fb(f.free - f.requested)} more than the {fb(f.requested)} "
           f"requested, yet the allocation failed: a limit outside PyTorch's figures applied ({limits})."]
    if f.cap is not None:
        out.append(f"A memory fraction caps PyTorch at {fb(f.cap)}: it may be the limit, but the message does not say "
                   "how much PyTorch reserved, so whether the request passed it is not known.")
    if f.fraction_is_whole:
        out.append("The memory fraction is 1.0 (the message's allowed figure is the whole device): raising it "
                   "cannot help.")
    check = " and torch.cuda.set_per_process_memory_fraction" if hidden_fraction else ""
    out.append(f"Check the GPU's partitioning and limits (nvidia-smi){check}.")
    if f.others:
        out.extend(process_sentences(f)[:1])
    elif f.total is not None and (f.others_bytes or 0) >= 0.1 * f.total:
        out.append(f"{fb(f.others_bytes)} of the device is held outside PyTorch (other processes, the CUDA context): "
                   "if other processes allocate and free while the job runs, they can take the room between the "
                   "failure and the message; nvidia-smi shows them.")
    return out


def undetermined_advice(f: OomFacts, helps: dict[str, bool], in_force: InForce) -> list[str]:
    if f.era == "thc":
        first = ("This message carries no figures (PyTorch before 1.0): fragviz cannot tell exhaustion from "
                 "fragmentation. Record a snapshot with a current PyTorch to know more.")
    elif f.era == "async" and None not in (f.total, f.free, f.allocated):
        first = (f"The cudaMallocAsync backend does not print what its pool caches: "
                 f"{fb(f.total - f.free - f.allocated)} of the device is neither free nor held by live tensors (the "
                 "pool's cache, the CUDA context, other processes), and the message does not say which. "
                 "torch.cuda.memory_reserved() and nvidia-smi at the failure would.")
    else:
        names = ", ".join(FIGURES[k] for k in f.unread) or "the figures the causes need"
        first = (f"The figures read do not tell the cause: {names} could not be read. Paste the whole message as "
                 "PyTorch printed it (it ends with \"See documentation for Memory Management\"), or record a "
                 "snapshot (fragviz capture).")
    return [first, REDUCE]
