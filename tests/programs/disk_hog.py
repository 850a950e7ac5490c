"""A program that fills its job's directory and trains on (tests/test_security.py): each file is
under the per-file limit, together they are over the directory's bound."""

import os

from dlsched.workloads.emulated import build as emulated


def build(args):
    block = b"\0" * (1 << 20)
    for i in range(int(args.pop("files_mib"))):
        with open(f"/job/junk-{i}", "wb") as f:  # 1 MiB each
            f.write(block)
    os.sync()
    return emulated(args)
