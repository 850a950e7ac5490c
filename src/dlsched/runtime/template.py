"""A warm start for isolated tenant processes: a template process per node that has imported
PyTorch and dlsched's tenant side once, and forks each tenant process from itself into a sandbox
bubblewrap made, instead of a new interpreter importing them all again (about 2 CPU-s a process
on this 2-core machine, and nearly as much again for a process that builds DDP, which imports
``torch._dynamo``).

How a tenant process starts this way (:class:`.tenant_process.TenantProcess` with a template):

1. the worker starts bubblewrap as for any tenant process (its namespaces, mounts, the job's uid,
   rlimits, control group and network), with ``cat`` as its program: a placeholder that reads a
   pipe whose only writer is the tenant process, so the sandbox lasts as long as it does;
2. it asks the template, over an abstract Unix socket only root may use (the caller's uid is
   checked), for a process in that sandbox, passing the channel, the log, the pipe and the
   control group's files;
3. the template forks; the child joins the control group, enters the placeholder's namespaces
   (IPC, UTS, network, cgroup, PID, mount) and its root, and forks again, inside the PID
   namespace: that process drops every capability, becomes the job's uid with
   ``no_new_privs`` and the sandbox's rlimits, and serves the worker as a tenant process does
   (READY first). The child between them waits for it and tells the worker its exit code.

The template is started by the worker's node with the sandbox's environment and ``python -I``,
reads nothing of the server's and is given no secret: a tenant process inherits its memory.
Run as ``python -I -m dlsched.runtime.template NAME``: it listens on the abstract Unix socket
``\0NAME``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import struct
import sys
import traceback
from typing import NoReturn

from .cgroups import join_fds
from .procfs import stat_fields
from .sandbox import TENANT_PROCESS

MAX_REQUEST = 64 * 1024  # bytes: the environment and the limits
MAX_FDS = 16  # the channel, the log, the placeholder's pipe and a control group's few files
ENTER_FAILED = 70  # the child's exit code when it could not enter the sandbox
PARENT_CHECK_S = 5.0  # how often the template looks whether its host is still there
# the template's environment gets this many bytes of room (a variable of blanks), which a forked
# process's environment is written over (_show_as): a job's is a few hundred bytes
ENV_ROOM = 4096
# the namespaces of the placeholder the child enters, all at once through its pidfd
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
)
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# -- the template --------------------------------------------------------------------------------
def main() -> None:
    name = sys.argv[1]
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # dies with its host
    from .startup_gc import collector_paused

    with collector_paused():
        import torch._dynamo.utils  # noqa: F401 (torch, and what DDP's constructor imports)

        from . import profile, tenant_process, train  # noqa: F401
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # abstract: see template_host
    listener.listen(64)
    listener.settimeout(PARENT_CHECK_S)
    parent = os.getppid()
    sys.stdout.flush()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # its host is gone (and the death signal did not come)
                os._exit(0)
            continue
        try:
            _handle(conn)
        except (OSError, ValueError):
            pass  # a request cut short: the worker sees its connection end
        finally:
            conn.close()


def _handle(conn: socket.socket) -> None:
    conn.settimeout(10)
    uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    if uid != os.getuid():  # only root (the template's own uid) may ask
        return
    data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, MAX_FDS)
    try:
        request = json.loads(data)
        if os.fork() == 0:
            try:
                _child(request, fds, conn)
            finally:  # never back into the template's loop, whatever the request held
                os._exit(ENTER_FAILED)
    finally:
        for fd in fds:
            os.close(fd)


# -- the child: enter, then fork the tenant process ---------------------------------------------
def _child(request: dict, fds: list[int], conn: socket.socket) -> NoReturn:
    """Enter the placeholder's sandbox, fork the tenant process in it, report its exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # to wait for it
    log = fds[1]
    keep = {0, 1, 2, conn.fileno(), *fds}
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own
    try:
        placeholder = request["placeholder"]
        pidfd = os.pidfd_open(placeholder)
        root = os.open(f"/proc/{placeholder}/root", os.O_RDONLY | os.O_DIRECTORY)
        # still the placeholder (not a process that took its pid since): it is alive, and it
        # is the job's uid's
        signal.pidfd_send_signal(pidfd, 0)
        if os.stat(f"/proc/{placeholder}").st_uid != request["uid"]:
            raise RuntimeError("the placeholder is not the job's")
        # the control group first: a process outside a cgroup namespace's root may not be moved
        # into it from inside; the tenant process, forked below, is born in the group
        join_fds(fds[3:])
        _check(_libc.setns(pidfd, NAMESPACES), "setns")
        os.fchdir(root)
        os.chroot(".")
        os.close(root)
        os.close(pidfd)
        tenant = os.fork()
    except BaseException:
        os.write(log, f"dlsched: the template could not enter the sandbox: {_last()}\n".encode())
        os._exit(ENTER_FAILED)
    if tenant == 0:
        conn.close()
        _become_tenant(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(json.dumps({"pid": tenant}).encode() + b"\n")
    except OSError:
        pass
    _, status = os.waitpid(tenant, 0)
    try:
        conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    finally:
        os._exit(0)


def _become_tenant(request: dict, fds: list[int]) -> NoReturn:
    """In the sandbox's PID namespace: become the job's confined process, then serve."""
    from . import tenant_process

    channel, log, hold, *group_fds = fds
    try:
        for fd in group_fds:
            os.close(fd)
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (null, log):
            os.close(fd)
        _drop_privileges(int(request["uid"]))
        for name, value in request["limits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        _check_address_space(request["limits"].get("RLIMIT_AS"))
        os.chdir(request["cwd"])
        env = {**request["env"], "PWD": request["cwd"]}  # (bubblewrap's --chdir sets PWD)
        os.environ.clear()  # (libc's environment no longer points into the first block)
        os.environ.update(env)
        _show_as(TENANT_PROCESS, env)
        sys.argv = [tenant_process.__file__]  # as a cold start's
        os.set_inheritable(hold, False)  # (the pipe ends with this process: not its children's)
    except BaseException:
        os.write(2, f"dlsched: the tenant process could not be confined: {_last()}\n".encode())
        os._exit(ENTER_FAILED)
    tenant_process.run(socket.socket(fileno=channel))


def _check_address_space(limit: int | None) -> None:
    """A cold start under an address-space limit below what the interpreter and PyTorch map
    fails in its imports, before READY; a forked process has them mapped already, so it checks:
    the same limit is then the same start failure, not the job's."""
    status = open("/proc/self/status").read()
    mapped = int(status.split("VmSize:")[1].split()[0]) * 1024
    if limit is not None and mapped >= limit:
        raise MemoryError(
            f"the address-space limit of {limit >> 20} MiB is below the {mapped >> 20} MiB a "
            "tenant process maps before running anything"
        )


def _show_as(argv: list[str], env: dict[str, str]) -> None:
    """Make ``ps`` and ``/proc/PID/cmdline`` and ``environ`` show a forked tenant process as a
    cold-started one: its command line and the job's environment, written over the template's
    own (the kernel reads them from the first ones' place in the process's memory; the template
    is started with room for an environment: ``ENV_ROOM``)."""
    fields = stat_fields("self")
    assert fields is not None  # (this process's own)
    # arg_start, arg_end, env_start, env_end: fields 48-51 of stat (the 46th-49th after comm)
    arg_start, arg_end, env_start, env_end = (int(f) for f in fields[45:49])
    for start, end, items in (
        (arg_start, arg_end, argv),
        (env_start, env_end, [f"{k}={v}" for k, v in env.items()]),
    ):
        data = b"".join(item.encode() + b"\0" for item in items)[: end - start - 1]
        ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


def _drop_privileges(uid: int) -> None:
    """As bubblewrap's ``setpriv`` does for a cold start: no capability in any set, not even in
    the bounding set, no supplementary group, the job's uid and gid, and ``no_new_privs``."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = struct.pack("Ii", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # effective, permitted, inheritable: none (two 32-bit words each)
    _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _last() -> str:
    return traceback.format_exc().strip().rpartition("\n")[2]


if __name__ == "__main__":
    main()
