"""Folders the tests make outside pytest's own temporary folders (set before any fixture runs),
removed when the process that made them exits: each suite run made three or four, and none was
ever removed."""

from __future__ import annotations

import atexit
import shutil
import tempfile


def scratch_dir(prefix: str) -> str:
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
