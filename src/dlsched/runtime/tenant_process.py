"""The tenant process and the narrow channel to it.

dlsched's worker (trusted, a Ray actor) starts one tenant process per job worker through the
:class:`~.sandbox.Sandbox` and speaks to it over a socket pair, one JSON object per line:

- requests ``{"id": n, "op": ..., **args}``: ``train`` (the job's config, its rank and world:
  builds the :class:`~.train.Trainer`), ``setup``, ``prepare``, ``regroup``, ``run``,
  ``profile``, ``profile_placements`` (one worker of GENIE's profiling group); answered in order by
  ``{"id": n, "ok": result}`` or ``{"id": n, "error": text}``;
- ``progress``, answered at once even while ``run`` goes on;
- ``stop`` and ``switch``, which only set the trainer's flags (no answer).

Before any of these the process sends ``READY`` once, when dlsched's own code in it is up and
before any of the tenant's runs: a process that ends before that did not start (the sandbox,
its limits or the interpreter failed: :class:`TenantStartError`), which is not the job's fault.

The process runs the tenant's program, so everything it sends is untrusted: a line is bounded
(``MAX_LINE``), must be JSON, and can only speak of its own job. Its stdout and stderr are the
job's log. Run as ``python -m dlsched.runtime.tenant_process`` with the channel on
``DLSCHED_CHANNEL_FD``.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from .cgroups import Group, join_fds
from .job_network import enter_fd
from .limits import LOG_HARD_BYTES, LOG_HEAD_BYTES, LOG_TAIL_BYTES

MAX_LINE = 256 * 1024  # bytes in one message: a traceback is cut to fit
MAX_ERROR = 16 * 1024
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(text: str, limit: int = MAX_ERROR) -> str:
    """Text fit for an event: no terminal colour codes, at most ``limit`` characters (the end
    kept)."""
    text = ANSI.sub("", text)
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


READY = {"ready": True}  # the process's first line: its own code is up, the tenant's not yet run
# the output's end kept for the text of a process that did not start (its last line: bubblewrap's
# reason)
START_OUTPUT_BYTES = 500


class TenantError(RuntimeError):
    """The tenant process failed: its own error text, or the channel broke."""


class TenantStartError(TenantError):
    """The tenant process ended before it was ``READY``: no code of the tenant's ran, so the
    failure is the node's or the setup's (bubblewrap's mounts, the limits, the interpreter)."""


class LogRelay:
    """Copies a tenant process's output (a pipe) into the job's log, bounded: in full while the
    log file is under ``head`` bytes (all the job's processes together: they append to one
    file); past that only the last ``tail`` bytes are kept, and written when the output ends
    after a line that says how much was cut; once the file is over ``hard`` bytes, only that
    line. The tenant cannot fill the server's disk by printing (limits.py)."""

    def __init__(
        self,
        source: Any,
        log_path: Path,
        head: int = LOG_HEAD_BYTES,
        tail: int = LOG_TAIL_BYTES,
        hard: int = LOG_HARD_BYTES,
    ) -> None:
        self.source, self.head, self.tail, self.hard = source, head, tail, hard
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        self.fd = os.open(log_path, flags, 0o600)
        self.kept = bytearray()  # the last bytes, once the head is full
        self.cut = 0  # bytes dropped
        self.last = b""  # the output's last bytes, whatever was written or cut
        self.thread = threading.Thread(target=self._copy, daemon=True, name="tenant-log")
        self.thread.start()

    def _copy(self) -> None:
        try:
            while chunk := self.source.read1(64 * 1024):
                self.last = (self.last + chunk[-START_OUTPUT_BYTES:])[-START_OUTPUT_BYTES:]
                if not self.kept:
                    room = self.head - os.fstat(self.fd).st_size
                    if len(chunk) <= room:
                        os.write(self.fd, chunk)
                        continue
                    if room > 0:  # the head's last bytes
                        os.write(self.fd, chunk[:room])
                        chunk = chunk[room:]
                self.kept += chunk
                if len(self.kept) > self.tail:
                    self.cut += len(self.kept) - self.tail
                    del self.kept[: len(self.kept) - self.tail]
            if self.cut:
                mark = f"\n[dlsched: {self.cut} bytes of this process's output cut here"
                if os.fstat(self.fd).st_size > self.hard:
                    self.cut += len(self.kept)
                    mark = f"\n[dlsched: {self.cut} bytes of this process's output cut"
                    self.kept = bytearray()
                os.write(self.fd, f"{mark}: the log is over its limit]\n".encode())
            if self.kept:
                os.write(self.fd, bytes(self.kept))
        except (OSError, ValueError):
            pass  # the disk is full or the pipe closed: the output is lost, not the worker
        finally:
            os.close(self.fd)
            self.source.close()


@dataclass(frozen=True)
class WarmStart:
    """A tenant process forked from the node's template (:mod:`.template`) into the sandbox
    that ``argv`` makes around a placeholder (:meth:`.sandbox.Sandbox.command`)."""

    address: str  # the template's socket (abstract: a leading NUL)
    uid: int  # the job's, as the sandbox runs it
    limits: dict[str, int]  # the sandbox's rlimits, by their names in :mod:`resource`
    cwd: str  # in the sandbox


class TenantProcess:
    """The worker's end: start the process, call it, stop it."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        group: Group | None = None,
        netns: str | None = None,
        warm: WarmStart | None = None,
    ) -> None:
        """``group``: the control group the process (and all it forks) runs in; ``netns``: the
        network namespace it starts in (the job's, :mod:`.job_network`), else this one;
        ``warm``: forked from a template, ``argv`` starting its sandbox's placeholder."""
        ours, theirs = socket.socketpair()
        self.group = group
        group_fds = group.open_for_child() if group is not None else []
        netns_fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC) if netns is not None else None
        log_r, log_w = os.pipe()  # the job's log: bubblewrap's output and the process's
        # (copied from the start: should the start fail, the relay ends as the writers close)
        self.log = LogRelay(open(log_r, "rb"), log_path)
        # the placeholder's stdin, the forked one's
        hold: tuple[int, ...] = os.pipe() if warm is not None else ()
        self._template: socket.socket | None = None  # where a forked process's end is told
        # its end is asked by the reader (the channel closed) and by kill(), often at once: the
        # first waits for it, the other gets its code (two readers of the template's answer
        # failed a job's run: "Bad file descriptor")
        self._end_lock = threading.Lock()
        self._exit_code: int | None = None
        try:
            self.proc = subprocess.Popen(
                argv,
                env=env
                if warm is not None
                else {**env, "DLSCHED_CHANNEL_FD": str(theirs.fileno())},
                stdin=hold[0] if hold else subprocess.DEVNULL,
                stdout=log_w,
                stderr=log_w,
                pass_fds=() if warm is not None else (theirs.fileno(),),
                cwd="/",
                start_new_session=True,
                preexec_fn=_joining(group_fds, netns_fd),
            )
            if warm is not None:
                try:
                    self._template = _fork_from(
                        warm, self.proc, env, [theirs.fileno(), log_w, hold[1], *group_fds]
                    )
                except (OSError, TenantError) as e:  # not started: the reader says so
                    os.write(log_w, f"dlsched: no tenant process from the template: {e}\n".encode())
        finally:
            for fd in [log_w, *hold, *group_fds, *([] if netns_fd is None else [netns_fd])]:
                os.close(fd)
        theirs.close()
        self.sock = ours
        self.reader = ours.makefile("rb")
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._waiting: dict[int, queue.Queue] = {}
        self._broken: str | None = None
        self.started = False  # READY came
        self._reader = threading.Thread(target=self._read, daemon=True, name="tenant-reader")
        self._reader.start()

    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        """Send a request and wait for its answer; :class:`TenantError` if it failed."""
        n = next(self._ids)
        box: queue.Queue = queue.Queue(maxsize=1)
        self._waiting[n] = box
        try:
            self._send({"id": n, "op": op, **args})
            try:
                reply = box.get(timeout=timeout_s)
            except queue.Empty:
                raise TenantError(f"no answer to {op} within {timeout_s:.0f} s") from None
        finally:
            self._waiting.pop(n, None)
        if "error" in reply:
            # its program may fail because the kernel killed a child it forked: say so
            killed = _memory_kills(self.group)
            note = f"\n[dlsched: some of its processes were killed: {killed}]" if killed else ""
            raise self._failure(plain(str(reply["error"])) + note)
        return reply.get("ok")

    def tell(self, op: str) -> None:
        """A request without an answer (``stop``, ``switch``)."""
        try:
            self._send({"op": op})
        except TenantError:
            pass  # gone already: its end is reported by the call that waits on it

    def kill(self) -> None:
        """End the process and everything it started (its PID namespace goes with it), and
        let its log's kept tail be written (the worker may be gone right after)."""
        self._end_process()
        self.sock.close()
        self.log.thread.join(timeout=10)

    def _end_process(self) -> int:
        """Kill the process and what is left of its session and its control group (children it
        forked that outlive it), and return its exit code (a forked one's, as its parent in the
        sandbox saw it)."""
        with self._end_lock:
            if self._exit_code is None:
                if self.proc.returncode is None:  # not reaped yet: the group id is its own
                    try:
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                code = self.proc.wait()
                if self._template is not None:
                    code = _forked_exit(self._template, code)
                # then what its session's kill missed (a child in a session of its own, a
                # sandbox stuck in its setup): not before its code is known, or a process
                # ending on its own, its channel closed already, was killed in its last steps
                if self.group is not None:
                    self.group.kill_tasks()
                self._exit_code = code
            return self._exit_code

    def _failure(self, text: str) -> TenantError:
        """The error of a process that failed: the job's once it was READY, else a start's."""
        return (TenantError if self.started else TenantStartError)(text)

    def _send(self, message: dict) -> None:
        if self._broken:
            raise self._failure(self._broken)
        data = (json.dumps(message) + "\n").encode()
        try:
            with self._send_lock:
                self.sock.sendall(data)
        except OSError as e:
            # gone: the reader, which ends with it, says why (a process that did not start
            # is usually gone before the first request is sent)
            self._reader.join(timeout=10)
            raise self._failure(
                self._broken or f"the tenant process is gone ({e.strerror})"
            ) from None

    def _read(self) -> None:
        reason = "the tenant process exited"
        try:
            while True:
                line = self.reader.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE or not line.endswith(b"\n"):
                    reason = f"the tenant process sent a message over {MAX_LINE} bytes"
                    break
                try:
                    reply = json.loads(line)
                    if not self.started:
                        if reply != READY:
                            raise ValueError("not READY")
                        self.started = True
                        continue
                    box = self._waiting.get(int(reply["id"]))
                except (ValueError, KeyError, TypeError):
                    reason = "the tenant process broke the protocol"
                    break
                if box is not None and isinstance(reply, dict):
                    box.put(reply)
        except OSError:
            pass
        code = self._end_process()  # a process that left the channel is done with
        group = self.group
        killed = _memory_kills(group)
        if killed and code != 0:
            reason = f"killed: {killed}"
        elif not self.started:
            reason = "the tenant process did not start"
        broken = f"{reason} (exit code {code}{_signal_name(code)})"
        if not self.started:
            self.log.thread.join(timeout=5)  # the output ends with the process (its own)
            # its last line: bubblewrap's reason, a traceback's error
            last = self.log.last.decode(errors="replace").strip().rpartition("\n")[2]
            if last:
                broken += f": {plain(last, START_OUTPUT_BYTES)}"
        elif code != 0:
            broken += "; see the job's log"
        self._broken = broken  # (whole: a request sent meanwhile raises it)
        if group is not None:
            group.remove()
        for box in list(self._waiting.values()):
            box.put({"error": self._broken})


def _memory_kills(group: Group | None) -> str:
    """What the kernel's memory limit did to the group's processes, or "" if nothing."""
    if group is None or not group.oom_kills():
        return ""
    limit = (group.memory_bytes or 0) >> 20
    return (
        f"its processes together went over the memory limit of {limit} MiB "
        "(a control group per worker)"
    )


def _fork_from(
    warm: WarmStart, placeholder: subprocess.Popen, env: dict[str, str], fds: list[int]
) -> socket.socket:
    """Ask the template for a tenant process in the sandbox around ``placeholder`` (bubblewrap,
    running ``cat``), passing it ``fds``: the channel, the log, the placeholder's pipe and the
    control group's files. Returns the connection that will tell its exit code."""
    pid = _placeholder_pid(placeholder, warm.uid)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(PLACEHOLDER_TIMEOUT_S)
    try:
        conn.connect(warm.address)
        request = {
            "placeholder": pid,
            "uid": warm.uid,
            "limits": warm.limits,
            "cwd": warm.cwd,
            "env": env,  # (its channel is given as it is: no variable names it)
        }
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
    except OSError:
        conn.close()
        raise
    conn.settimeout(None)
    return conn


def _placeholder_pid(bwrap: subprocess.Popen, uid: int) -> int:
    """The pid of bubblewrap's placeholder (its sandbox's init's child, ``cat`` once exec'd by
    ``setpriv`` and ``prlimit``, as the job's uid); :class:`TenantStartError` if bubblewrap
    ends or the placeholder does not appear within ``PLACEHOLDER_TIMEOUT_S``."""
    deadline = time.monotonic() + PLACEHOLDER_TIMEOUT_S
    while time.monotonic() < deadline and bwrap.poll() is None:
        for init in _children(bwrap.pid):
            for pid in _children(init):
                try:
                    ready = (
                        Path(f"/proc/{pid}/comm").read_text().strip() == "cat"
                        and os.stat(f"/proc/{pid}").st_uid == uid
                    )
                except OSError:
                    continue
                if ready:
                    return pid
        time.sleep(0.002)
    raise TenantStartError("the sandbox did not start (no placeholder)")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _forked_exit(conn: socket.socket, fallback: int) -> int:
    """A forked tenant process's exit code, as its parent in the sandbox reports it once it
    waited for it; ``fallback`` if the report does not come (the template's child is gone)."""
    try:
        conn.settimeout(PLACEHOLDER_TIMEOUT_S)
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                message = json.loads(line)
                if "exit" in message:
                    return int(message["exit"])
    except (OSError, ValueError):
        pass
    return fallback


# Chosen: bubblewrap sets a sandbox up in 15-30 ms here; the template answers at once
PLACEHOLDER_TIMEOUT_S = 30.0

# resolved once, at import: see _joining
_prctl = ctypes.CDLL(None, use_errno=True).prctl
PR_SET_PDEATHSIG, SIGKILL = 1, int(signal.SIGKILL)


def _joining(group_fds: list[int], netns_fd: int | None) -> Callable[[], None]:
    """The child's steps before exec: die with the worker (SIGKILL; Linux ties this to the
    thread that started the child: here a Ray actor's, which lives as long as the actor;
    bubblewrap, when isolated, does the same for everything inside its PID namespace), then join
    the control group and the job's network namespace. System calls only, on what the parent
    resolved and opened: the worker is a Ray process with many threads, and anything more
    between fork and exec (a dlopen, an open that allocates) can wait forever on a lock another
    thread held at the fork; the tenant process then never starts."""

    def steps() -> None:
        _prctl(PR_SET_PDEATHSIG, SIGKILL)
        join_fds(group_fds)
        if netns_fd is not None:
            enter_fd(netns_fd)

    return steps


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f", {signal.Signals(-code).name}"
        except ValueError:
            return ""
    return ", out of memory?" if code == 137 else ""


# -- the tenant's side ---------------------------------------------------------------------------
def stamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def log_line(line: str) -> None:
    """The job's log is this process's stdout."""
    print(f"{stamp()} {line}", flush=True)


def serve(sock: socket.socket) -> None:
    """Answer the worker's requests until the channel closes."""
    from .profile import profile_placements, profile_program
    from .train import Trainer

    lock = threading.Lock()
    work: queue.Queue = queue.Queue()
    trainer: list[Trainer] = []

    def reply(message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        with lock:
            sock.sendall(data)

    def listen() -> None:
        for line in sock.makefile("rb"):
            message = json.loads(line)
            op = message.get("op")
            if op == "progress":
                reply({"id": message["id"], "ok": trainer[0].progress() if trainer else None})
            elif op == "stop" and trainer:
                trainer[0].request_stop()
            elif op == "switch" and trainer:
                trainer[0].request_switch()
            else:
                work.put(message)
        work.put(None)

    threading.Thread(target=listen, daemon=True).start()
    while (message := work.get()) is not None:
        op = message.pop("op")
        n = message.pop("id")
        try:
            if op == "train":
                trainer.append(
                    Trainer(message["config"], message["rank"], message["world"], log_line)
                )
                result = None
            elif op == "profile":
                result = profile_program(message["config"])
            elif op == "profile_placements":
                result = profile_placements(**message)
            elif op in ("setup", "prepare", "regroup", "run"):
                result = getattr(trainer[0], op)(**message)
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException:  # the tenant's error, whole, for the job's events
            text = traceback.format_exc()
            log_line(text.rstrip())
            reply({"id": n, "error": plain(text)})
            if op == "run":
                break
            continue
        reply({"id": n, "ok": result})
        if op == "run":
            trainer[0].close()


def main() -> None:
    from .startup_gc import collector_paused

    with collector_paused():
        import torch  # noqa: F401

        from . import profile, train  # noqa: F401 (serve's imports, made under the pause)
    run(socket.socket(fileno=int(os.environ.pop("DLSCHED_CHANNEL_FD"))))


def run(sock: socket.socket) -> NoReturn:
    """The tenant process's life once its imports are made (here, or in the template it was
    forked from: :mod:`.template`): READY, then the worker's requests. It never returns (a
    process forked from a template would go on in the template's code)."""
    try:
        import torch

        torch.set_num_threads(1)
        sock.sendall((json.dumps(READY) + "\n").encode())
        serve(sock)
    finally:
        sys.stdout.flush()
        os._exit(0)  # no lingering threads of the tenant's program


if __name__ == "__main__":
    main()
