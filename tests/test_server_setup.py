"""The server's admin token: private from the first byte, never stale, never on a command line."""

from __future__ import annotations

import argparse
import stat

import pytest

from dlsched.errors import SpecError
from dlsched.runtime.api import hash_token
from dlsched.runtime.server import admin_token_hash, given_admin_token
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
