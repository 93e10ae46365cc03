"""`fragviz run -- python ...` is `python ...` with an agent: the same output, traceback, exit status and signal
as plain `python` on the same command, compared side by side (the agent's one announcement line on stderr aside)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
DEADLINE = 120

FACTS = '''import os, sys, warnings
import helper
print("argv", sys.argv, "path0", sys.path[0], "name", __name__, "file", __file__, "helper", helper.VALUE)
print("flags", sys.flags.dev_mode, sys.flags.optimize, sys.warnoptions, sys.stdout.line_buffering)
print("env", os.environ.get("FRAGVIZ_RUN"), os.environ.get("PYTHONPATH"))
import subprocess
subprocess.run([sys.executable, "-c", "import os, sys; print('child', os.environ.get('PYTHONPATH'), "
                "getattr(sys.modules.get('sitecustomize'), '__file__', None))"], check=True)
def inner():
    raise ValueError("boom")
if sys.argv[1:2] == ["fail"]:
    inner()
if sys.argv[1:2] == ["exit"]:
    sys.exit(int(sys.argv[2]))
if sys.argv[1:2] == ["wait"]:
    print("ready", flush=True)
    import time; time.sleep(120)
'''


@pytest.fixture
def job_dir(tmp_path):
    (tmp_path / "helper.py").write_text('VALUE = "beside the script"\n')
    (tmp_path / "main.py").write_text(FACTS)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__main__.py").write_text("import sys\nprint('pkg', __name__, __package__, sys.argv)\n")
    return tmp_path


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("FRAGVIZ_", "PYTHON"))}
    return out


def both(folder, *python_args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The same command under `fragviz run` and under plain python, from `folder`."""
    run = subprocess.run([FRAGVIZ, "run", "--port", "0", "--", "python", *python_args], cwd=folder, env=env(),
                         capture_output=True, text=True, timeout=DEADLINE)
    plain = subprocess.run([sys.executable, *python_args], cwd=folder, env=env(), capture_output=True, text=True,
                           timeout=DEADLINE)
    return run, plain


def job_stderr(text: str) -> str:
    """stderr without the agent's announcement."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("fragviz: live agent"))


@pytest.mark.parametrize("python_args", [
    ("main.py", "a", "--b"),
    ("-u", "-X", "dev", "-W", "error::UserWarning", "-O", "main.py", "a"),
    ("-m", "pkg", "x", "-y"),
    ("-c", "import sys; print(sys.argv, repr(sys.path[0]), __name__)", "q"),
    ("main.py", "fail"),
    ("main.py", "exit", "3"),
], ids=["script", "options", "module", "code", "traceback", "exit-status"])
def test_fragviz_run_is_python_with_an_agent(job_dir, python_args):
    run, plain = both(job_dir, *python_args)
    assert run.stderr.count("fragviz: live agent for pid") == 1, run.stderr
    assert (run.returncode, run.stdout, job_stderr(run.stderr)) == (plain.returncode, plain.stdout, plain.stderr)
    if "main.py" in python_args:
        assert "beside the script" in run.stdout and "env None None" in run.stdout
        assert "child None None" in run.stdout  # the job's own child processes start no agent


def test_a_signal_ends_the_job_as_it_ends_python(job_dir):
    codes = []
    for argv in ([FRAGVIZ, "run", "--port", "0", "--", "python", "main.py", "wait"],
                 [sys.executable, "main.py", "wait"]):
        proc = subprocess.Popen(argv, cwd=job_dir, env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        try:
            for line in proc.stdout:  # the job's first lines, then "ready" (flushed)
                if line.strip() == "ready":
                    break
            proc.send_signal(signal.SIGTERM)
            codes.append(proc.wait(DEADLINE))
        finally:
            proc.kill()
            proc.wait()
    assert codes == [-signal.SIGTERM, -signal.SIGTERM]


@pytest.mark.parametrize("option", ["-I", "-E", "-S", "-Is"])
def test_options_that_turn_the_agent_off_are_refused_in_one_line(job_dir, option):
    done = subprocess.run([FRAGVIZ, "run", "--port", "0", "--", "python", option, "main.py"], cwd=job_dir, env=env(),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "turns off" in done.stderr, done.stderr
    assert done.stdout == ""


def test_a_command_that_is_not_python_is_refused(job_dir):
    done = subprocess.run([FRAGVIZ, "run", "--", "bash", "-c", "echo hi"], cwd=job_dir, env=env(),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2 and "starts Python, not 'bash'" in done.stderr and done.stdout == ""
