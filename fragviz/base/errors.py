"""The one error root of fragviz and its few narrow subclasses.

Every error that fragviz raises on purpose is a FragvizError: its message is one line that says what is
wrong and, where it helps, what to do. The CLI turns it into that line on stderr and exit status 2; the
UI shows it as a message, never as a traceback.
"""
from __future__ import annotations


# the exit status of an internal error (a fragviz bug) wherever fragviz ends a process: every command, ingest's
# batches, the pytest plugin; distinct from 1 (gate: a budget broken) and 2 (FragvizError: bad input)
INTERNAL_ERROR_STATUS = 3


class FragvizError(Exception):
    """Root of every error fragviz raises on purpose."""

    exit_code = 2


class SnapshotFormatError(FragvizError):
    """A file that cannot be read as a PyTorch memory snapshot."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


class StoreError(FragvizError):
    """The timeline store cannot be opened, read or written."""


class StoreBusyError(StoreError):
    """Another writer holds the store past the wait: nothing is wrong with the input, try again."""

    exit_code = 75  # EX_TEMPFAIL


class NotFoundError(StoreError):
    """An id or name that the store does not hold."""


class LimitError(SnapshotFormatError):
    """A file past one of fragviz's input limits (fragviz.base.limits): the message names the limit and how to raise it."""


class InputError(FragvizError):
    """A small input file (a memory summary, a baseline) that is not a regular file fragviz can read whole."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


class OutputError(FragvizError):
    """A path given for fragviz to write that it cannot write (a directory, a missing folder, a full device)."""


class UsageError(FragvizError):
    """Arguments that do not fit together (an event index out of range, an unknown device)."""


class AgentError(FragvizError):
    """The live agent cannot start, or a live target cannot be reached or refuses us."""


def public_message(exc: BaseException, store_label: str) -> str:
    """An error as the dashboard's pages and API show it: without the store's path or URL, the server's business
    (the command line names the store, its user's own)."""
    return str(exc).replace(f"{store_label}: ", "").replace(store_label, "the store")
