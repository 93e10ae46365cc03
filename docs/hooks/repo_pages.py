"""MkDocs hook: SECURITY.md, which lives at the repository root (where GitHub looks for it), as the site's
security.md page.

The pages link to it as `../SECURITY.md`, which works when they are read on GitHub; here those links are
pointed at the generated page, and SECURITY.md's own links into docs/ (`docs/limits.md`) at the pages beside it.
GitHub starts a list right under a paragraph's last line; Python-Markdown needs a blank line first, so one is
put there.
"""
from __future__ import annotations

import os
import re

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = {"../SECURITY.md": "security.md"}  # a link from a page (docs/) -> the generated page


def on_files(files, config):
    text = open(os.path.join(ROOT, "SECURITY.md"), encoding="utf-8").read()
    text = re.sub(r"\]\(docs/", "](", text)  # from the root, the pages are docs/NAME.md; from the site, NAME.md
    files.append(File.generated(config, "security.md", content=lists_apart(text)))
    return files


LIST_ITEM = re.compile(r"\s*([-*+]|\d+\.) ")


def lists_apart(text: str) -> str:
    """A blank line between a paragraph and a list that starts right under it (outside code blocks)."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        previous = out[-1] if out else ""
        if (not fenced and LIST_ITEM.match(line) and previous.strip() and not LIST_ITEM.match(previous)
                and not previous.startswith((" ", "|"))):
            out.append("")
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    for link, target in PAGES.items():
        markdown = re.sub(r"\]\(" + re.escape(link) + r"(?=[#)])", "](" + target, markdown)
    return markdown
