"""The server's admin token: private from the first byte, never stale, never on a command line."""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys

import pytest

from dlsched.errors import SpecError
from dlsched.runtime.api import hash_token
from dlsched.runtime.server import admin_token_hash, given_admin_token, hold_exclusively
from dlsched.runtime.store import SQLiteStore


def test_the_generated_token_file_is_private_and_a_given_token_replaces_it(tmp_path, capsys):
    store = SQLiteStore(tmp_path / "db.sqlite")
    first = admin_token_hash(store, tmp_path, None)
    path = tmp_path / "admin.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert hash_token(path.read_text().strip()) == first
    assert admin_token_hash(store, tmp_path, None) == first  # a restart keeps it
    given = admin_token_hash(store, tmp_path, "from-the-operator")
    assert given == hash_token("from-the-operator") and not path.exists()  # not left stale
    assert "removed" in capsys.readouterr().out


def test_the_token_comes_from_a_file_or_the_environment(tmp_path, monkeypatch):
    args = argparse.Namespace(admin_token_file=None)
    monkeypatch.setenv("DLSCHED_ADMIN_TOKEN", "env-token")
    assert given_admin_token(args) == "env-token"
    token_file = tmp_path / "t"
    token_file.write_text("file-token\n")
    assert given_admin_token(argparse.Namespace(admin_token_file=str(token_file))) == "file-token"
    token_file.write_text("\n")
    with pytest.raises(SpecError, match="admin-token-file"):
        given_admin_token(argparse.Namespace(admin_token_file=str(token_file)))
    with pytest.raises(SpecError, match="admin-token-file"):
        given_admin_token(argparse.Namespace(admin_token_file=str(tmp_path / "missing")))


def _server(data_dir, *options):
    """``dlsched server`` on ``data_dir``: its exit code and output (it must stop by itself).

    Trusted: isolation's needs (root, bubblewrap) are checked first and are not these tests'
    concern, so without them (``make check`` installs neither) the checks under test still run."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlsched.cli",
            "server",
            "--data-dir",
            str(data_dir),
            "--trust-tenants",
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    return r.returncode, r.stdout + r.stderr


def test_a_second_server_on_a_data_directory_or_database_in_use_is_refused(tmp_path):
    """Two servers on one data directory (or one database) would both run its queued jobs: the
    second stops before it starts anything, naming the option and the first one's pid; a lock
    whose holder ended (even killed) is free again."""
    data, db = tmp_path / "data", tmp_path / "shared.db"
    data.mkdir()
    held = hold_exclusively(data / "server.lock", "data-dir", data)  # as a running server does
    code, out = _server(data, "--port", "0")
    assert code == 2 and f"field 'data-dir': {data} is in use by another dlsched server" in out
    assert f"(pid {os.getpid()})" in out
    os.close(held)
    held = hold_exclusively(db.with_name("shared.db.lock"), "db", db)
    code, out = _server(tmp_path / "other", "--db", str(db), "--port", "0")
    assert code == 2 and f"field 'db': {db} is in use by another dlsched server" in out
    os.close(held)
    # a holder that ended, killed, leaves the lock free
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from dlsched.runtime.server import hold_exclusively; "
            "hold_exclusively(Path(sys.argv[1]), 'data-dir', Path('.')); print(flush=True); "
            "time.sleep(60)",
            str(data / "server.lock"),
        ],
        stdout=subprocess.PIPE,
    ) as holder:
        holder.stdout.readline()
        with pytest.raises(SpecError, match=f"pid {holder.pid}"):
            hold_exclusively(data / "server.lock", "data-dir", data)
        holder.kill()
    os.close(hold_exclusively(data / "server.lock", "data-dir", data))


def test_a_ray_address_nobody_answers_is_refused_at_once(tmp_path):
    """`dlsched server --ray-address` (and `dlsched sweep`'s) on an address where nothing
    listens waited over two minutes, Ray logging retries; it stops now, naming the option."""
    import socket

    from dlsched.runtime.ray_setup import check_reachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}", "ray-address")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]  # bound, not listening: refused
            for address, reason in (
                (f"127.0.0.1:{closed}", "no Ray cluster answers at"),
                ("nohost", "must be HOST:PORT"),
                ("host:0", "must be HOST:PORT"),
            ):
                with pytest.raises(SpecError, match=reason) as e:
                    check_reachable(address, "ray-address")
                assert e.value.field == "ray-address"
            code, out = _server(tmp_path, "--ray-address", f"127.0.0.1:{closed}", "--port", "0")
            assert code == 2 and "field 'ray-address': no Ray cluster answers" in out, out
            spec = tmp_path / "s.yaml"
            spec.write_text(
                "runs: {trace: muri-3, cluster: 2x8, limit: 5}\naxes: {policy: [fifo]}\n"
            )
            sweep = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dlsched.cli",
                    "sweep",
                    "--out",
                    str(tmp_path / "sweep"),
                    "--ray-address",
                    f"127.0.0.1:{closed}",
                    "--ray-token-file",
                    str(tmp_path / "sweep.token"),
                    str(spec),
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert sweep.returncode == 2, sweep.stdout + sweep.stderr
            assert "field 'ray-address': no Ray cluster answers" in sweep.stderr


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path):
    """It stopped the server (exit 3, uvicorn's error) only once Ray was up and it had printed
    that it was serving."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = _server(tmp_path, "--port", str(port))
    assert code == 2 and f"field 'port': cannot listen on 127.0.0.1:{port}" in out, out
    assert "serving" not in out


def test_cold_starts_is_the_sandbox_s_choice_and_forked_the_default(tmp_path, monkeypatch):
    # the server's option reaches the workers through the sandbox it ships them (isolation's
    # own needs, root and bubblewrap, are not this test's: the sandbox's check is left out)
    from dlsched.cli import build_parser
    from dlsched.runtime.sandbox import Sandbox
    from dlsched.runtime.server import check_options, sandbox_from

    monkeypatch.setattr(Sandbox, "check", lambda self: None)

    def sandbox(*options):
        args = build_parser().parse_args(["server", *options])
        check_options(args, {})
        return sandbox_from(args, tmp_path)

    assert sandbox().warm and not sandbox("--cold-starts").warm


@pytest.mark.parametrize(
    "option",
    [
        ["--cold-starts"],
        ["--sandbox-expose", "/srv"],
        ["--tenant-uids", "100000-100099"],
        ["--job-memory-mib", "4096"],
        ["--job-max-processes", "64"],
        ["--job-cpus", "1"],
    ],
)
def test_an_isolation_option_beside_trust_tenants_is_refused(option):
    # with --trust-tenants a tenant process runs unisolated and unbounded: these were dropped
    # in silence (an operator could believe its jobs bounded)
    from dlsched.cli import build_parser
    from dlsched.runtime.server import check_options

    args = build_parser().parse_args(["server", "--trust-tenants", *option])
    with pytest.raises(SpecError, match="--trust-tenants") as e:
        check_options(args, {})
    assert e.value.field == option[0][2:]


def test_a_tenant_process_s_memory_bound_below_its_imports_is_refused():
    from dlsched.runtime.sandbox import MIN_MEMORY_MIB, Sandbox

    with pytest.raises(SpecError, match=f"at least {MIN_MEMORY_MIB}") as e:
        Sandbox(hide=(), isolate=False, memory_mib=512).check()
    assert e.value.field == "job-memory-mib"
