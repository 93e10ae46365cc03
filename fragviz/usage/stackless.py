"""Allocations without a recorded stack: why they have none, and when they are shown as parameters (inferred).

Why an allocation has no stack is read from what the snapshot records (one reason per allocation):

- NO_STACKS: nothing in the snapshot carries a stack (no block, no segment, no trace entry): memory history was
  not recorded, or was recorded without stacks (context=None; a torch.cuda.memory_snapshot() list has none).
- TRACE_WITHOUT_STACKS: made by an `alloc` of the trace, whose entries carry no stack while the snapshot has stacks
  elsewhere: history recorded with context='state', which keeps stacks only on the blocks of the final state.
- BEFORE_RECORDING: live before the trace's first event (or in a snapshot without a trace) in a snapshot that
  records stacks: allocated before memory history recording started. PyTorch keeps a block's stack only when it
  was allocated while history was recorded (a recording stopped for a while has the same effect).

The rule for "parameters (inferred)". An allocation without a stack is shown as `parameters_inferred` when all hold:

1. its reason is BEFORE_RECORDING (the snapshot records stacks, so the lack of one dates the allocation);
2. it is live in every state of a device trace with events: allocated before the trace began, never freed in it;
3. the device's trace shows a training step: some of its allocations (with stacks) are gradients and some are
   optimizer state, by the kind rules.

Memory that predates the recording and outlives a whole step (forward, backward and the optimizer's step), while
the step's gradients and optimizer state are recognised by their own stacks, is in the common case the model's
parameters. It is not proof: buffers, a data set kept on the GPU, or gradients and optimizer state from before
the recording look the same. So it is never shown as plain parameters: the kind says "inferred" and its note says
why, wherever it appears.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from fragviz.model import Block, Snapshot
from fragviz.usage.kinds import INFERRED_PARAMETERS, KINDS, NO_STACK_KIND, StackKinds
from fragviz.usage.lifetimes import Lifetimes

NO_STACKS = "no_stacks"
TRACE_WITHOUT_STACKS = "trace_without_stacks"
BEFORE_RECORDING = "before_recording"
REASONS = (BEFORE_RECORDING, TRACE_WITHOUT_STACKS, NO_STACKS)
REASON_TEXT = {
    BEFORE_RECORDING: "allocated before memory history recording started: this snapshot records stacks, but "
                      "PyTorch keeps a block's stack only when it is allocated while history is recorded",
    TRACE_WITHOUT_STACKS: "allocated during a trace whose entries carry no stacks: history was recorded with "
                          "context='state', which keeps stacks only on the blocks of the final state",
    NO_STACKS: "recorded without stacks: no block, segment or trace entry of this snapshot carries one (memory "
               "history was not recorded, or was recorded with context=None)",
}
INFERRED_TEXT = ("inferred, not recorded: blocks without a stack, allocated before the trace began and live to its "
                 "end, in a training run whose trace shows gradients and optimizer state; most likely the model's "
                 "parameters, though buffers or state kept from before the recording would look the same")
_GRADIENTS, _OPTIMIZER = KINDS.index("gradients"), KINDS.index("optimizer_state")
_INFERRED, _NO_STACK = KINDS.index(INFERRED_PARAMETERS), KINDS.index(NO_STACK_KIND)


@dataclass(frozen=True)
class Stackless:
    """What a device's allocations without a stack are taken for."""

    kinds: np.ndarray  # per lifetime row: its KINDS index, the rule of this module applied
    reasons: tuple[str, ...]  # why the rows left as "no stack recorded" have none (REASONS order)
    inferred_addresses: frozenset[int]  # addresses of the rows shown as parameters (inferred)

    def notes(self, *shown: dict[str, int]) -> dict[str, str]:
        """Each stackless kind of the device, with what is said of it wherever kinds are listed; with `shown`
        (live bytes by kind in some states), only the kinds holding bytes in one of them."""
        out = {}
        if self.inferred_addresses:
            out[INFERRED_PARAMETERS] = INFERRED_TEXT
        if self.reasons:
            out[NO_STACK_KIND] = "; ".join(REASON_TEXT[r] for r in self.reasons)
        if shown:
            out = {kind: text for kind, text in out.items() if any(totals.get(kind) for totals in shown)}
        return out


def stackless(lifetimes: Lifetimes, kinds: np.ndarray, snapshot_has_stacks: bool) -> Stackless:
    """The rule of the module docstring over a device's allocations; `kinds` is each row's KINDS index read from
    its stack (NO_STACK_KIND's where it has none)."""
    bare = lifetimes.stack < 0
    made = lifetimes.start > 0
    whole = ~made & (lifetimes.end >= lifetimes.states) & (lifetimes.states > 1)
    recorded = kinds[~bare]
    training = bool((recorded == _GRADIENTS).any() and (recorded == _OPTIMIZER).any())
    inferred = bare & whole & training & snapshot_has_stacks
    out = np.where(inferred, _INFERRED, np.where(bare, _NO_STACK, kinds)).astype(np.int64)
    left = bare & ~inferred
    found = {_reason(bool(m), snapshot_has_stacks) for m in np.unique(made[left])}
    return Stackless(out, tuple(r for r in REASONS if r in found),
                     frozenset(lifetimes.address[inferred].tolist()))


def _reason(made_in_trace: bool, snapshot_has_stacks: bool) -> str:
    if not snapshot_has_stacks:
        return NO_STACKS
    return TRACE_WITHOUT_STACKS if made_in_trace else BEFORE_RECORDING


class BlockKinds:
    """The kind of a block in any state of one device: its stack's, or without one, parameters (inferred) where
    the rule holds (such an allocation holds its address in every state), else no stack recorded."""

    def __init__(self, of_stack: Callable[[int], str], inferred_addresses: frozenset[int]) -> None:
        self._of_stack, self._inferred = of_stack, inferred_addresses

    def __call__(self, block: Block) -> str:
        if block.stack < 0 and block.address in self._inferred:
            return INFERRED_PARAMETERS
        return self._of_stack(block.stack)


def device_kinds(snapshot: Snapshot, lifetimes: Lifetimes) -> tuple[BlockKinds, Stackless]:
    """The kinds of a device's blocks, and its stackless allocations, for a report read from blocks."""
    of_stack = StackKinds(snapshot.stack_frames)
    unique, inverse = np.unique(lifetimes.stack, return_inverse=True)
    by_stack = np.array([KINDS.index(of_stack(int(s))) for s in unique], np.int64)
    found = stackless(lifetimes, by_stack[inverse.reshape(-1)], len(snapshot.stacks) > 0)
    return BlockKinds(of_stack, found.inferred_addresses), found
