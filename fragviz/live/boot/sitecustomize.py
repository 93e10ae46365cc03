"""Imported by Python at start when `fragviz run` put this folder first on PYTHONPATH: starts the live agent.

The agent's settings come in FRAGVIZ_RUN, which is removed, and PYTHONPATH and sys.path are put back as the
user had them, so the job sees nothing of this and its own child processes start no agent. A sitecustomize
of the user's own, further along the path, is then imported as Python would have. An interpreter that cannot
run the agent ends here, with one line and exit status 2, before the job; nothing else stops the job.
"""
import importlib.machinery
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _restore(spec: dict) -> None:
    if spec.get("pythonpath") is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = spec["pythonpath"]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def _chain() -> None:
    """The next sitecustomize on the path (the user's or the environment's), run as Python would."""
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _boot() -> None:
    text = os.environ.pop("FRAGVIZ_RUN", None)
    if text is None:
        return
    spec = json.loads(text)
    _restore(spec)
    if spec.get("fragviz_root"):
        sys.path.append(spec["fragviz_root"])  # last (the job's own packages come first), and kept: the agent
                                               # imports parts of fragviz as it needs them
    try:
        from fragviz.live.runner import boot
    except Exception as exc:  # not installed there, or a Python too old to read fragviz
        print(f"fragviz: the live agent cannot start in {sys.executable} ({exc}): install fragviz in that "
              "environment, or run `fragviz run -- python ...` to use fragviz's own", file=sys.stderr, flush=True)
        os._exit(2)
    boot(spec)
    _chain()


_boot()
