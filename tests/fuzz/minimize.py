"""Cut a failing input down while it still fails the same way (same kind, step, exception and function).

Generated inputs are cut as trees (keys and items removed, nesting made shallower, subtrees replaced by
scalars) and written again with their own encoding; any input small enough is then cut as bytes.
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable

from .case import Case
from .encode import Nest
from .harness import Outcome

Check = Callable[[Case], Outcome]


class Minimizer:
    def __init__(self, check: Check, signature: tuple, max_runs: int = 200, max_seconds: float = 60.0) -> None:
        self.check, self.signature = check, signature
        self.runs, self.max_runs = 0, max_runs
        self.stop_at = time.monotonic() + max_seconds

    def spent(self) -> bool:
        return self.runs >= self.max_runs or time.monotonic() > self.stop_at

    def fails(self, case: Case) -> bool:
        self.runs += 1
        return any(f.signature() == self.signature for f in self.check(case).failures)

    # trees --------------------------------------------------------------------------------------
    def tree(self, case: Case) -> Case:
        recipe = copy.deepcopy(case.recipe)
        if recipe is None:
            return case
        best = case
        changed = True
        while changed and not self.spent():
            changed = False
            for parent, key in list(_containers(recipe.tree)):
                if self.spent():
                    break
                if self._try_cuts(recipe, parent, key):
                    changed = True
            data = recipe.encode()
            if len(data) < len(best.data):
                best = Case(case.name + "/min", data, case.family, copy.deepcopy(recipe))
        return best

    def _attempt(self, recipe: Any) -> bool:
        return self.fails(Case("minimize", recipe.encode(), "min", recipe))

    def _try_cuts(self, recipe: Any, parent: Any, key: Any) -> bool:
        if (key not in parent) if isinstance(parent, dict) else not (isinstance(key, int) and key < len(parent)):
            return False  # an earlier cut removed it
        node = parent[key]
        if isinstance(node, list) and len(node) > 1:
            for keep in (node[: len(node) // 2], node[len(node) // 2:], node[:1]):
                parent[key] = keep
                if self._attempt(recipe):
                    return True
            parent[key] = node
        if isinstance(node, dict):
            for k in list(node):
                if self.spent():
                    break
                value = node.pop(k)
                if self._attempt(recipe):
                    return True
                node[k] = value
        if isinstance(node, Nest) and node.depth > 1:
            parent[key] = Nest(node.depth // 2, node.leaf, node.kind)
            if self._attempt(recipe):
                return True
            parent[key] = node
        if isinstance(parent, list) and len(parent) > 1 and isinstance(key, int) and key < len(parent):
            del parent[key]
            if self._attempt(recipe):
                return True
            parent.insert(key, node)
        if isinstance(node, (dict, list)) and node:
            for small in (0, None):
                parent[key] = small
                if self._attempt(recipe):
                    return True
            parent[key] = node
        return False

    # bytes --------------------------------------------------------------------------------------
    def bytes(self, case: Case, limit: int = 64 * 1024) -> Case:
        data = case.data
        if len(data) > limit:
            return case
        chunk = max(1, len(data) // 2)
        while chunk >= 1 and not self.spent():
            i, cut = 0, False
            while i < len(data) and not self.spent():
                trial = data[:i] + data[i + chunk:]
                if trial and self.fails(Case("minimize", trial, "min")):
                    data, cut = trial, True
                else:
                    i += chunk
            if not cut:
                chunk //= 2
        return Case(case.name + "/min", data, case.family) if len(data) < len(case.data) else case


def _containers(root: Any) -> list[tuple[Any, Any]]:
    """(parent, key) of every container below `root`, outermost first, each visited once."""
    out, seen, frontier = [], set(), [root]
    while frontier:
        nxt = []
        for node in frontier:
            if id(node) in seen:
                continue
            seen.add(id(node))
            keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
            for k in keys:
                child = node[k]
                out.append((node, k))
                if isinstance(child, (dict, list)):
                    nxt.append(child)
        frontier = nxt
    return [(p, k) for p, k in out if isinstance(p[k], (dict, list, Nest))] + \
           [(p, k) for p, k in out if not isinstance(p[k], (dict, list, Nest))]


def minimize(case: Case, signature: tuple, check: Check, max_runs: int = 200, max_seconds: float = 60.0) -> Case:
    """The smallest input found that still fails with `signature` (the input itself when none is)."""
    m = Minimizer(check, signature, max_runs, max_seconds)
    if signature[0] in ("hang", "worker-died"):
        m.max_runs = min(max_runs, 6)  # each try can cost a whole deadline
    smaller = m.tree(case)
    return m.bytes(smaller) if smaller.family != "gzip" else smaller
