"""The live agent is never the reason a job did not run: a taken port, a port nobody can listen on, a fork child
that outlives a killed job, another interpreter, a script that never imports torch. Real `fragviz run` jobs,
real sockets, real fork children; the agent's server process is the job's own child."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest

from tests.support.helpers import free_port, wait_for

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
DEADLINE = 120
ANNOUNCED = re.compile(r"^fragviz: live agent for pid (\d+)(, port (\d+) taken,)? serving .* on http://127\.0\.0\.1:(\d+)$",
                       re.MULTILINE)

# A job that says it is ready, then waits for its go file (so the test can look at it while it runs)
WAITING = '''import os, sys, time
print("ready", "torch" in sys.modules, flush=True)
go = sys.argv[1]
for _ in range(1200):
    if os.path.exists(go):
        break
    time.sleep(0.05)
if sys.argv[2:3] == ["torch"]:
    import torch
    x = torch.ones(1 << 20)
    print("imported", flush=True)
    for _ in range(1200):
        if os.path.exists(go + ".2"):
            break
        time.sleep(0.05)
print("done", flush=True)
'''

# A job that forks a child which outlives it (as a data loader worker may, when the job is killed)
FORKING = '''import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print("child", child, flush=True)
time.sleep(120)
'''


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("FRAGVIZ_", "PYTHON"))}
    out.update(extra)
    return out


class Job:
    """`fragviz run ... -- python SCRIPT ARGS`, its stdout and stderr read as they come."""

    def __init__(self, folder, run_args: list[str], script: str, *args: str, **environ: str) -> None:
        self.proc = subprocess.Popen([FRAGVIZ, "run", *run_args, "--", "python", script, *args], cwd=folder,
                                     env=env(**environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=lambda s=stream, ls=lines: ls.extend(iter(s.readline, "")), daemon=True).start()

    def gone(self) -> str | None:
        return None if self.proc.poll() is None else f"the job exited ({self.proc.returncode}): {''.join(self.err)}"

    def announced(self) -> re.Match:
        return wait_for(lambda: ANNOUNCED.search("".join(self.err)), "the agent's line", DEADLINE, gone=self.gone)

    def finish(self) -> int:
        try:
            return self.proc.wait(DEADLINE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def stats(port: int) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=30).read())


def refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return False
    except ConnectionRefusedError:
        return True


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "waiting.py").write_text(WAITING)
    (tmp_path / "forking.py").write_text(FORKING)
    return tmp_path


def test_a_taken_port_does_not_stop_the_job_which_says_where_it_serves_instead(folder):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        job = Job(folder, ["--port", str(port)], "waiting.py", str(folder / "go"))
        line = job.announced()
        served = int(line.group(4))
        assert line.group(3) == str(port) and served != port, line.group(0)
        facts = stats(served)["agent"]
        assert (facts["port"], facts["requested_port"]) == (served, port)
        (folder / "go").write_text("")
        assert job.finish() == 0, job.err
    assert job.out == ["ready False\n", "done\n"]
    assert len([line for line in job.err if line.startswith("fragviz:")]) == 1, job.err


def test_where_nothing_can_be_listened_on_the_job_runs_and_one_line_says_so(folder):
    # 192.0.2.1 is TEST-NET-1: no interface of this machine has it, so nothing can bind it (a token makes it allowed)
    done = subprocess.run([FRAGVIZ, "run", "--host", "192.0.2.1", "--token", "t0k", "--port", "0", "--", "python",
                           "-c", "print('trained')"], cwd=folder, env=env(), capture_output=True, text=True,
                          timeout=DEADLINE)
    assert (done.returncode, done.stdout) == (0, "trained\n"), done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "cannot listen on 192.0.2.1:0" in lines[0] and "the job runs without it" in lines[0]


def test_port_0_takes_a_free_port_and_says_which(folder):
    job = Job(folder, ["--port", "0"], "waiting.py", str(folder / "go"))
    served = int(job.announced().group(4))
    assert served > 0 and stats(served)["agent"]["requested_port"] == 0
    (folder / "go").write_text("")
    assert job.finish() == 0


def test_a_fork_child_that_outlives_a_killed_job_does_not_hold_its_port(folder):
    port = free_port()
    job = Job(folder, ["--port", str(port)], "forking.py")
    child = None
    try:
        assert int(job.announced().group(4)) == port
        child = int(wait_for(lambda: next((ln.split()[1] for ln in job.out if ln.startswith("child")), None),
                             "the fork child", DEADLINE, gone=job.gone))
        assert stats(port)["pid"] == job.proc.pid
        job.proc.send_signal(signal.SIGKILL)
        job.proc.wait(DEADLINE)
        wait_for(lambda: refuses(port), f"port {port} to be closed", 30)
        os.kill(child, 0)  # the child still lives
        again = Job(folder, ["--port", str(port)], "waiting.py", str(folder / "go"))
        line = again.announced()
        assert (line.group(3), int(line.group(4))) == (None, port), line.group(0)
        assert stats(port)["pid"] == again.proc.pid
        (folder / "go").write_text("")
        assert again.finish() == 0
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        job.finish()


def test_the_agents_server_ends_with_the_job(folder):
    """However the job ends (here: a normal exit), its agent's server is gone with it and the port is free."""
    port = free_port()
    done = subprocess.run([FRAGVIZ, "run", "--port", str(port), "--", "python", "-c", "print('ok')"], cwd=folder,
                          env=env(), capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0 and done.stdout == "ok\n" and f"on http://127.0.0.1:{port}" in done.stderr
    assert refuses(port)


def test_an_interpreter_that_cannot_run_the_agent_exits_2_with_one_line_before_the_job(folder, tmp_path_factory):
    bare = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(bare)],
                   check=True, timeout=DEADLINE)
    python = str(bare / "bin" / "python")
    assert subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode != 0  # truly without it
    done = subprocess.run([FRAGVIZ, "run", "--port", "0", "--", python, "-c", "print('the job ran')"], cwd=folder,
                          env=env(), capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2 and done.stdout == "", done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fragviz: ") and "numpy" in lines[0], done.stderr
    assert "sitecustomize" not in done.stderr and "Traceback" not in done.stderr


def test_the_users_own_sitecustomize_still_runs(folder, tmp_path_factory):
    mine = tmp_path_factory.mktemp("mine")
    # the fragviz command is a Python program too: it runs the user's sitecustomize itself (argv: its own)
    (mine / "sitecustomize.py").write_text("import sys\nprint('my sitecustomize ran in', sys.argv[0], flush=True)\n")
    done = subprocess.run([FRAGVIZ, "run", "--port", "0", "--", "python", "-c", "print('job')"], cwd=folder,
                          env=env(PYTHONPATH=str(mine)), capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0 and done.stdout.endswith("my sitecustomize ran in -c\njob\n"), done


def test_a_script_that_never_imports_torch_gets_no_torch_and_the_agent_starts_when_it_does(folder):
    job = Job(folder, ["--port", "0", "--device-memory", "1GiB"], "waiting.py", str(folder / "go"), "torch")
    served = int(job.announced().group(4))
    wait_for(lambda: job.out, "the job to start", DEADLINE, gone=job.gone)
    assert job.out[0] == "ready False\n"  # no torch at start
    before = stats(served)
    assert before["devices"] == [] and before["agent"]["torch_imported"] is False and before["simulated"] is None
    (folder / "go").write_text("")
    wait_for(lambda: "imported\n" in job.out, "the job to import torch", DEADLINE, gone=job.gone)
    after = stats(served)
    assert after["simulated"] is True and after["agent"]["torch_imported"] is True
    assert after["devices"][0]["allocated_bytes"] == 4 << 20  # the job's one tensor of 2^20 floats
    (folder / "go.2").write_text("")
    assert job.finish() == 0 and job.out[-1] == "done\n"


@pytest.mark.parametrize("options,said", [(["--port", "70000"], "is not a port"),
                                          (["--alloc-conf", "no_such_key:1"], "unrecognized key"),
                                          (["--host", "0.0.0.0"], "without a token")])
def test_what_is_wrong_before_the_job_starts_exits_2_in_one_line_and_runs_nothing(folder, options, said):
    done = subprocess.run([FRAGVIZ, "run", *options, "--", "python", "-c", "print('the job ran')"], cwd=folder,
                          env=env(), capture_output=True, text=True, timeout=DEADLINE)
    assert (done.returncode, done.stdout) == (2, ""), done
    assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr


LOADER = '''import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.arange(4096, dtype=torch.float32).reshape(1024, 4))
loader = DataLoader(data, batch_size=64, num_workers=2, multiprocessing_context="fork")
total = sum(float(batch.sum()) for (batch,) in loader)
print("loaded", int(total), flush=True)
'''


def test_a_data_loader_with_fork_workers_runs_under_the_agent(folder):
    """Fork workers make tensors (the batches): the agent's simulated device is left alone in them (no lock the
    parent's thread held at the fork, nothing mirrored), and the job trains on."""
    (folder / "loader.py").write_text(LOADER)
    done = subprocess.run([FRAGVIZ, "run", "--port", "0", "--", "python", "loader.py"], cwd=folder, env=env(),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert (done.returncode, done.stdout) == (0, f"loaded {sum(range(4096))}\n"), done.stderr
