"""A program that prints far more than a log may hold, then trains honestly
(tests/test_security.py): ``args["print_mib"]`` MiB of numbered lines, ``LAST LINE`` at the end."""

import sys

from dlsched.workloads.emulated import build as emulated


def build(args):
    mib = int(args.pop("print_mib"))
    line = "x" * 1000
    for i in range(mib * 1024):
        sys.stdout.write(f"{i:08d} {line}\n")
    print("LAST LINE", flush=True)
    return emulated(args)
