"""MkDocs hook: the CLI reference of docs/cli.md, generated from fragviz's own argparse parser.

The page holds a marker, `<!-- cli-reference -->`; at build time it is replaced by `fragviz --help` and then, for
each subcommand in the parser's order, a heading (`## fragviz NAME`), the subcommand's one-line help and its
`format_help()` output. The help is formatted at a fixed width and the store's default path is written with `~`,
so the page is the same on every machine and cannot drift from the code.
"""
from __future__ import annotations

import argparse
import os

MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"
WIDTH = 80  # what the theme's content column shows without scrolling


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} has lost its {MARKER} marker: the CLI reference has nowhere to go")
    return markdown.replace(MARKER, cli_reference())


def cli_reference() -> str:
    """The markdown of the whole reference: the top-level help, then one section per subcommand."""
    from fragviz.cli import build_parser

    parser = build_parser()
    portable_paths(parser)
    parts = ["## fragviz", "", fenced(help_text(parser))]
    for name, summary, sub in subcommands(parser):
        parts += ["", f"## fragviz {name}", ""] + ([f"{summary[:1].upper()}{summary[1:]}.", ""] if summary else [])
        parts.append(fenced(help_text(sub)))
    return "\n".join(parts) + "\n"


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of every subcommand, in the order the parser lists them."""
    for action in parser._actions:  # argparse keeps its subcommands in a private list: there is no public one
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    raise ValueError("fragviz's parser has no subcommands")


def portable_paths(parser: argparse.ArgumentParser) -> None:
    """Write this machine's home folder (the store's default path) as ~ in every help string, before the help
    is wrapped, so the lines break in the same places everywhere."""
    folders = [(os.environ.get("XDG_DATA_HOME"), "$XDG_DATA_HOME"), (os.path.expanduser("~"), "~")]
    for action in parser._actions:
        if isinstance(action.help, str):
            for folder, shown in folders:
                if folder and folder != "/":
                    action.help = action.help.replace(folder.rstrip("/") + "/", shown + "/")
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                portable_paths(sub)


def help_text(parser: argparse.ArgumentParser) -> str:
    """format_help() at WIDTH columns, whatever the terminal."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH + 2)  # argparse's HelpFormatter takes the terminal's width less 2
    try:
        text = parser.format_help()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return text.rstrip()


def fenced(text: str) -> str:
    return f"```text\n{text}\n```"
