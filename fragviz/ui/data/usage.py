"""What the "what holds memory" views draw, read through the store's reader: allocations as bands, live
memory by kind or by site, and the words each band's hover shows. No Dash here."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from html import escape

import numpy as np

from fragviz.library import Library
from fragviz.base.units import format_bytes
from fragviz.usage.bands import Bands, Grid, bands_of, by_group, columns_of, grid_of
from fragviz.usage.kinds import KIND_LABELS, KINDS
from fragviz.usage.lifetimes import Lifetimes
from fragviz.usage.stackless import Stackless, stackless
from fragviz.usage.stacks import StackFacts
from fragviz.usage.stacks import stack_facts as core_stack_facts

TOP_SITES = 9  # sites drawn in colours of their own; the rest share one
OTHER_SITES = "other sites"


def stack_facts(reader: Library, sid: int) -> StackFacts:
    return core_stack_facts(*reader.stacks(sid))


@dataclass(frozen=True)
class DeviceUsage:
    """A device's allocations with their site, colour group and kind: what every view of it starts from."""

    lifetimes: Lifetimes
    site: np.ndarray  # per allocation: index into facts.sites
    kind: np.ndarray  # per allocation: index into KINDS (stackless allocations by the rule of usage/stackless.py)
    group: np.ndarray  # per allocation: its site's colour group
    group_names: list[str]  # TOP_SITES sites holding the most bytes over time, then OTHER_SITES
    facts: StackFacts
    live: np.ndarray  # live bytes in every state
    stackless: Stackless  # what the allocations without a stack are taken for, and why

    def grid(self, lo: int, hi: int | None) -> Grid:
        last = self.lifetimes.states - 1
        return grid_of(self.lifetimes, lo, last if hi is None else hi, live=self.live)


def device_usage(lifetimes: Lifetimes, facts: StackFacts) -> DeviceUsage:
    site, kind = facts.of(lifetimes.stack)
    found = stackless(lifetimes, kind, len(facts.kind) > 0)
    held = lifetimes.size * (np.minimum(lifetimes.end, lifetimes.states) - lifetimes.start)  # byte-states
    weight = np.bincount(site, weights=held, minlength=len(facts.sites))
    top = [int(s) for s in np.argsort(-weight, kind="stable")[:TOP_SITES] if weight[s] > 0]
    of_site = np.full(len(facts.sites), len(top), np.int64)
    of_site[top] = np.arange(len(top))
    return DeviceUsage(lifetimes, site, found.kinds, of_site[site], [facts.sites[s] for s in top] + [OTHER_SITES],
                       facts, lifetimes.live_bytes(0, lifetimes.states - 1), found)


@dataclass(frozen=True)
class BandView:
    """One view of the bands: the buckets, the bands and folded groups, and what each band's hover says."""

    bands: Bands
    sizes: np.ndarray  # per band (in rows order): its bytes
    group: np.ndarray  # per band: its site group
    group_names: list[str]
    hover: list[str]  # per band


@dataclass(frozen=True)
class GroupView:
    """Live bytes per group (kinds, or sites) in each bucket's drawn state."""

    grid: Grid
    values: np.ndarray  # groups x buckets
    names: list[str]
    by: str  # "kind" or "site"


class UsageViews:
    """The views of one store, with caches for what does not change (stored snapshots are immutable)."""

    def __init__(self, reader: Library) -> None:
        self.reader = reader
        self.facts = lru_cache(maxsize=8)(lambda sid: stack_facts(reader, sid))
        self.usage = lru_cache(maxsize=4)(self._usage)

    def _usage(self, sid: int, device: int) -> DeviceUsage:
        return device_usage(self.reader.lifetimes(sid, device), self.facts(sid))

    def view(self, sid: int, device: int, by: str, lo: int = 0, hi: int | None = None) -> tuple[BandView, GroupView]:
        """The bands and the live bytes per kind (by="kind") or per site over states lo..hi, on one grid."""
        u = self.usage(sid, device)
        grid = u.grid(lo, hi)
        cols = columns_of(u.lifetimes, grid)
        bands = bands_of(u.lifetimes, grid, u.group, len(u.group_names), cols=cols)
        band_view = BandView(bands, u.lifetimes.size[bands.rows], u.group[bands.rows], u.group_names,
                             band_hovers(u, bands.rows))
        group, names = (u.kind, list(KINDS)) if by == "kind" else (u.group, u.group_names)
        return band_view, GroupView(grid, by_group(u.lifetimes, grid, group, len(names), cols=cols), names, by)

    def kind_notes(self, sid: int, device: int) -> dict[str, str]:
        """What the card that lists kinds says of the device's stackless kinds (why they have no stack, and the
        rule behind parameters (inferred)), by kind; empty where every allocation has a stack."""
        return self.usage(sid, device).stackless.notes()

    def allocation(self, sid: int, device: int, row: int) -> dict:
        """One allocation's record, for the stack panel."""
        u = self.usage(sid, device)
        lt = u.lifetimes
        return {"stack": int(lt.stack[row]), "facts": band_facts(u, np.asarray([row]))[0],
                "size": int(lt.size[row]), "address": int(lt.address[row])}


def band_facts(u: DeviceUsage, rows: np.ndarray) -> list[list[str]]:
    """The words for each allocation, as plain lines: size, requested size and address; lifetime in events
    and time; site; kind; the first user frame where it is not the site."""
    lt, last = u.lifetimes, u.lifetimes.states - 1
    cols = [c[rows].tolist() for c in (lt.start, lt.end, lt.size, lt.requested, lt.address, lt.start_us, lt.end_us,
                                       lt.stack, u.site, u.kind)]
    out = []
    for start, end, size, requested, address, start_us, end_us, stack, site, kind in zip(*cols):
        lines = [f"{format_bytes(size)} (requested {format_bytes(requested)}) at {address:#x}",
                 f"{_life(start, end, last)}{_duration(start_us, end_us)}", f"site {u.facts.sites[site]}",
                 f"kind {KIND_LABELS[KINDS[kind]]}"]
        frame = u.facts.first_user[stack] if 0 <= stack < len(u.facts.first_user) else ""
        if frame and not u.facts.sites[site].startswith(frame):
            lines.append(f"first user frame {frame}")
        out.append(lines)
    return out


def band_hovers(u: DeviceUsage, rows: np.ndarray) -> list[str]:
    """The same words as HTML for the pointer's box: escaped, the first line in bold."""
    return ["<br>".join([f"<b>{escape(lines[0], quote=False)}</b>"] + [escape(line, quote=False) for line in lines[1:]])
            for lines in band_facts(u, rows)]


def _life(start: int, end: int, last: int) -> str:
    states = f"{min(end, last + 1) - start:,} states"
    if start == 0 and end > last:
        return f"live from before the trace to its end ({states})"
    if start == 0:
        # PyTorch records no alloc for it: its stack is the one recorded with its free
        return f"allocated before the trace, freed at event {end - 1} ({states}; the stack is the free's)"
    if end > last:
        return f"allocated at event {start - 1}, still live at the end ({states})"
    return f"allocated at event {start - 1}, freed at event {end - 1} ({states})"


def _duration(start_us: int, end_us: int) -> str:
    if start_us < 0 or end_us < 0:
        return ""
    seconds = (end_us - start_us) / 1e6
    return f", {seconds * 1000:.3g} ms" if seconds < 1 else f", {seconds:.3g} s"
