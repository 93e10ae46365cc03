"""What the pytest plugin checks before any test runs: that pytest's setup is the one the command line meant, and
that its folders can be folders.

pytest finds its rootdir and ini file before it loads the plugins of installed packages, so at that moment it does
not know fragviz's options: in `pytest --memory-snapshots DIR` it reads DIR as a test path. Where DIR exists
outside the project, the rootdir becomes a common ancestor, the project's ini file (its `memory_baseline`, its
`memory_device`, every other setting) is not read, and the test ids change. `setup_lost` recomputes pytest's setup
as the options mean it and names the difference: the plugin then refuses to start, in one line, rather than judge
without its settings. `--memory-snapshots=DIR` (one word) is read right in every case.

Only pytest and the standard library are imported here (the plugin is loaded into every pytest run).
"""
from __future__ import annotations

import inspect
import os
import shlex
from pathlib import Path
from typing import Any, Sequence

import pytest

# fragviz's options that take a value: written as two words, the value was a test path to pytest's first parse
VALUE_OPTIONS = ("--memory-baseline", "--memory-snapshots", "--memory-device")


def check_setup(config: pytest.Config) -> None:
    """Refuse (pytest.UsageError, one line) a run whose rootdir or ini file an option's value changed."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller checked the command line
        return
    lost = setup_lost(config)
    if lost is not None:
        raise pytest.UsageError(lost)


def setup_lost(config: pytest.Config) -> str | None:
    """What pytest lost to an option's value read as a test path, in one line; None when nothing was lost."""
    args = shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + [str(a) for a in config.invocation_params.args]
    here = Path(config.invocation_params.dir)
    taken = [(option, value) for option, value in values_as_paths(args) if (here / value).exists()]
    if not taken:
        return None  # a value that is no path takes no part in the setup
    option, value = taken[0]
    meant = meant_setup(config)
    if meant is None:  # this pytest computes its setup another way: whether it changed cannot be known
        return (f"{option} {value}: pytest reads {value} as a test path before fragviz's plugin loads, which can "
                f"change its rootdir and ini file: write {option}={value}")
    if meant == (config.rootpath, config.inipath):
        return None
    return (f"{option} {value}: pytest read {value} as a test path before fragviz's plugin loaded, so its rootdir is "
            f"{config.rootpath} and its ini file {_ini(config.inipath)}, not {meant[0]} and {_ini(meant[1])} (the "
            f"memory_baseline and other settings there are lost, and the test ids change): write {option}={value}")


def values_as_paths(args: Sequence[str]) -> list[tuple[str, str]]:
    """(option, value) for each of fragviz's options written as two words before `--`."""
    found = []
    for i, word in enumerate(args[:-1]):
        if word == "--":
            break
        if word in VALUE_OPTIONS and not args[i + 1].startswith("-"):
            found.append((word, args[i + 1]))
    return found


def meant_setup(config: pytest.Config) -> tuple[Path, Path | None] | None:
    """(rootdir, ini file) as pytest finds them from the test paths it runs now that fragviz's options are known;
    None where this pytest's setup function cannot be called as pytest 8 and 9 call it."""
    try:
        from _pytest.config.findpaths import determine_setup

        ns = config.known_args_namespace
        wanted: dict[str, Any] = {"inifile": ns.inifilename, "args": [str(a) for a in ns.file_or_dir],
                                  "rootdir_cmd_arg": ns.rootdir or None, "override_ini": ns.override_ini,
                                  "invocation_dir": Path(config.invocation_params.dir)}
        accepted = inspect.signature(determine_setup).parameters
        if not set(accepted) <= set(wanted):
            return None
        found = determine_setup(**{k: v for k, v in wanted.items() if k in accepted})
        return Path(found[0]), None if found[1] is None else Path(found[1])
    except (ImportError, AttributeError, TypeError, ValueError, pytest.UsageError):
        return None


def check_folders(config: pytest.Config, baseline: str | None, snapshots: str | None) -> None:
    """A baseline or snapshot folder that exists as something else than a folder is refused before any test runs."""
    where = ("--memory-baseline" if config.getoption("memory_baseline") else
             f"memory_baseline in {_ini(config.inipath)}")
    for label, folder in ((where, baseline), ("--memory-snapshots", snapshots)):
        if folder is not None and os.path.exists(folder) and not os.path.isdir(folder):
            raise pytest.UsageError(f"{label}: {folder} is not a directory: give a folder (created if missing)")


def _ini(path: Path | None) -> str:
    return "none" if path is None else str(path)
