"""The gate's sites on real torch code recorded on fragviz's simulated device: each site the exact line that
allocates (a leak kept in a global list named at its own line, not at the `opt.step()` line of the same function;
three `nn.Linear` lines of one `__init__` three sites), and a candidate's sites matched to its baseline's across
lines inserted above them, an allocation moved into a list comprehension or a lambda (Python 3.11 runs both in frames
of their own), and a baseline whose checkout is gone (the code of each line is kept in the summary)."""
from __future__ import annotations

import importlib.util
import itertools
import os
import textwrap

import pytest

from fragviz.gate.budgets import budgets_from_text
from fragviz.gate.figures import MemorySummary, read_summary
from fragviz.gate.judge import FAILED, PASSED, judge
from fragviz.gate.record import recording, summary_of
from fragviz.gate.report import gate_text

pytest.importorskip("torch")

KiB = 1024
_names = itertools.count()

LOOPS = '''
import torch
from torch import nn

FEATURES = []


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 128)
        self.b = nn.Linear(128, 128)
        self.c = nn.Linear(128, 10)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def train(steps=4):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(steps):
        x = torch.randn(32, 64)
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model, opt
'''
LEAK = "        FEATURES.append(model.a(x).detach())  # each step's features, kept for a plot\n"
STEP = "        opt.step()\n"


def module_text(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def line_of(path, line: str) -> int:
    return path.read_text().splitlines(keepends=True).index(line) + 1


def write(tmp_path, checkout: str, text: str):
    """proj/loops.py in a checkout folder of its own (site keys are the last two path components: the same file in
    two checkouts)."""
    path = tmp_path / checkout / "proj" / "loops.py"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def recorded(path, call: str, source: str) -> MemorySummary:
    """`call` of the module at `path` recorded on the simulated device, its sites relative to the checkout."""
    spec = importlib.util.spec_from_file_location(f"gate_sites_{next(_names)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with recording(device="simulated") as rec:
        kept = getattr(module, call)()  # what the call returns stays live, as a caller's state would
    del kept
    summary, _analysis = summary_of(rec, source, str(path.parent.parent))
    return summary


def grown(candidate: MemorySummary, baseline: MemorySummary, growth: str = "100%"):
    return judge(candidate, baseline, budgets_from_text(growth=growth))


# -- the line that allocates ----------------------------------------------------------------------------------------

def test_a_leak_in_a_global_list_is_named_at_its_own_line_not_at_opt_step(tmp_path):
    base = recorded(write(tmp_path, "base", LOOPS.lstrip("\n")), "train", "base")
    text = LOOPS.lstrip("\n").replace("        loss = model(x).sum()\n", LEAK + "        loss = model(x).sum()\n")
    path = write(tmp_path, "leak", text)
    result = grown(recorded(path, "train", "leak"), base, "0%")
    assert result.status == FAILED
    leak_site = f"proj/loops.py:{line_of(path, LEAK)} train"
    assert result.sites[0].site == leak_site, gate_text(result)
    # every step's features kept: 16 KiB each (32 x 128 floats), none in the baseline
    assert (result.sites[0].before_bytes, result.sites[0].after_bytes) == (0, 4 * 32 * 128 * 4)
    step_site = f"proj/loops.py:{line_of(path, STEP)} train"
    assert step_site not in {s.site for s in result.sites}, gate_text(result)  # the optimizer's state did not grow
    assert f"{leak_site}\n" in gate_text(result) + "\n"


def test_three_linear_layers_of_one_init_are_three_sites(tmp_path):
    path = write(tmp_path, "base", LOOPS.lstrip("\n"))
    (dev,) = recorded(path, "train", "base").devices
    init = {s.line: (s.code, s.bytes) for s in dev.sites if s.key == "proj/loops.py __init__"}
    weights = {"self.a = nn.Linear(64, 128)": (64 * 128 + 128) * 4,
               "self.b = nn.Linear(128, 128)": (128 * 128 + 128) * 4,
               "self.c = nn.Linear(128, 10)": (128 * 10 + 10) * 4}
    assert {code for code, _ in init.values()} == set(weights)
    for line, (code, size) in init.items():
        assert line == line_of(path, f"        {code}\n")
        # weight and bias, each rounded up to the allocator's 512 bytes
        assert weights[code] <= size < weights[code] + 1024, code
    assert all(s.site == f"proj/loops.py:{s.line} {s.site.split()[-1]}" for s in dev.sites)


# -- matched to the baseline ------------------------------------------------------------------------------------------

BUILD = '''
import torch


def build():
    torch.manual_seed(0)
    weights = torch.randn(256, 256)
    xs = torch.randn(3, 256, 256)
    return weights, xs
'''
COMPREHENSION = BUILD.replace("    xs = torch.randn(3, 256, 256)\n",
                              "    xs = [torch.randn(256, 256) for _ in range({n})]\n")
LAMBDA = BUILD.replace("    xs = torch.randn(3, 256, 256)\n",
                       "    make = lambda: torch.randn({n}, 256, 256)\n    xs = make()\n")
SHIFTED = BUILD.replace("import torch\n", "import torch\n\nSEED = 0  # lines added above every site\n\n")
XS = 3 * 256 * 256 * 4


@pytest.mark.parametrize("changed", [COMPREHENSION, LAMBDA], ids=["list-comprehension", "lambda"])
def test_an_allocation_moved_into_a_comprehension_or_a_lambda_is_the_same_site(tmp_path, changed):
    base = recorded(write(tmp_path, "base", BUILD.lstrip("\n")), "build", "base")
    path = write(tmp_path, "same", changed.format(n=3).lstrip("\n"))
    same = recorded(path, "build", "same")
    (dev,) = same.devices
    assert {s.key for s in dev.sites} == {"proj/loops.py build"}  # <listcomp> and <lambda> count as build
    result = grown(same, base, "0%")
    assert result.status == PASSED and result.sites == (), gate_text(result)  # not a new site of 0 B -> 768 KiB
    text = changed.format(n=4).lstrip("\n")
    bigger = grown(recorded(write(tmp_path, "more", text), "build", "more"), base)
    (site,) = bigger.sites  # the comprehension's or the lambda's line, grown from the line it replaced
    line = next(i for i, code in enumerate(text.splitlines(), 1) if "lambda" in code or " for _ " in code)
    assert (site.line, site.before_bytes, site.after_bytes) == (line, XS, XS // 3 * 4)


def test_lines_inserted_above_leave_every_site_matched(tmp_path):
    base = recorded(write(tmp_path, "base", BUILD.lstrip("\n")), "build", "base")
    path = write(tmp_path, "shifted", SHIFTED.lstrip("\n"))
    shifted = recorded(path, "build", "shifted")
    assert [s.line for s in shifted.devices[0].sites] == [s.line + 3 for s in base.devices[0].sites]
    result = grown(shifted, base, "0%")
    assert result.status == PASSED and result.sites == ()
    # a site that grew is reported at its new line, with its line in the baseline
    grew = SHIFTED.replace("torch.randn(3, 256, 256)", "torch.randn(4, 256, 256)")
    result = grown(recorded(write(tmp_path, "grew", grew.lstrip("\n")), "build", "grew"), base)
    (site,) = result.sites
    old_line = line_of(tmp_path / "base" / "proj" / "loops.py", "    xs = torch.randn(3, 256, 256)\n")
    assert (site.site, site.before_bytes, site.after_bytes, site.before_line) == (
        f"proj/loops.py:{old_line + 3} build", XS, XS // 3 * 4, old_line)
    assert f"proj/loops.py:{old_line + 3} build (line {old_line} in the baseline)" in gate_text(result)


def test_a_baseline_whose_checkout_is_gone_still_matches_by_its_code(tmp_path):
    base_path = write(tmp_path, "base", BUILD.lstrip("\n"))
    summary_file = tmp_path / "baseline.json"
    summary_file.write_text(recorded(base_path, "build", "base").to_json())
    base_path.unlink()
    baseline = read_summary(str(summary_file))
    assert {s.code for s in baseline.devices[0].sites} == {"weights = torch.randn(256, 256)",
                                                           "xs = torch.randn(3, 256, 256)"}
    # the two lines swapped and shifted: the code says which is which, not the nearest line
    swapped = SHIFTED.replace("    weights = torch.randn(256, 256)\n    xs = torch.randn(3, 256, 256)\n",
                              "    xs = torch.randn(3, 256, 256)\n    weights = torch.randn(256, 256)\n")
    result = grown(recorded(write(tmp_path, "swapped", swapped.lstrip("\n")), "build", "swapped"), baseline, "0%")
    assert result.status == PASSED and result.sites == (), gate_text(result)
    assert not os.path.exists(base_path)


# -- which frame is the user's -----------------------------------------------------------------------------------------

HOOKS = '''
import copy

import torch
from torch import nn


class Hooks:
    def on_train_batch_start(self):
        return torch.zeros(64, 1024)


def copies():
    model = nn.Linear(256, 256)
    ema = copy.deepcopy(model)
    return model, ema, Hooks().on_train_batch_start()
'''


def test_a_hook_named_like_a_c_runtime_frame_and_a_deepcopy_are_named_at_the_users_lines(tmp_path):
    path = write(tmp_path, "base", HOOKS.lstrip("\n"))
    (dev,) = recorded(path, "copies", "base").devices
    sites = {s.site for s in dev.sites}
    hook = line_of(path, "        return torch.zeros(64, 1024)\n")
    assert f"proj/loops.py:{hook} on_train_batch_start" in sites
    assert f"proj/loops.py:{line_of(path, '    ema = copy.deepcopy(model)' + chr(10))} copies" in sites
    assert not any("copy.py" in s for s in sites), sites
