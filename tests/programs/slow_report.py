"""A program whose progress answer is slow at the end of its run (tests/test_security.py): the
run ends, and its process is gone, while the worker waits for that answer (issue 29, item 6)."""

import time

from dlsched.runtime import train
from dlsched.workloads.emulated import build as emulated


def build(args):
    honest = train.Trainer.progress

    def progress(self):
        if self.iteration >= self.iterations // 2:
            time.sleep(3)  # the second half of the run (about a second) finishes meanwhile
        return honest(self)

    train.Trainer.progress = progress
    return emulated(args)
