"""What each of a snapshot's stacks says: the allocation site a user would look at, the kind of memory it
allocates, its first user frame, and its frames as one line of text. Pure: frames and stacks in, facts out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fragviz.model import Frame
from fragviz.snapshot.frames import is_user_frame
from fragviz.usage.kinds import KINDS, NO_STACK_KIND, KindRules, current_rules
from fragviz.usage.sites import NO_STACK_SITE, site_label

FRAME_SEPARATOR = " <- "  # between a stack's frames, innermost first


@dataclass(frozen=True)
class StackFacts:
    """Per stack of a snapshot (its local numbering): the allocation site, its kind, and the first user frame."""

    site: np.ndarray  # index into sites; allocations without a stack get NO_STACK_SITE's
    kind: np.ndarray  # index into KINDS (of the stack alone: stackless.py says what stackless allocations are)
    sites: list[str]
    first_user: list[str]

    def of(self, stacks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site and kind indices of allocations with these stacks."""
        known = (stacks >= 0) & (stacks < len(self.site))
        safe = np.where(known, stacks, 0)
        site = np.where(known, self.site[safe] if len(self.site) else 0, self.sites.index(NO_STACK_SITE))
        kind = np.where(known, self.kind[safe] if len(self.kind) else 0, KINDS.index(NO_STACK_KIND))
        return site.astype(np.int64), kind.astype(np.int64)


def stack_facts(frames: Sequence[Frame], stacks: Sequence[Sequence[int]], rules: KindRules | None = None) -> StackFacts:
    """The facts of every stack (frame indices into `frames`, innermost first), under `rules` (default: in force)."""
    user = [is_user_frame(f) for f in frames]
    labels: dict[str, int] = {}
    site = np.zeros(len(stacks), np.int64)
    first_user = []
    for i, stack in enumerate(stacks):
        fr = [frames[f] for f in stack]
        site[i] = labels.setdefault(site_label(fr) if fr else NO_STACK_SITE, len(labels))
        top = next((frames[f] for f in stack if user[f]), None)
        first_user.append(f"{top.filename}:{top.line} {top.name}" if top else "")
    labels.setdefault(NO_STACK_SITE, len(labels))
    return StackFacts(site, (rules or current_rules()).kind_indices(frames, stacks), list(labels), first_user)


def stack_text(frames: Sequence[Frame]) -> str:
    """A stack as one line: "file:line name" of each frame, innermost first, joined by FRAME_SEPARATOR."""
    return FRAME_SEPARATOR.join(f"{f.filename}:{f.line} {f.name}" for f in frames)
