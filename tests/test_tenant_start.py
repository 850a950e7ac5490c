"""A tenant process that never started (the sandbox, its limits or the interpreter failed before
any of the tenant's code ran) is the node's failure, not the job's: it is told apart by the
``READY`` line dlsched's own code in the process sends first, and its error says what the
process printed (bubblewrap's reason). Before, a job whose sandbox could not start (a data
directory bubblewrap could not find) failed three times as its own failure, "the tenant process
exited (exit code 1)"."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap

import pytest

from dlsched.runtime.ray_executor import _tenant_failed
from dlsched.runtime.sandbox import Sandbox
from dlsched.runtime.tenant_process import READY, TenantError, TenantProcess, TenantStartError

FAILS_BEFORE_READY = (
    "import sys; print('bwrap: Can\\'t find source path /nowhere', file=sys.stderr); sys.exit(1)"
)
# the tenant's side after READY: its program raises and the process exits
FAILS_AFTER_READY = textwrap.dedent(
    f"""
    import os, socket, sys
    sock = socket.socket(fileno=int(os.environ["DLSCHED_CHANNEL_FD"]))
    sock.sendall(b'{json.dumps(READY)}\\n')
    sock.recv(1 << 16)  # the request
    print("Traceback: the tenant's program raised", flush=True)
    sys.exit(1)
    """
)


def test_a_process_that_ends_before_ready_did_not_start_and_is_not_the_jobs(tmp_path):
    process = TenantProcess([sys.executable, "-c", FAILS_BEFORE_READY], {}, tmp_path / "log")
    with pytest.raises(TenantStartError) as e:
        process.call("train", timeout_s=60)
    text = str(e.value)
    # (its exit code, or SIGKILL's: a process that closed its channel is killed if it lingers)
    assert "the tenant process did not start (exit code" in text, text
    assert "bwrap: Can't find source path /nowhere" in text, text
    assert not process.started
    assert not _tenant_failed(e.value)  # the executor puts it on the cluster


def test_a_request_to_a_process_already_gone_before_ready_is_a_start_failure_too(tmp_path):
    # bubblewrap's own failure is over before the worker sends its first request: the send's
    # broken pipe raised "the tenant process is gone" (the job's failure) unless the reader
    # had already said why
    process = TenantProcess([sys.executable, "-c", FAILS_BEFORE_READY], {}, tmp_path / "log")
    process.proc.wait(timeout=60)
    with pytest.raises(TenantStartError) as e:
        process.call("train", timeout_s=60)
    assert "bwrap: Can't find source path /nowhere" in str(e.value), str(e.value)


def test_a_process_that_ends_after_ready_is_the_jobs_failure(tmp_path):
    process = TenantProcess([sys.executable, "-c", FAILS_AFTER_READY], {}, tmp_path / "log")
    with pytest.raises(TenantError) as e:
        process.call("train", timeout_s=60)
    assert not isinstance(e.value, TenantStartError)
    text = str(e.value)
    assert "the tenant process exited (exit code" in text and "see the job's log" in text, text
    assert process.started
    assert _tenant_failed(e.value)


def test_the_tenant_process_says_ready_before_any_request(tmp_path):
    # the real module, as the executor starts it (trusted: no bubblewrap needed)
    sandbox = Sandbox(isolate=False)
    process = TenantProcess(
        sandbox.command(tmp_path, "job-1"), sandbox.environment(tmp_path), tmp_path / "log"
    )
    try:
        assert process.call("progress", timeout_s=120) is None  # no trainer yet
        assert process.started
    finally:
        process.kill()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap"
)
def test_a_sandbox_that_cannot_mount_the_jobs_directory_did_not_start(tmp_path):
    sandbox = Sandbox(hide=(str(tmp_path / "data"),))
    missing = tmp_path / "data" / "jobs" / "job-1"  # never made
    process = TenantProcess(
        sandbox.command(missing, "job-1"), sandbox.environment(missing), tmp_path / "log"
    )
    with pytest.raises(TenantStartError) as e:
        process.call("train", timeout_s=60)
    assert "bwrap: Can't find source path" in str(e.value), str(e.value)
