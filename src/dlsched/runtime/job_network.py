"""A network of its own for each job's tenant processes (isolated mode; docs/security.md).

Tenant processes would otherwise share the host's network: one job could bind every ephemeral
port on the host and so stop Ray and every other job's workers from connecting. Instead:

- a profiling run gets a fresh network namespace from bubblewrap (``--unshare-net``): only a
  loopback device, no route out;
- the workers of a job that all run on one host share one such namespace, opened by the first
  of them (a small holder process, :class:`JobNetwork`); each worker's tenant process joins it
  before bubblewrap starts, and their process group meets on its 127.0.0.1;
- a job spread over several hosts keeps the host's network (its peers are on other machines):
  the per-process bound on open files is its only bound there.

Ports a job binds in its own namespace are its own: nothing outside sees them.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
import threading

CLONE_NEWNET = 0x40000000
HOST = "host"  # the network a tenant process keeps when its job spans hosts
PRIVATE = "private"  # a namespace of its own (bubblewrap's --unshare-net)


# resolved once, at import: a child between fork and exec must not load anything (see
# tenant_process._joining)
_setns = ctypes.CDLL(None, use_errno=True).setns


def enter(path: str) -> None:
    """Move the calling thread into the network namespace at ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        enter_fd(fd)
    finally:
        os.close(fd)


def enter_fd(fd: int) -> None:
    """Move the calling thread (or a child between fork and exec) into the network namespace
    open at ``fd``: one system call."""
    if _setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class JobNetwork:
    """A network namespace for the workers of one job on this host: only loopback, up. It lasts
    while this object is open and its creator lives (the holder dies with it)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "dlsched.runtime.job_network", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        if self.proc.stdout.readline().strip() != b"ready":
            error = self.proc.stderr.read().decode(errors="replace").strip().splitlines()
            self.close()
            raise OSError(f"no network namespace for the job: {error[-1] if error else '?'}")
        self.path = f"/proc/{self.proc.pid}/ns/net"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def free_address(netns: str | None) -> str:
    """host:port free for a process group's rendezvous: on 127.0.0.1 in the namespace ``netns``
    (looked up by a thread that enters it and ends), else on this node's address."""
    if netns is None:
        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((host, 0))
            return f"{host}:{s.getsockname()[1]}"
    found: list[str | BaseException] = []

    def look() -> None:
        try:
            enter(netns)  # this thread only, and it ends here
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                found.append(f"127.0.0.1:{s.getsockname()[1]}")
        except BaseException as e:
            found.append(e)

    thread = threading.Thread(target=look, name="job-network-port")
    thread.start()
    thread.join()
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def loopback_up() -> None:
    """Bring up ``lo`` in this thread's network namespace (a new one has it down):
    SIOCGIFFLAGS / SIOCSIFFLAGS on a struct ifreq (a 16-byte name, then the flags; IFF_UP = 1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))


def _hold(parent: int) -> None:
    """The holder process: dies with ``parent`` (PR_SET_PDEATHSIG, SIGKILL; gone already:
    exits), makes a namespace with its loopback up, says so, and keeps it until stdin closes."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, 9)
    if os.getppid() != parent:
        sys.exit(1)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    loopback_up()
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    _hold(int(sys.argv[1]))
