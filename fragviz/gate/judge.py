"""The gate's verdict: each budget checked on a candidate run, against its baseline where one is given, and the
allocation sites whose memory at the peak grew most.

Three outcomes, as `fragviz gate` exits: every budget holds (0), one fails (1), or the gate cannot judge (2: no trace
where one is needed, a growth budget without a baseline, runs that do not compare). A gate that cannot judge says
why and never passes quietly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fragviz.allocator.config import AllocatorSettings, parse_alloc_conf
from fragviz.allocator.rules import allocation_size, round_size
from fragviz.base.units import format_bytes
from fragviz.gate.budgets import Budgets
from fragviz.gate.figures import DeviceFigures, MemorySummary
from fragviz.gate.sites import SiteBytes, by_function, match_sites
from fragviz.replay.analysis import Analysis

PASSED, FAILED, CANNOT_JUDGE = "passed", "failed", "cannot judge"
EXIT_CODES = {PASSED: 0, FAILED: 1, CANNOT_JUDGE: 2}
SITES_SHOWN = 10
BYTES, RATIO = "bytes", "ratio"


@dataclass(frozen=True)
class Check:
    """One budget on one device: passed when value <= limit."""

    name: str
    limit: float
    value: float
    baseline: float | None
    passed: bool
    device: int
    unit: str  # BYTES or RATIO
    detail: str  # the check in a sentence

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "limit": self.limit, "value": self.value, "baseline": self.baseline,
                "passed": self.passed, "device": self.device, "unit": self.unit, "detail": self.detail}


@dataclass(frozen=True)
class SiteChange:
    """An allocation site's live bytes at the reserved peak, before (the baseline; None without one) and after; the
    site is the candidate's line, `before_line` the line of the baseline site it matched (fragviz.gate.sites)."""

    site: str
    frame: str | None
    before_bytes: int | None
    after_bytes: int
    device: int
    line: int | None = None
    before_line: int | None = None

    @property
    def growth(self) -> int:
        return self.after_bytes - (self.before_bytes or 0)

    @property
    def moved(self) -> bool:
        """The baseline held this site at another line (lines added above it, or its allocation moved)."""
        return None not in (self.line, self.before_line) and self.line != self.before_line

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "frame": self.frame, "line": self.line, "before_line": self.before_line,
                "before_bytes": self.before_bytes, "after_bytes": self.after_bytes, "device": self.device}


@dataclass(frozen=True)
class DeviceFit:
    """The candidate's trace free-run on a device of `capacity` bytes: the bytes it needed (its peak reserved, or at
    its first OOM what was reserved plus what it asked for) and its OOMs."""

    device: int
    capacity: int
    needed_bytes: int
    oom_count: int
    first_oom_event: int | None
    settings: str  # the PYTORCH_CUDA_ALLOC_CONF simulated, "" for the recorded settings' defaults


@dataclass(frozen=True)
class GateResult:
    status: str
    reason: str | None
    checks: tuple[Check, ...] = ()
    sites: tuple[SiteChange, ...] = ()
    candidate: MemorySummary | None = None
    baseline: MemorySummary | None = None
    budgets: Budgets = field(default_factory=Budgets)
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def as_dict(self) -> dict[str, Any]:
        """`fragviz gate --json`."""
        return {"passed": self.passed, "status": self.status, "reason": self.reason,
                "checks": [c.as_dict() for c in self.checks], "sites": [s.as_dict() for s in self.sites],
                "candidate": self.candidate.source if self.candidate else None,
                "baseline": self.baseline.source if self.baseline else None,
                "budgets": self.budgets.as_dict(), "notes": list(self.notes)}


def cannot_judge(reason: str, budgets: Budgets = Budgets(), candidate: MemorySummary | None = None,
                 baseline: MemorySummary | None = None) -> GateResult:
    return GateResult(CANNOT_JUDGE, reason, candidate=candidate, baseline=baseline, budgets=budgets)


def judge(candidate: MemorySummary, baseline: MemorySummary | None, budgets: Budgets,
          fits: dict[int, DeviceFit] | None = None) -> GateResult:
    """Check every budget given on every traced device of the candidate. `fits` are the candidate's device-memory
    simulations (`device_fits`), needed when budgets.device_memory is set."""
    reason = _why_not(candidate, baseline, budgets, fits)
    if reason is not None:
        return cannot_judge(reason, budgets, candidate, baseline)
    checks: list[Check] = []
    many = len(candidate.devices) > 1
    for dev in candidate.devices:
        before = baseline.device(dev.device) if baseline else None
        checks.extend(_device_checks(dev, before, budgets, fits, many))
    status = PASSED if all(c.passed for c in checks) else FAILED
    return GateResult(status, None if status == PASSED else _failed_reason(checks), tuple(checks),
                      site_changes(candidate, baseline), candidate, baseline, budgets, _notes(candidate, baseline))


def _why_not(candidate: MemorySummary, baseline: MemorySummary | None, budgets: Budgets,
             fits: dict[int, DeviceFit] | None) -> str | None:
    if not candidate.devices:
        why = "; ".join(candidate.warnings) or "it holds no allocation"
        return f"{candidate.source}: nothing to judge: no device has a trace ({why})"
    if budgets.growth is not None and baseline is None:
        return "--max-growth needs a baseline (--baseline FILE, store id or summary) to grow from"
    if baseline is not None:
        ours, theirs = [d.device for d in candidate.devices], [d.device for d in baseline.devices]
        if ours != theirs:
            return (f"{candidate.source} and {baseline.source} do not compare: the candidate has traced devices "
                    f"{ours or 'none'}, the baseline {theirs or 'none'}")
        if budgets.growth is not None and candidate.simulated != baseline.simulated:
            sim = candidate if candidate.simulated else baseline
            return (f"{candidate.source} and {baseline.source} do not compare: {sim.source} was recorded on a CPU "
                    "through fragviz's allocator model, the other on a CUDA device; record both the same way")
        if budgets.growth is not None and candidate.placement != baseline.placement:
            return (f"{candidate.source} and {baseline.source} do not compare: {_counted(candidate)}, "
                    f"{_counted(baseline)}; write the baseline again from the code as it is now "
                    "(pytest --memory-update-baseline)")
    if budgets.device_memory is not None and fits is None:
        return (f"{candidate.source} is a memory summary: it holds no trace to simulate on a device of "
                f"{format_bytes(budgets.device_memory)} (--device-memory needs a snapshot file or a store id)")
    if budgets.device_memory is not None:  # a device left unsimulated would drop its budget and pass quietly
        unsimulated = [d.device for d in candidate.devices if d.device not in fits]
        if unsimulated:
            return (f"{candidate.source}: the trace of device(s) {unsimulated} holds no alloc, so there is no workload "
                    f"to simulate on a device of {format_bytes(budgets.device_memory)}")
    return None


def growth_limit(baseline: int, growth: float) -> int:
    """The most bytes a peak may reach `growth` over `baseline`, rounded down in exact decimal arithmetic: 15 % over
    200 MiB is 230 MiB, where the float product falls a byte short and a peak exactly at the limit would fail."""
    return int(baseline * (1 + Fraction(repr(growth))))


def _device_checks(dev: DeviceFigures, before: DeviceFigures | None, budgets: Budgets,
                   fits: dict[int, DeviceFit] | None, many: bool) -> list[Check]:
    on = f" on device {dev.device}" if many else ""
    out = []
    base = (lambda v: None) if before is None else (lambda v: getattr(before, v))
    if budgets.peak_reserved is not None:
        out.append(_bytes_check("peak_reserved", dev, "peak_reserved_bytes", budgets.peak_reserved,
                                base("peak_reserved_bytes"), f"peak reserved{on}"))
    if budgets.peak_allocated is not None:
        out.append(_bytes_check("peak_allocated", dev, "peak_allocated_bytes", budgets.peak_allocated,
                                base("peak_allocated_bytes"), f"peak allocated{on}"))
    if budgets.growth is not None and before is not None:
        for what in ("reserved", "allocated"):
            old = getattr(before, f"peak_{what}_bytes")
            limit = growth_limit(old, budgets.growth)
            out.append(_bytes_check(f"peak_{what}_growth", dev, f"peak_{what}_bytes", limit, old,
                                    f"peak {what}{on}", f"the {budgets.growth:.1%} growth limit "))
    if budgets.fragmentation is not None:
        value = dev.fragmentation
        ok = value <= budgets.fragmentation
        out.append(Check("fragmentation", budgets.fragmentation, value, base("fragmentation"), ok, dev.device, RATIO,
                         f"fragmentation at the reserved peak{on} {value:.1%} "
                         f"{'within' if ok else 'over'} {budgets.fragmentation:.1%}"))
    if budgets.device_memory is not None and fits is not None and dev.device in fits:
        out.append(_fit_check(fits[dev.device], on))
    return out


def _bytes_check(name: str, dev: DeviceFigures, field_name: str, limit: int, baseline: int | None,
                 what: str, limit_name: str = "") -> Check:
    value = getattr(dev, field_name)
    ok = value <= limit
    change = ""
    if baseline is not None:
        pct = f", {(value - baseline) / baseline:+.1%}" if baseline else ""
        change = f" (baseline {format_bytes(baseline)}, {_signed(value - baseline)}{pct})"
    return Check(name, limit, value, baseline, ok, dev.device, BYTES,
                 f"{what} {format_bytes(value)}{change} {'within' if ok else 'over'} {limit_name}{format_bytes(limit)}")


def _fit_check(fit: DeviceFit, on: str) -> Check:
    conf = f" with PYTORCH_CUDA_ALLOC_CONF={fit.settings}" if fit.settings else " with the recorded settings"
    if fit.oom_count:
        detail = (f"simulated on a device of {format_bytes(fit.capacity)}{conf}{on}: out of memory at event "
                  f"{fit.first_oom_event} ({fit.oom_count} OOM(s)); it needed at least {format_bytes(fit.needed_bytes)}")
    else:
        detail = (f"simulated on a device of {format_bytes(fit.capacity)}{conf}{on}: fits, peak reserved "
                  f"{format_bytes(fit.needed_bytes)}")
    return Check("fits_device", fit.capacity, fit.needed_bytes, None, fit.oom_count == 0, fit.device, BYTES, detail)


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


def _failed_reason(checks: list[Check]) -> str:
    failed = [c.detail for c in checks if not c.passed]
    return f"{len(failed)} of {len(checks)} budget(s) broken: " + "; ".join(failed)


def _counted(summary: MemorySummary) -> str:
    if summary.placement == "cuda tensors":
        return f"{summary.source} counted the tensors the code placed on CUDA"
    return f"{summary.source} counted every tensor (its code placed none on CUDA)"


def _notes(candidate: MemorySummary, baseline: MemorySummary | None) -> tuple[str, ...]:
    notes = list(candidate.warnings)
    if candidate.simulated:
        notes.append(f"recorded on a CPU by fragviz's simulated CUDA device: {_counted(candidate)}")
    for s in (candidate, baseline):
        if s is not None and any(not d.whole_run for d in s.devices):
            notes.append(f"{s.source}: the trace starts mid-run (ring buffer full, or history enabled late): its "
                         "peaks are those of the traced window")
    if baseline is not None and candidate.simulated != baseline.simulated:
        notes.append("one run was recorded on a CPU through fragviz's allocator model and the other on a CUDA "
                     "device: their figures differ by more than the change under test")
    for s in (candidate, baseline):
        if s is not None and s.sites_by_function and baseline is not None:
            notes.append(f"{s.source} is a memory summary of version 1, whose sites are functions, not lines: sites "
                         "are compared function by function; write it again with this fragviz, from the code it was "
                         "written from (pytest --memory-update-baseline, or fragviz gate --write-summary), to compare "
                         "them line by line")
    return tuple(notes)


def site_changes(candidate: MemorySummary, baseline: MemorySummary | None,
                 limit: int = SITES_SHOWN) -> tuple[SiteChange, ...]:
    """The sites whose live bytes at the reserved peak grew most (without a baseline: the candidate's largest)."""
    out: list[SiteChange] = []
    by_lines = baseline is None or not (candidate.sites_by_function or baseline.sites_by_function)
    for dev in candidate.devices:
        before = baseline.device(dev.device) if baseline else None
        if before is None:
            out.extend(SiteChange(s.site, s.frame, None, s.bytes, dev.device, s.line) for s in dev.sites)
            continue
        ours, theirs = (dev.sites, before.sites) if by_lines else (by_function(dev.sites), by_function(before.sites))
        out.extend(_change(s, was, dev.device) for s, was in match_sites(ours, theirs)
                   if s.bytes > (was.bytes if was else 0))
    if baseline is None:
        return tuple(sorted(out, key=lambda s: (-s.after_bytes, s.site))[:limit])
    return tuple(sorted(out, key=lambda s: (-s.growth, s.site))[:limit])


def _change(site: SiteBytes, was: SiteBytes | None, device: int) -> SiteChange:
    if was is None:
        return SiteChange(site.site, site.frame, 0, site.bytes, device, site.line)
    return SiteChange(site.site, site.frame, was.bytes, site.bytes, device, site.line, was.line)


def _asked(requested: int, settings: AllocatorSettings) -> int:
    """What a request that failed asked the driver for: its new segment (the request rounded, and sized as the
    allocator sizes segments); with expandable segments, at least the rounded request."""
    rounded = round_size(requested, settings)
    return rounded if settings.expandable_segments else allocation_size(rounded)


def device_fits(analysis: Analysis, device_memory: int, alloc_conf: str | None) -> dict[int, DeviceFit]:
    """Free-run each traced device's workload on a device of `device_memory` bytes, under `alloc_conf` (default:
    the recorded settings)."""
    from fragviz.simulate.whatif import refusal, run_free

    settings = analysis.settings if alloc_conf is None else parse_alloc_conf(alloc_conf)
    out = {}
    for device in analysis.replays:
        if refusal(analysis, device) is not None:
            continue
        run = run_free(analysis, device, settings, device_memory)
        figures = run.figures()
        first = run.ooms[0] if run.ooms else None
        needed = first.reserved_bytes + _asked(first.requested_bytes, settings) if first else figures.peak_reserved_bytes
        out[device] = DeviceFit(device, device_memory, needed, run.oom_count, first.event if first else None,
                                alloc_conf or "")
    return out
