"""The `fragviz` command: ingest snapshots into the store and report on files or stored snapshots."""
from __future__ import annotations

import sys
import traceback
from typing import Sequence

from typing import Any

from fragviz.base.errors import INTERNAL_ERROR_STATUS as INTERNAL_ERROR, FragvizError
from fragviz.base.units import cut

__all__ = ["build_parser", "main", "INTERNAL_ERROR"]


def __getattr__(name: str) -> Any:
    if name == "build_parser":  # loaded when asked for: `fragviz run` parses its line without every command's module
        from fragviz.cli.parser import build_parser

        return build_parser
    raise AttributeError(name)


def _parser_for(argv: Sequence[str] | None) -> Any:
    """`fragviz run ...` is parsed by the run-only parser (the job's start waits for it); the rest by the full one."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["run"]:
        from fragviz.cli.run import run_only_parser

        return run_only_parser()
    from fragviz.cli.parser import build_parser

    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Exit status: 0 done, 2 bad input or usage, 75 store busy (try again), 74 store not
    writable, 3 an internal error (a fragviz bug: one line, the traceback with --debug), 130 interrupted; `gate`
    also exits 1 when a budget is broken (an internal error is never 1, so a CI tells a failed budget from a bug)."""
    parser = _parser_for(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except FragvizError as exc:
        print(f"fragviz: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fragviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001  a bug: one line, the traceback only when asked for
        if getattr(args, "debug_errors", False):
            traceback.print_exc()
        print(f"fragviz: internal error ({type(exc).__name__}: {cut(str(exc))}); this is a fragviz bug, please "
              "report it" + ("" if getattr(args, "debug_errors", False) else " (--debug shows the traceback)"),
              file=sys.stderr)
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
