"""A tenant process forked from a node's template (runtime/template.py) is confined exactly as
one started cold, as a new interpreter under bubblewrap: the same uid and groups, no capability,
no_new_privs, the same rlimits and control group, alone in the sandbox's PID namespace, the
same view of the file system; and its end is reported with its exit code."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time

import pytest

from dlsched.runtime.cgroups import detect
from dlsched.runtime.sandbox import JOB_DIR_IN_SANDBOX, Sandbox
from dlsched.runtime.template_host import _listening, template_environment
from dlsched.runtime.tenant_process import (
    TenantProcess,
    TenantStartError,
    WarmStart,
    _placeholder_pid,
)

pytestmark = [
    pytest.mark.torch_processes,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap"
    ),
]

STATUS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")


@pytest.fixture(scope="module")
def template():
    address = "\0dlsched-template-test-" + secrets.token_hex(4)
    sandbox = Sandbox()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "dlsched.runtime.template", address[1:]],
        env=template_environment(sandbox),
    )
    deadline = time.monotonic() + 120
    while not _listening(address):
        assert proc.poll() is None and time.monotonic() < deadline, "the template did not start"
        time.sleep(0.05)
    yield address
    proc.kill()
    proc.wait()


def start(sandbox: Sandbox, job_dir, template: str | None) -> TenantProcess:
    job = "job-7"
    sandbox.prepare_job_dir(job_dir, job)
    warm = template and WarmStart(template, sandbox.uid(job), sandbox.limits(), JOB_DIR_IN_SANDBOX)
    process = TenantProcess(
        sandbox.command(job_dir, job, placeholder=warm is not None),
        sandbox.environment(job_dir),
        job_dir.parent / f"{job_dir.name}.log",
        sandbox.control_group(job),
        None,
        warm or None,
    )
    assert process.call("progress", timeout_s=120) is None  # READY, and it answers
    return process


def confined(process: TenantProcess, hidden) -> dict:
    """What the kernel says of the Python process in the sandbox, read from outside."""
    init = int(open(f"/proc/{process.proc.pid}/task/{process.proc.pid}/children").read().split()[0])
    namespace = os.readlink(f"/proc/{init}/ns/pid")
    pythons = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                if "python" in open(f"/proc/{entry}/comm").read():
                    pythons.append(int(entry))
        except OSError:
            continue
    [pid] = pythons
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines())
    group = process.group
    return {
        **{k: status[k].split() for k in STATUS},
        "limits": open(f"/proc/{pid}/limits").read(),
        "in its control group": group is None
        or str(pid) in (group.dirs[0] / "cgroup.procs").read_text().split(),
        "cwd": os.readlink(f"/proc/{pid}/cwd"),
        "pid namespace": namespace != os.readlink("/proc/self/ns/pid"),
        "mount namespace": os.readlink(f"/proc/{pid}/ns/mnt")
        == os.readlink(f"/proc/{init}/ns/mnt"),
        "data dir": sorted(os.listdir(f"/proc/{pid}/root{hidden}")),
        # what ps shows: a cold start's command line, the job's environment (a cold start's
        # also names its channel's descriptor, which it pops from its own)
        "cmdline": open(f"/proc/{pid}/cmdline", "rb").read().rstrip(b"\0").split(b"\0"),
        "environ": sorted(
            v
            for v in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            if v and not v.startswith(b"DLSCHED_CHANNEL_FD=")
        ),
        "tmp": sorted(os.listdir(f"/proc/{pid}/root/tmp")),
    }


def test_a_forked_tenant_process_is_confined_as_a_cold_one(tmp_path, template):
    data = tmp_path / "data"
    (data / "jobs").mkdir(parents=True)
    (data / "secret").write_text("the server's")
    sandbox = Sandbox(hide=(str(data),))
    seen = {}
    for kind, address in (("cold", None), ("warm", template)):
        process = start(sandbox, data / "jobs" / kind, address)
        try:
            seen[kind] = confined(process, data)
        finally:
            process.kill()
    assert seen["warm"] == seen["cold"]
    view = seen["warm"]
    assert view["Uid"] == [str(sandbox.uid("job-7"))] * 4 and view["Groups"] == []
    assert all(int(view[c][0], 16) == 0 for c in ("CapInh", "CapPrm", "CapEff", "CapBnd"))
    assert view["NoNewPrivs"] == ["1"] and view["cwd"] == "/job" and view["data dir"] == []
    assert view["in its control group"] and (detect() is None or process.group is not None)


def test_a_forked_process_s_end_is_told_with_its_exit_code(tmp_path, template):
    sandbox = Sandbox(hide=(str(tmp_path / "data"),))
    process = start(sandbox, tmp_path / "data" / "job", template)
    process.sock.shutdown(socket.SHUT_WR)  # the worker is done with it: it exits, code 0
    process._reader.join(timeout=60)
    assert process._broken == "the tenant process exited (exit code 0)", process._broken
    killed = start(sandbox, tmp_path / "data" / "job2", template)
    killed.kill()
    assert killed._end_process() == -9


def test_a_forked_process_ended_by_two_threads_at_once_gives_both_its_code(
    tmp_path, template, monkeypatch
):
    # The reader (its channel closed) and kill() both ask a process's end; for a forked one both
    # read the template's answer on one socket, and one got "Bad file descriptor", which failed
    # a job's finished run in a suite run (2026-11-29). The answer's read is slowed here so the
    # two overlap every time (without the fix: the error, every time; checked).
    import threading
    import time

    from dlsched.runtime import tenant_process

    told = tenant_process._forked_exit

    def slow_told(conn, fallback):
        code = told(conn, fallback)
        time.sleep(0.5)
        return code

    monkeypatch.setattr(tenant_process, "_forked_exit", slow_told)
    sandbox = Sandbox(hide=(str(tmp_path / "data"),))
    process = start(sandbox, tmp_path / "data" / "job", template)
    codes, errors = [], []

    def end():
        try:
            codes.append(process._end_process())
        except Exception as e:  # (what the test is about)
            errors.append(e)

    threads = [threading.Thread(target=end) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.2)  # the second asks while the first is told
    for t in threads:
        t.join(timeout=60)
    process.kill()  # and once more after
    assert not errors and codes == [-9, -9], (errors, codes)


def test_without_its_template_a_process_did_not_start_and_it_is_not_the_job_s(tmp_path):
    sandbox = Sandbox(hide=(str(tmp_path / "data"),))
    job_dir = tmp_path / "data" / "job"
    sandbox.prepare_job_dir(job_dir, "job-7")
    warm = WarmStart("\0dlsched-no-such-template", sandbox.uid("job-7"), {}, "/job")
    process = TenantProcess(
        sandbox.command(job_dir, "job-7", placeholder=True),
        sandbox.environment(job_dir),
        tmp_path / "log",
        warm=warm,
    )
    with pytest.raises(TenantStartError, match="no tenant process from the template"):
        process.call("train", timeout_s=60)


def test_only_root_may_ask_the_template(tmp_path, template):
    # another uid asks for a tenant process in a real sandbox's placeholder, a request the
    # template grants root: the connection is closed unanswered
    sandbox = Sandbox(hide=(str(tmp_path / "data"),))
    job_dir = tmp_path / "data" / "job"
    sandbox.prepare_job_dir(job_dir, "job-7")
    hold_r, hold_w = os.pipe()
    placeholder = subprocess.Popen(
        sandbox.command(job_dir, "job-7", placeholder=True),
        env=sandbox.environment(job_dir),
        stdin=hold_r,
        start_new_session=True,
    )
    request = {
        "placeholder": _placeholder_pid(placeholder, sandbox.uid("job-7")),
        "uid": sandbox.uid("job-7"),
        "limits": sandbox.limits(),
        "cwd": "/job",
        "env": sandbox.environment(job_dir),
    }
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.setresuid(200_123, 200_123, 200_123)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(30)
                s.connect(template)  # it listens
                try:
                    fds = [theirs.fileno(), 2, hold_w]
                    socket.send_fds(s, [json.dumps(request).encode()], fds)
                    code = 0 if s.recv(100) == b"" else 2
                except (BrokenPipeError, ConnectionResetError):
                    code = 0  # closed before the request was read
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.killpg(placeholder.pid, 9)
        placeholder.wait()


def test_a_template_that_ended_is_started_again_when_next_asked_for(monkeypatch):
    # before, a node whose template had ended started every tenant process cold from then on
    from dlsched.runtime import template_host

    monkeypatch.setattr(template_host, "MAX_RESTARTS", 1)
    host = template_host.TemplateProcess(Sandbox())
    try:
        first = host.socket_address(120)
        assert first is not None and _listening(first)
        host.proc.kill()
        host.proc.wait()
        again = host.socket_address(120)
        assert again is not None and again != first and _listening(again)
        host.proc.kill()
        host.proc.wait()
        assert host.socket_address(120) is None  # past MAX_RESTARTS: cold starts
    finally:
        host.proc.kill()
        host.proc.wait()
