"""A program that binds every local port it can, keeps them, and trains (tests/test_security.py):
on a shared network it would leave no ephemeral port for Ray or any other job's workers."""

import socket

from dlsched.workloads.emulated import build as emulated

HELD: list[socket.socket] = []  # kept open for as long as the process trains


def build(args):
    while True:
        try:
            s = socket.socket()
        except OSError as e:  # the process's open-file limit: keep some files for training
            for s in HELD[-64:]:
                s.close()
            del HELD[-64:]
            print(f"HELD {len(HELD)} ports, then: {e.strerror}", flush=True)
            break
        try:
            s.bind(("127.0.0.1", 0))
        except OSError as e:  # every port is taken
            s.close()
            print(f"HELD {len(HELD)} ports, then: {e.strerror}", flush=True)
            break
        s.listen(1)
        HELD.append(s)
    return emulated(args)
