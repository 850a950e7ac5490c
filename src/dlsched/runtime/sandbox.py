"""Where tenant code runs: a separate process per worker, isolated from the server and from
other jobs, spoken to only through a socket pair (:mod:`.tenant`).

Isolated (the default), the process is started by bubblewrap in its own mount, PID, IPC and UTS
namespaces, as the job's own unprivileged uid (``uid_base + job number % uid_count``; no account
is needed), with no capabilities, ``no_new_privs``, and rlimits on address space, processes and
open files. Its file system is a read-only view of the machine's with these exceptions:

- ``/job`` is the job's directory (checkpoints, samples), owned by the job's uid, mode 0700, and
  ``/tmp`` a private tmpfs of ``TMP_MIB``: the only writable places;
- the server's data directory (database, tokens, other jobs' directories) is an empty,
  read-only tmpfs;
- ``/tmp``, ``/root``, ``/home``, ``/run``, ``/mnt``, ``/media`` of the machine are not there
  (Ray's session directory, sockets and logs live under ``/tmp``), except the directories the
  Python interpreter needs and those the operator exposes (``--sandbox-expose``), read-only;
- ``/proc`` shows only the sandbox's own processes.

Its network is the job's own (:mod:`.job_network`): loopback only, shared by the job's workers on
one host; a job spread over hosts keeps the host's.

Its environment holds no Ray address or token and no dlsched token: only what training needs.
Trusted (``--trust-tenants``, a single-user setup) the process is the same but started directly,
as the server's user.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError
from .cgroups import Group, detect, group_name, remove_orphans
from .device import gpu_mounts
from .job_network import PRIVATE

# Chosen defaults, overridable by the server's options (docs/security.md).
DEFAULT_UID_BASE = 200_000
DEFAULT_UID_COUNT = 100_000
DEFAULT_MEMORY_MIB = 8192  # address space per process: torch alone maps about 1.5 GiB; 0: no limit
# The least address space accepted: the tenant process's own imports (torch, dlsched's runtime)
# failed at 512 and 600 MiB and passed at 650 MiB (prlimit --as, CPU torch 2.13, 2026-11-29),
# before any program of the tenant's; below, no tenant process would ever start.
MIN_MEMORY_MIB = 1024
DEFAULT_MAX_PROCESSES = 256  # tasks of the job's uid: processes and their threads
# CPU time of a worker's processes together, in cores: chosen as a GPU server's cores per GPU
# (a DGX-1 has 5, a DGX A100 16); 0: no bound. Bounded where the node has cgroup CPU control.
DEFAULT_CPUS = 8.0
MAX_OPEN_FILES = 4096
# the largest file a tenant process may write (a checkpoint, a file in /tmp): past it the write
# fails (SIGXFSZ)
MAX_FILE_MIB = 16384
# The job's directory as a whole (checkpoint, samples, what its program writes), checked while
# it runs: chosen to hold a checkpoint of a few billion parameters with its optimizer state.
DEFAULT_DIR_MIB = 32768
MAX_DIR_ENTRIES = 100_000  # files and directories in it
TMP_MIB = 1024  # the sandbox's own /tmp, in memory
HIDDEN_TOP_LEVEL = {
    "tmp",
    "root",
    "home",
    "run",
    "mnt",
    "media",
    "proc",
    "dev",
    "sys",
    "lost+found",
}
JOB_DIR_IN_SANDBOX = "/job"
TENANT_PROCESS = [sys.executable, "-I", "-m", "dlsched.runtime.tenant_process"]  # a cold start
LIMIT_OPTIONS = {  # prlimit's option for each rlimit
    "RLIMIT_AS": "as",
    "RLIMIT_NPROC": "nproc",
    "RLIMIT_NOFILE": "nofile",
    "RLIMIT_FSIZE": "fsize",
    "RLIMIT_CORE": "core",
}
_GROUP_NUMBERS = itertools.count(1)


@dataclass(frozen=True)
class Sandbox:
    """How tenant processes are started; built once by the server, shipped to every worker."""

    hide: tuple[str, ...] = ()  # the server's data directory, at least
    isolate: bool = True  # False: --trust-tenants
    uid_base: int = DEFAULT_UID_BASE
    uid_count: int = DEFAULT_UID_COUNT
    memory_mib: int = DEFAULT_MEMORY_MIB
    max_processes: int = DEFAULT_MAX_PROCESSES
    cpus: float = DEFAULT_CPUS
    dir_mib: int = DEFAULT_DIR_MIB  # 0: no bound
    expose: tuple[str, ...] = field(default=())  # read-only extras (program directories)
    warm: bool = True  # isolated processes forked from the node's template (template.py)

    def check(self) -> None:
        """Refuse a setup that cannot isolate: raise :class:`SpecError` naming what is missing."""
        if not self.cpus >= 0:
            raise SpecError("job-cpus", "must be 0 (no bound) or more")
        if not self.dir_mib >= 0:
            raise SpecError("job-dir-mib", "must be 0 (no bound) or more")
        if self.memory_mib and not self.memory_mib >= MIN_MEMORY_MIB:
            raise SpecError(
                "job-memory-mib",
                f"must be 0 (no bound) or at least {MIN_MEMORY_MIB}: a tenant process's own "
                f"imports need about 650 MiB of address space, got {self.memory_mib}",
            )
        if not self.isolate:
            return
        if os.geteuid() != 0:
            raise SpecError(
                "trust-tenants",
                "isolating tenant code needs root (to run it as other uids); "
                "run the server as root, or say --trust-tenants on a single-user machine",
            )
        if shutil.which("bwrap") is None:
            raise SpecError(
                "trust-tenants",
                "isolating tenant code needs bubblewrap (apt-get install bubblewrap), "
                "or say --trust-tenants on a single-user machine",
            )
        if not (0 < self.uid_base and self.uid_base + self.uid_count < 2**32 - 1):
            raise SpecError("tenant-uids", "the range must lie within 1 .. 2^32-2")
        for path in self.hide:
            for exposed in self._exposed():
                if Path(exposed).is_relative_to(path):
                    raise SpecError(
                        "data-dir", f"{path} holds {exposed}, which tenant code must read"
                    )

    def uid(self, job_id: str) -> int:
        """The job's own uid: its number (``job-N``; other ids by a stable hash) folded into the
        range. A job keeps it across restarts, and its files with it."""
        suffix = job_id.rsplit("-", 1)[-1]
        number = (
            int(suffix)
            if suffix.isdigit()
            else int(hashlib.sha256(job_id.encode()).hexdigest()[:12], 16)
        )
        return self.uid_base + number % self.uid_count

    def prepare_job_dir(self, job_dir: Path, job_id: str) -> None:
        """Create the job's directory, owned by the job's uid, mode 0700. What is inside was
        written by that uid: nothing is chowned recursively (a link the program planted must not
        turn a root-owned file into its own)."""
        job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.isolate:
            uid = self.uid(job_id)
            os.chown(job_dir, uid, uid, follow_symlinks=False)
        job_dir.chmod(0o700)

    def control_group(self, job_id: str) -> Group | None:
        """A control group for one tenant process of the job, on this node: its memory
        (``memory_mib``), tasks (``max_processes``) and CPU time (``cpus``) bounded with all it
        forks. None when not isolating or the node has no writable memory and pids control
        (the rlimits alone then; :func:`.cgroups.detect`). Groups of killed workers go first."""
        hierarchy = detect() if self.isolate else None
        if hierarchy is None:
            return None
        remove_orphans(hierarchy)
        name = group_name(job_id, next(_GROUP_NUMBERS))
        memory = self.memory_mib * 2**20 if self.memory_mib else None
        # bubblewrap and setpriv run in the group before the tenant's own tasks
        return Group(hierarchy, name, memory, self.max_processes + 8, self.cpus or None)

    def command(
        self, job_dir: Path, job_id: str, network: str = PRIVATE, placeholder: bool = False
    ) -> list[str]:
        """The argv that starts :mod:`.tenant` for ``job_dir`` (its channel is fd 3).
        ``network``: ``PRIVATE``, a namespace of its own; anything else, the one the process is
        started in (:mod:`.job_network`: the job's shared one, or the host's). ``placeholder``
        (isolated only): the sandbox runs ``cat`` instead, for a tenant process the node's
        template forks into it (:mod:`.template`)."""
        if not self.isolate:
            return list(TENANT_PROCESS)
        uid = self.uid(job_id)
        return [
            *self._bwrap(job_dir, network == PRIVATE),
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            "prlimit",
            *(f"--{LIMIT_OPTIONS[name]}={value}" for name, value in self.limits().items()),
            "--",
            *(["cat"] if placeholder else TENANT_PROCESS),
        ]

    def limits(self) -> dict[str, int]:
        """A tenant process's rlimits, by their names in :mod:`resource` (``prlimit`` sets them
        for a process started cold, :mod:`.template` for a forked one)."""
        return {
            **({"RLIMIT_AS": self.memory_mib * 2**20} if self.memory_mib else {}),
            "RLIMIT_NPROC": self.max_processes,
            "RLIMIT_NOFILE": MAX_OPEN_FILES,
            "RLIMIT_FSIZE": MAX_FILE_MIB * 2**20,
            "RLIMIT_CORE": 0,
        }

    def job_dir_problem(self, job_dir: Path) -> str | None:
        """Why the job's directory is over its bound (``dir_mib`` of disk, ``MAX_DIR_ENTRIES``
        entries), or None. Walked without following links, and only as far as the bound."""
        if not self.dir_mib:
            return None
        limit, used, entries = self.dir_mib << 20, 0, 0
        todo = [job_dir]
        while todo:
            try:
                with os.scandir(todo.pop()) as found:
                    for entry in found:
                        entries += 1
                        stat = entry.stat(follow_symlinks=False)
                        used += stat.st_blocks * 512  # on disk: a sparse file counts its blocks
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(Path(entry.path))
                        if used > limit:
                            return f"its directory went over its limit of {self.dir_mib} MiB"
                        if entries > MAX_DIR_ENTRIES:
                            return f"its directory went over {MAX_DIR_ENTRIES} files"
            except OSError:
                continue  # gone meanwhile
        return None

    def job_path(self, job_dir: Path, path: Path) -> str:
        """Where ``path`` (in ``job_dir``) is seen by the tenant process."""
        return str(JOB_DIR_IN_SANDBOX / path.relative_to(job_dir)) if self.isolate else str(path)

    def environment(self, job_dir: Path, **extra: str) -> dict[str, str]:
        """The tenant process's whole environment: nothing inherited from the worker."""
        home = JOB_DIR_IN_SANDBOX if self.isolate else str(job_dir)
        tmp = "/tmp" if self.isolate else str(job_dir)
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    # -- the bubblewrap view -------------------------------------------------------------------
    def _exposed(self) -> list[str]:
        return sorted({*_interpreter_paths(), *(str(Path(p).resolve()) for p in self.expose)})

    def _bwrap(self, job_dir: Path, own_network: bool) -> list[str]:
        args = [
            "bwrap",
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            *(["--unshare-net"] if own_network else []),
        ]
        for entry in sorted(Path("/").iterdir()):
            if entry.name in HIDDEN_TOP_LEVEL:
                continue
            if entry.is_symlink():
                args += ["--symlink", os.readlink(entry), str(entry)]
            else:
                args += ["--ro-bind", str(entry), str(entry)]
        # a private /tmp of bounded size, in memory: the machine's (Ray's sockets) is not there
        args += ["--size", str(TMP_MIB * 2**20), "--perms", "1777", "--tmpfs", "/tmp"]
        made: set[str] = set()
        for exposed in self._exposed():
            path = Path(exposed)
            if not path.exists() or len(path.parts) < 2 or path.parts[1] not in HIDDEN_TOP_LEVEL:
                continue  # visible already, read-only
            for parent in reversed(path.parents[:-1]):  # traversable parents in the sandbox's root
                if str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", exposed, exposed]
        for hidden in self.hide:
            args += [
                "--tmpfs",
                str(Path(hidden).resolve()),
                "--remount-ro",
                str(Path(hidden).resolve()),
            ]
        args += ["--bind", str(job_dir), JOB_DIR_IN_SANDBOX, "--proc", "/proc", "--dev", "/dev"]
        # real GPUs, where there are any: after /dev is made, or it would hide them
        args += gpu_mounts()
        args += ["--remount-ro", "/", "--chdir", JOB_DIR_IN_SANDBOX, "--"]
        return args


@functools.cache
def _interpreter_paths() -> tuple[str, ...]:
    """What ``python -I`` reads: its prefixes and ``sys.path`` (the venv, an editable source)."""
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
            "*sys.path]))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    paths = {str(Path(p).resolve()) for p in json.loads(out) if p}
    paths.add(str(Path(sys.executable).resolve().parent))
    # the most general first: a path inside another needs no bind of its own
    kept: list[str] = []
    for p in sorted(paths, key=len):
        if not any(Path(p).is_relative_to(k) for k in kept):
            kept.append(p)
    return tuple(sorted(kept))
