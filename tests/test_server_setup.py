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
    """``dlsched server`` on ``data_dir``: its exit code and output (it must stop by itself)."""
    r = subprocess.run(
        [sys.executable, "-m", "dlsched.cli", "server", "--data-dir", str(data_dir), *options],
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
    code, out = _server(data, "--port", "1")
    assert code == 2 and f"field 'data-dir': {data} is in use by another dlsched server" in out
    assert f"(pid {os.getpid()})" in out
    os.close(held)
    held = hold_exclusively(db.with_name("shared.db.lock"), "db", db)
    code, out = _server(tmp_path / "other", "--db", str(db), "--port", "1")
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
