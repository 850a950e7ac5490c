"""A program whose forked children together take more memory than a worker may, each one alone
under every per-process limit (tests/test_security.py). Its error comes after the kernel has
killed them: the job's events must still name the limit."""

import os


def build(args):
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            try:
                hold = []
                while True:  # grows until the kernel kills it (or its own limit stops it)
                    hold.append(b"x" * (64 << 20))
            finally:
                os._exit(1)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    raise RuntimeError("its children are gone")
