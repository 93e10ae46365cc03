"""What kind of memory an allocation is, read from its stack: the rules in one place, overridable by the user.

An allocation's kind is that of the first rule, in the order below, whose pattern matches any frame of the
stack it was allocated from (a frame reads "filename:function"; patterns are Python regular expressions,
searched). Rules from the `[kinds]` table of fragviz.toml come before these defaults, in the same kind
order, so a user can claim a frame the defaults would put elsewhere:

    [kinds]
    kv_cache = ["my_model/cache\\.py:"]     # extra patterns, tried before every default rule
    parameters = [":load_weights$"]

An allocation whose stack no rule matches is `other`. An allocation without a recorded stack is never `other`: it
is `no_stack` ("no stack recorded"), or `parameters_inferred` where the rule in stackless.py holds; neither can
be claimed by a rule.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Sequence

import numpy as np

from fragviz.base.errors import UsageError
from fragviz.model import Block, Frame, Segment
from fragviz.base.settings import config_path, config_table

RULE_KINDS = ("parameters", "gradients", "optimizer_state", "activations", "kv_cache")  # what rules may assign
INFERRED_PARAMETERS = "parameters_inferred"  # no stack, but the rule of stackless.py holds: shown as inferred
NO_STACK_KIND = "no_stack"
KINDS = (*RULE_KINDS[:1], INFERRED_PARAMETERS, *RULE_KINDS[1:], NO_STACK_KIND, "other")
KIND_LABELS = {"parameters": "parameters", INFERRED_PARAMETERS: "parameters (inferred)", "gradients": "gradients",
               "optimizer_state": "optimizer state", "activations": "activations and temporaries",
               "kv_cache": "KV cache", NO_STACK_KIND: "no stack recorded", "other": "other"}

# (kind, pattern), tried in this order: the more specific kinds first, activations (anything under a
# module's forward) last, because a KV cache or a recomputation in backward also runs under a forward.
DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    # KV caches: HF transformers' cache_utils (DynamicCache.update), vLLM's cache_engine, paged attention
    ("kv_cache", r"kv_?cache|KVCache|cache_engine|cache_utils\w*\.py:|paged_?attention|PagedAttention|"
                 r"past_key_values?|:(allocate_kv|_allocate_kv_cache)"),
    # Optimizer state and the optimizer's step: torch.optim (Adam's _init_group creates exp_avg and
    # exp_avg_sq), its foreach/fused kernels, and optimizers outside torch (apex, bitsandbytes, DeepSpeed)
    ("optimizer_state", r"/torch/optim/|/optim/\w+\.py:|:(_init_group|_multi_tensor_\w+|_single_tensor_\w+|"
                        r"_fused_\w+)$|/apex/optimizers/|/bitsandbytes/optim/|/deepspeed/runtime/zero/"),
    # Gradients and the backward pass: Tensor.backward, torch.autograd.backward/grad, the C++ autograd engine
    # and its generated *Backward nodes. Not torch::autograd::VariableType or THPVariable_*: every forward
    # op passes through those.
    ("gradients", r"/torch/autograd/(__init__|graph)\.py:|_tensor\.py:backward$|torch::autograd::Engine|"
                  r"torch::autograd::python::PythonEngine|torch::autograd::generated::\w*Backward|"
                  r"AccumulateGrad|:backward$"),
    # Parameters and buffers: module construction and init, Module.to/cuda/_apply, loading weights
    ("parameters", r"/torch/nn/modules/\w+\.py:(__init__|reset_parameters)$|/torch/nn/init\.py:|"
                   r"/torch/nn/parameter\.py:|module\.py:(_apply|to|cuda|load_state_dict|_load_from_state_dict)$|"
                   r":from_pretrained$|/safetensors/|:load_checkpoint$"),
    # Activations and temporaries: whatever a module's forward allocates
    ("activations", r":forward$|module\.py:_(wrapped_)?call_impl$"),
)


@dataclass(frozen=True)
class KindRules:
    """Compiled rules: (kind, regex) in the order they are tried."""

    rules: tuple[tuple[str, re.Pattern], ...]
    source: str  # where the user's rules came from ("" for the defaults alone)

    def kind_of(self, frames: Sequence[Frame]) -> str:
        if not frames:
            return NO_STACK_KIND
        texts = [f"{f.filename}:{f.name}" for f in frames]
        for kind, pattern in self.rules:
            if any(pattern.search(t) for t in texts):
                return kind
        return "other"

    def kind_indices(self, frames: Sequence[Frame], stacks: Sequence[Sequence[int]]) -> np.ndarray:
        """The KINDS index of every stack (given as indices into `frames`), each distinct frame matched once."""
        masks = [sum(1 << i for i, (_, p) in enumerate(self.rules) if p.search(f"{f.filename}:{f.name}"))
                 for f in frames]
        out = np.full(len(stacks), KINDS.index("other"), np.int8)
        for i, stack in enumerate(stacks):
            if not stack:
                out[i] = KINDS.index(NO_STACK_KIND)
                continue
            hit = 0
            for f in stack:
                hit |= masks[f]
            if hit:
                first = (hit & -hit).bit_length() - 1  # the lowest rule that matches any frame
                out[i] = KINDS.index(self.rules[first][0])
        return out


def compile_rules(user: dict[str, object] | None = None, source: str = "") -> KindRules:
    """The defaults, preceded by the user's patterns ({kind: [pattern, ...]}); bad ones raise UsageError."""
    where = source or "the [kinds] rules"
    ordered: list[tuple[str, re.Pattern]] = []
    for kind, patterns in (user or {}).items():
        if kind not in RULE_KINDS:
            raise UsageError(f"{where}: unknown kind '{str(kind)[:80]}' in [kinds] (known: {', '.join(RULE_KINDS)})")
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise UsageError(f"{where}: [kinds] {kind} must be a list of regular expressions (strings)")
        ordered.extend((kind, _compiled(p, kind, where)) for p in patterns)
    ordered.sort(key=lambda rule: KINDS.index(rule[0]))  # user rules in kind order, each kind's as written
    ordered.extend((kind, re.compile(p)) for kind, p in DEFAULT_RULES)
    return KindRules(tuple(ordered), source)


def _compiled(pattern: str, kind: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{where}: [kinds] {kind}: '{pattern[:80]}' is not a regular expression ({exc})") from None


def current_rules() -> KindRules:
    """The rules in force: the defaults and the [kinds] table of the fragviz.toml in use."""
    return _cached_rules(json.dumps(config_table("kinds"), sort_keys=True, default=str), config_path() or "")


@lru_cache(maxsize=8)
def _cached_rules(table: str, source: str) -> KindRules:
    return compile_rules(json.loads(table), source)


def kind_totals(segments: Iterable[Segment], kind_of_block: Callable[[Block], str]) -> dict[str, int]:
    """Live bytes by kind in a state: every active block's size (pending frees included), every kind listed.

    The values sum to the state's allocated bytes.
    """
    totals = dict.fromkeys(KINDS, 0)
    for seg in segments:
        for b in seg.blocks:
            if b.state.is_active:
                totals[kind_of_block(b)] += b.size
    return totals


class StackKinds:
    """The kind of each of a snapshot's stacks, classified once: `frames_of(stack)` gives a stack's frames."""

    def __init__(self, frames_of: Callable[[int], Sequence[Frame]], rules: KindRules | None = None) -> None:
        self._frames_of, self._rules = frames_of, rules or current_rules()
        self._known: dict[int, str] = {}

    def __call__(self, stack: int) -> str:
        if stack < 0:
            return NO_STACK_KIND
        kind = self._known.get(stack)
        if kind is None:
            kind = self._known[stack] = self._rules.kind_of(self._frames_of(stack))
        return kind
