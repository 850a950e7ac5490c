"""The server as users run it (``dlsched server`` in its own process, the CLI as client), killed
or stopped mid-run and restarted on the same database: no job is lost, the running one resumes
from its checkpoint (a stopped server's: the one it wrote as it stopped)."""

import json
import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from runtime_helpers import CAN_ISOLATE, EMULATED, wait_for

pytestmark = pytest.mark.runtime
ADMIN = "admin-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``dlsched server`` as the README starts it: in a working directory (``workdir``), its
    data in the default ``dlsched-data`` there, given as that relative path."""

    def __init__(self, workdir, port):
        self.workdir, self.data_dir, self.port = workdir, workdir / "dlsched-data", port
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "DLSCHED_ADMIN_TOKEN": ADMIN,
            "OMP_NUM_THREADS": "1",
            "DLSCHED_SERVER": self.url,
        }
        self.proc = None

    def start(self):
        self.data_dir.mkdir(exist_ok=True)
        log = open(self.data_dir / "server.log", "a")
        # its own session: the Ray processes it starts share its process group, so that even
        # after a crash everything it started can be stopped by that group alone
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dlsched.cli",
                "server",
                "--port",
                str(self.port),
                # one node of 4 GPUs: what a crash may lose is the subject here, not the
                # nodes (each more one costs its Ray daemons and tenant template at each start)
                "--nodes",
                "1",
                "--gpus-per-node",
                "4",
                "--interval-s",
                "0.2",
                *([] if CAN_ISOLATE else ["--trust-tenants"]),
            ],
            env=self.env,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self._healthy(), 90, what="the server to answer")

    def _healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError((self.data_dir / "server.log").read_text()[-3000:])
        try:
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def crash(self):
        self.proc.kill()
        self.proc.wait()
        self._kill_group()

    def _kill_group(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                # (its runs checkpoint first: up to --shutdown-checkpoint-s, 60 s by default)
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc:
            self._kill_group()

    def cli(self, *args, token):
        r = subprocess.run(
            [sys.executable, "-m", "dlsched.cli", *args],
            env={**self.env, "DLSCHED_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return r.returncode, r.stdout, r.stderr

    def job(self, jid):
        return httpx.get(
            f"{self.url}/v1/jobs/{jid}", headers={"Authorization": f"Bearer {ADMIN}"}
        ).json()

    def tenant(self, name: str) -> str:
        """A new tenant's token."""
        code, out, err = self.cli("tenant", "create", name, token=ADMIN)
        assert code == 0, err
        return json.loads(out)["token"]

    def submit(self, spec_file, token: str, **spec) -> str:
        """An emulated job of ``spec`` through ``dlsched submit``; its id."""
        spec_file.write_text(json.dumps({**EMULATED, "batch_size": 8, **spec}))
        code, out, err = self.cli("submit", str(spec_file), token=token)
        assert code == 0, err
        return out.strip()

    def done(self, jid: str) -> dict:
        return wait_for(
            lambda: (j := self.job(jid))["status"] == "done" and j, 180, what=f"{jid} to finish"
        )


def starts_in(log: str) -> list[int]:
    """The iteration each run of a job started at, from its log."""
    return [
        int(line.split("start at iteration ")[1].split()[0])
        for line in log.splitlines()
        if "start at" in line
    ]


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, free_port())
    yield s
    s.stop()


def test_cli_and_a_server_crashed_or_stopped_mid_run_lose_nothing(server, tmp_path):
    server.start()
    token = server.tenant("alice")
    running = server.submit(
        tmp_path / "job.yaml", token, gpus=2, iterations=200, checkpoint_every=20
    )
    queued = server.submit(tmp_path / "queued.yaml", token, gpus=4, iterations=20)
    wait_for(lambda: server.job(running)["iteration"] >= 50, 90, what="progress past a checkpoint")
    code, out, _ = server.cli("jobs", token=token)
    assert code == 0 and running in out and queued in out and "running" in out
    code, out, _ = server.cli("status", token=token)
    assert code == 0 and "2/4 GPUs in use" in out and queued in out

    server.crash()
    server.start()
    job = server.done(running)
    assert job["iteration"] == 200
    assert any("server restarted" in e["message"] for e in job["events"])
    starts = starts_in(server.cli("logs", running, token=token)[1])
    assert starts[0] == 0 and starts[-1] >= 40 and len(starts) == 2
    code, events, _ = server.cli("events", running, token=token)
    assert code == 0 and events.index("submitted") < events.index(
        "server restarted"
    ) < events.index("done after 200")
    assert wait_for(
        lambda: server.job(queued)["status"] == "done", 120, what="the queued job"
    )  # not lost
    code, _, err = server.cli("cancel", queued, token=token)
    assert code == 4 and "409" in err  # already done
    code, _, err = server.cli("jobs", token="wrong")
    assert code == 4 and "401" in err

    # stopped (SIGTERM) mid-run, the server checkpoints its running jobs: it killed their runs,
    # and a job without periodic checkpoints started again from 0 (on the same server: a start
    # of it is the most of this test's time)
    jid = server.submit(tmp_path / "job.yaml", token, gpus=2, iterations=200, checkpoint_every=0)
    wait_for(lambda: server.job(jid)["iteration"] >= 50, 90, what="the job to make progress")
    server.stop()
    assert server.proc.returncode == 0
    assert "dlsched: 1 running job checkpointed" in (server.data_dir / "server.log").read_text()
    server.start()
    job = server.done(jid)
    assert job["iteration"] == 200 and any(
        "server stopped: checkpointed" in e["message"] for e in job["events"]
    )
    starts = starts_in(server.cli("logs", jid, token=token)[1])
    assert starts[0] == 0 and len(starts) == 2 and starts[1] >= 50
