"""No silent pass: the pytest plugin under every pytest command line the docs show, as written, on a copy of
examples/memory_gate with a real regression, from inside the project and from outside it.

The command lines are read from the docs themselves (docs/*.md, README.md, the example's README and its workflow),
so a command added there is tested here. Each is run in both forms of its options' values (`--opt DIR` and
`--opt=DIR`), from the project's folder, from a folder outside it (the project's path added as the test path, the
values' folders existing there: what made pytest take their common parent as its rootdir and lose the project's
pytest.ini), and from inside with each value an existing folder outside the project. Every run either judges with
the project's settings (a regression fails its test as a broken budget, exit 1; an update writes the baselines where
the settings say) or refuses to start in one line naming the option and its `=` form (exit 4): never exit 0 with a
regression in the code, never a warning alone. The unchanged project passes under the documented check commands.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.helpers import ROOT

EXAMPLE = Path(ROOT) / "examples" / "memory_gate"
DOCS = sorted((Path(ROOT) / "docs").glob("*.md")) + [Path(ROOT) / "README.md", EXAMPLE / "README.md",
                                                     EXAMPLE / ".github" / "workflows" / "memory.yml"]
VALUE_OPTIONS = ("--memory-baseline", "--memory-snapshots", "--memory-device")
# the commands the docs must keep showing: the test reads every other one it finds as well
KNOWN = {"pytest --memory-baseline=memory_baselines --memory-update-baseline", "pytest --memory-baseline=memory_baselines",
         "pytest --memory-snapshots=memory-snapshots --junitxml=memory-junit.xml", "pytest --memory-update-baseline"}
ACTIVATION = "        h = torch.relu(self.fc1(x))\n"


# -- the documented command lines -----------------------------------------------------------------------------------

_LINE = re.compile(r"(?:^\s*|^\s*run:\s*|&&\s*)((?:python -m )?pytest\b[^)#\n]*)")
_INLINE = re.compile(r"`((?:python -m )?pytest [^`]*--memory-[^`]*)`")


def documented_commands() -> list[str]:
    """Every pytest command line in a code block or the workflow, and every inline one with a memory option."""
    found: set[str] = set()
    for path in DOCS:
        block = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                block = not block
                continue
            if block or path.suffix == ".yml":
                found.update(m.group(1).strip() for m in _LINE.finditer(line))
            found.update(m.strip() for m in _INLINE.findall(line))
    return sorted(found)


def other_form(command: str) -> str:
    """`--opt=VALUE` as `--opt VALUE` and the reverse, for fragviz's options that take a value."""
    words = shlex.split(command)
    out, i = [], 0
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        if name in VALUE_OPTIONS and "=" in word:
            out += [name, word.split("=", 1)[1]]
        elif word in VALUE_OPTIONS and i + 1 < len(words):
            out.append(f"{word}={words[i + 1]}")
            i += 1
        else:
            out.append(word)
        i += 1
    return shlex.join(out)


def values(words: list[str]) -> list[tuple[str, str, bool]]:
    """(option, value, two words) of each of fragviz's value options in a command."""
    out = []
    for i, word in enumerate(words):
        name = word.split("=", 1)[0]
        if name in VALUE_OPTIONS and "=" in word:
            out.append((name, word.split("=", 1)[1], False))
        elif word in VALUE_OPTIONS and i + 1 < len(words):
            out.append((word, words[i + 1], True))
    return out


COMMANDS = documented_commands()
VARIANTS = sorted(set(COMMANDS) | {other_form(c) for c in COMMANDS})
PLACES = ("inside", "outside", "inside, values outside")


def test_the_docs_show_the_commands_this_test_runs():
    assert KNOWN <= set(COMMANDS), COMMANDS
    assert all(" DIR" not in c or "--memory-snapshots DIR" in c for c in COMMANDS), COMMANDS


# -- running one ------------------------------------------------------------------------------------------------------

def add_leak(project: Path) -> None:
    """A list in TinyNet.forward that keeps every step's activations (the README's regression)."""
    path = project / "tinynet" / "model.py"
    text = path.read_text()
    assert ACTIVATION in text
    text = text.replace("        self.fc2 = nn.Linear(hidden, classes)\n",
                        "        self.fc2 = nn.Linear(hidden, classes)\n        self.seen: list = []\n")
    path.write_text(text.replace(ACTIVATION, ACTIVATION + "        self.seen.append(h)\n"))


def widen(project: Path) -> None:
    path = project / "tinynet" / "model.py"
    text = path.read_text()
    assert "HIDDEN = 1024\n" in text
    path.write_text(text.replace("HIDDEN = 1024\n", "HIDDEN = 1536\n"))


REGRESSIONS = {"leak": add_leak, "wider": widen, "unchanged": None}


@dataclass
class Case:
    command: str
    place: str
    regression: str
    root: Path | None = None
    proc: subprocess.CompletedProcess | None = None

    @property
    def id(self) -> str:
        return f"{self.regression}: {self.command} ({self.place})"

    def prepare(self, root: Path) -> None:
        """The example copied (with the regression), and a folder outside it holding a folder of each value's name
        (the baselines' a copy of the project's)."""
        self.root = root
        project, outside = root / "project", root / "outside"
        shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        outside.mkdir()
        for _, value, _ in values(shlex.split(self.command)):
            if value != "simulated":
                shutil.copytree(project / "memory_baselines", outside / value)
        change = REGRESSIONS[self.regression]
        if change is not None:
            change(project)

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def cwd(self) -> Path:
        return self.project if self.place.startswith("inside") else self.root / "outside"

    def argv(self) -> list[str]:
        words = shlex.split(self.command)
        words = words[3:] if words[:3] == ["python", "-m", "pytest"] else words[1:]
        if self.place == "inside, values outside":
            words = [self._outside(w, words, i) for i, w in enumerate(words)]
        if self.place == "outside":
            words.append(str(self.project))
        return [sys.executable, "-m", "pytest", *words]

    def _outside(self, word: str, words: list[str], i: int) -> str:
        name = word.split("=", 1)[0]
        if name in VALUE_OPTIONS and "=" in word and name != "--memory-device":
            return f"{name}={self.root / 'outside' / word.split('=', 1)[1]}"
        if i > 0 and words[i - 1] in VALUE_OPTIONS and words[i - 1] != "--memory-device":
            return str(self.root / "outside" / word)
        return word

    def run(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
        env["COLUMNS"] = "250"  # the short summary's lines whole
        self.proc = subprocess.run(self.argv(), cwd=self.cwd, env=env, capture_output=True, text=True, timeout=600)

    def taken_values(self) -> list[tuple[str, str]]:
        """Two-word values that name an existing path outside the project: pytest reads them as test paths."""
        out = []
        for option, value, two_words in values(self.argv()):
            path = (self.cwd / value).resolve()
            if two_words and path.exists() and not path.is_relative_to(self.project.resolve()):
                out.append((option, value))
        return out


def cases() -> list[Case]:
    """The leak under every variant from every place; the wider layer under each documented check command, inside and
    outside; the unchanged project under the README's command and the workflow's, inside."""
    out = []
    for command in VARIANTS:
        places = PLACES if values(shlex.split(command)) else PLACES[:2]
        out += [Case(command, place, "leak") for place in places]
        if command in COMMANDS and "--memory-update-baseline" not in command:
            out += [Case(command, place, "wider") for place in PLACES[:2]]
        if command == "pytest" or command in COMMANDS and "--junitxml" in command:
            out.append(Case(command, "inside", "unchanged"))
    return out


CASES = cases()


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, Case]:
    """Every case run, three at a time (each pays torch's import)."""
    for i, case in enumerate(CASES):
        case.prepare(tmp_path_factory.mktemp(f"case{i}"))
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(Case.run, CASES))
    return {case.id: case for case in CASES}


# -- what each must do -----------------------------------------------------------------------------------------------

def baseline_dir(case: Case) -> Path:
    given = [value for option, value, _ in values(case.argv()) if option == "--memory-baseline"]
    return case.cwd / given[0] if given else case.project / "memory_baselines"


@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_every_documented_invocation_judges_with_its_settings_or_refuses_in_one_line(ran, case_id):
    case = ran[case_id]
    proc, output = case.proc, case.proc.stdout + case.proc.stderr
    taken = case.taken_values()
    if taken and (proc.returncode == pytest.ExitCode.USAGE_ERROR or case.place == "inside, values outside"):
        # pytest's rootdir and ini file came from the value (from inside, the value alone is a test path: always)
        option, value = taken[0]
        assert proc.returncode == pytest.ExitCode.USAGE_ERROR, output
        errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
        assert len(errors) == 1 and errors[0].startswith(f"ERROR: {option} {value}: pytest read {value} as a test path")
        assert errors[0].endswith(f"write {option}={value}") and "pytest.ini" in errors[0], errors
        return
    # else the setup is the project's (from outside, pytest finds the ini file beside the project's path)
    if "--memory-update-baseline" in case.argv():
        assert proc.returncode == 0, output
        written = baseline_dir(case) / "tests.test_memory.py--test_train_memory.json"
        assert written.read_bytes() != (EXAMPLE / "memory_baselines" / written.name).read_bytes(), output
    elif case.regression == "unchanged":
        assert proc.returncode == 0, output
    else:  # the regression fails its tests as broken budgets, judged against the project's baselines
        assert proc.returncode == 1, output
        assert re.search(r"^FAILED (?:\S*/)?tests/test_memory\.py::test_train_memory - Failed: memory gate FAILED",
                         proc.stdout, re.M), output
        assert "MemoryBudgetWarning" not in output and "cannot be judged" not in output, output
    for option, value, _ in values(case.argv()):
        if option == "--memory-snapshots":
            assert (case.cwd / value / "tests.test_memory.py--test_train_memory.pickle").is_file(), output
