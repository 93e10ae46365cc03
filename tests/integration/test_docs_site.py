"""The docs site (mkdocs.yml, docs/) builds with `mkdocs build --strict`: no broken link or anchor, every page in
the nav; and its CLI reference, generated from fragviz's own parser by docs/hooks/cli_reference.py, has a section
for every subcommand with that subcommand's help."""
from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys

import pytest

from fragviz.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def subcommands() -> list[str]:
    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(actions[0].choices)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("site"))
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", out], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def page_text(site: str, name: str) -> str:
    return html.unescape(open(os.path.join(site, name, "index.html"), encoding="utf-8").read())


def test_the_site_builds_strictly_with_every_page(site):
    for name in ("install", "recording", "dashboard", "fragmentation", "live", "prometheus", "cli", "store",
                 "limits", "architecture", "benchmarks", "testing", "security"):
        assert os.path.exists(os.path.join(site, name, "index.html")), name


def test_the_cli_reference_lists_every_subcommand_with_its_help(site):
    text = page_text(site, "cli")
    assert "<!-- cli-reference -->" not in text
    names = subcommands()
    assert len(names) >= 10  # ingest, report, export, simulate, doctor, capture, run, attach, limits, serve
    for name in names:
        assert f'id="fragviz-{name}"' in text, f"no section for fragviz {name}"
        assert re.search(rf"usage: fragviz {name} \[-h\]", text), f"no help for fragviz {name}"
    # each subcommand's own options are there, as its parser prints them
    assert "--snapshot-every" in text and "--allowed-host" in text and "--progress-file" in text


def test_the_cli_reference_is_the_same_on_every_machine(site):
    home = os.path.expanduser("~")
    text = page_text(site, "cli")
    if home not in ("", "/"):
        assert home + "/" not in text  # the store's default path is written ~/.local/share/...
    assert "~/.local/share/fragviz/fragviz.sqlite" in text or "$XDG_DATA_HOME/fragviz/fragviz.sqlite" in text


def test_the_security_policy_is_a_page_and_links_to_the_one_limits_table(site):
    text = page_text(site, "security")
    assert 'href="../limits/' in text
    assert "max_objects_per_byte" not in open(os.path.join(ROOT, "SECURITY.md"), encoding="utf-8").read()
