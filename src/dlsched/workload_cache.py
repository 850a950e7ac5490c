"""Prepared workloads kept on disk, so that a second run of the same trace with the same options
skips parsing, validation and model assignment (:func:`dlsched.prepare.prepare`).

An entry's name is a hash of everything that determines the workload: the options, the contents
of every input that is a file (trace, mapping, cluster YAML), and the package itself (its
version and the size and modification time of each of its files, so that an edited checkout
never reads an older preparation). An entry is its payload's SHA-256 then the payload (a
pickle); one whose checksum does not match, that cannot be read or that holds something else is
rebuilt, never trusted. The cache is the user's own folder (``--cache-dir``, else
``$DLSCHED_CACHE_DIR``, else ``$XDG_CACHE_HOME/dlsched``, else ``~/.cache/dlsched``): like any
cache of pickles, it must not be writable by others.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

ENTRY_FORMAT = 3  # bump when the payload's shape changes (2: jobs as columns; 3: seeded)
_DIGEST_BYTES = 64  # the hex SHA-256 that heads an entry


def default_cache_dir() -> Path:
    if os.environ.get("DLSCHED_CACHE_DIR"):
        return Path(os.environ["DLSCHED_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dlsched"


@cache
def package_fingerprint() -> str:
    """The package's version and the size and modification time of each of its files."""
    from . import __version__

    root = Path(__file__).parent
    h = hashlib.sha256(__version__.encode())
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            st = path.stat()
            h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def describe_inputs(value: Any) -> Any:
    """An input as it goes into the key: a file by its contents, anything else as it is."""
    if isinstance(value, str) and value and Path(value).is_file():
        return {"file_sha256": hashlib.sha256(Path(value).read_bytes()).hexdigest()}
    if isinstance(value, dict):
        return {str(k): describe_inputs(v) for k, v in sorted(value.items())}
    return value


def entry_path(cache_dir: Path, inputs: dict[str, Any]) -> Path:
    material = [ENTRY_FORMAT, package_fingerprint(), describe_inputs(inputs)]
    key = hashlib.sha256(json.dumps(material, sort_keys=True, default=repr).encode())
    return cache_dir / "workloads" / f"{key.hexdigest()}.pickle"


def load(path: Path, kind: type) -> Any | None:
    """The entry's object when it is whole and of ``kind``; else None (and the entry goes)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, payload = data[:_DIGEST_BYTES], memoryview(data)[_DIGEST_BYTES + 1 :]  # no copy
    try:
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            raise ValueError("checksum")
        obj = pickle.loads(payload)
        if not isinstance(obj, kind):
            raise TypeError(type(obj).__name__)
    except Exception:  # corrupt, truncated or from elsewhere: rebuilt by the caller
        path.unlink(missing_ok=True)
        return None
    return obj


def store(path: Path, obj: Any) -> None:
    """Write the entry atomically (a reader sees the old one or the new one, whole)."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
