"""The README's commands work as written after set-up: `.venv/bin/fragviz` exists and runs, and every
`fragviz <subcommand>` the README and the docs site's pages (docs/*.md, SECURITY.md) show, in code blocks and
inline code, is a real subcommand; between them they show every one."""
from __future__ import annotations

import glob
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAGVIZ = os.path.join(ROOT, ".venv", "bin", "fragviz")  # what `source .venv/bin/activate` puts on PATH
README = os.path.join(ROOT, "README.md")
PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "SECURITY.md")]


def code_texts(markdown: str) -> list[str]:
    """The lines of fenced code blocks and the inline code spans outside them."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.M | re.S)
    lines = [line for block in fenced for line in block.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", prose)


def commands_named(text: str) -> list[str]:
    """The words after `fragviz` where it stands as a command: first on the line (after `$ `), after a path
    (`.venv/bin/fragviz`), or after an option or a number of another command (`python -m`, `torchrun ... 8`);
    not in a phrase such as 'the fragviz command' of the layout listing."""
    found = []
    text = re.sub(r"^\s*\$\s+", "", text)
    for m in re.finditer(r"fragviz[ \t]+([a-z][\w-]*)", text):
        before = text[:m.start()]
        if not before.strip() or before.endswith("/") or re.search(r"(^|\s)(-\S*|\d+)\s+$", before):
            found.append(m.group(1))
    return found


def real_subcommands() -> set[str]:
    out = subprocess.run([FRAGVIZ, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    choices = re.search(r"\{([a-z,-]+)\}", out.stdout)  # argparse's usage line: {ingest,report,...}
    return set(choices.group(1).split(","))


def test_the_console_script_runs_after_setup():
    assert os.access(FRAGVIZ, os.X_OK), "scripts/setup.sh installs .venv/bin/fragviz (pip install -e .)"
    out = subprocess.run([FRAGVIZ, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("usage: fragviz"), out.stderr


def named_in(path: str) -> set[str]:
    return {c for t in code_texts(open(path, encoding="utf-8").read()) for c in commands_named(t)}


def test_every_subcommand_the_readme_names_is_real():
    named = named_in(README)
    real = real_subcommands()
    # the front door's first five minutes: a parser that found none would pass vacuously
    assert {"capture", "ingest", "doctor", "report", "run", "attach"} <= named
    assert named <= real, f"the README names subcommands fragviz does not have: {sorted(named - real)}"
    for sub in sorted(named):
        out = subprocess.run([FRAGVIZ, sub, "--help"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (sub, out.stderr)


def test_every_subcommand_the_docs_name_is_real_and_every_one_is_shown():
    assert len(PAGES) > 10, "the docs site's pages are docs/*.md"
    real = real_subcommands()
    wrong = {os.path.relpath(p, ROOT): sorted(named_in(p) - real) for p in PAGES if named_in(p) - real}
    assert wrong == {}, f"pages name subcommands fragviz does not have: {wrong}"
    shown = named_in(README).union(*(named_in(p) for p in PAGES))
    assert shown == real, f"subcommands no page shows: {sorted(real - shown)}"


def test_the_readme_says_how_to_get_fragviz_on_path_under_the_setup_commands():
    text = open(README, encoding="utf-8").read()
    block_end = text.index("```", text.index("bash scripts/test.sh")) + 3
    next_paragraph = text[block_end:].strip().split("\n\n", 1)[0]
    assert "source .venv/bin/activate" in next_paragraph and "PATH" in next_paragraph


def test_setup_ends_by_saying_how_to_get_fragviz_on_path():
    # Read, not run: running it reinstalls the package under tests that run beside this one.
    lines = open(os.path.join(ROOT, "scripts", "setup.sh"), encoding="utf-8").read().strip().splitlines()
    assert lines[-1].startswith("echo ") and "source .venv/bin/activate" in lines[-1] and "PATH" in lines[-1]
    for script in ("run.sh", "test.sh"):
        assert "bash scripts/setup.sh" in open(os.path.join(ROOT, "scripts", script), encoding="utf-8").read()


def test_the_phrase_parser():
    assert commands_named("fragviz ingest FILE... [--db PATH]") == ["ingest"]
    assert commands_named("torchrun --no-python --nproc-per-node 8 fragviz run --port 9400") == ["run"]
    assert commands_named(".venv/bin/fragviz report X") == ["report"]
    assert commands_named("python -m fragviz limits") == ["limits"]
    assert commands_named("cli.py           the fragviz command") == []
