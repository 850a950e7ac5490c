"""A program that trains honestly and then says it stopped at iteration ``args["said"]``
(tests/test_security.py): 10**30 overflowed the database's integer, and the server's pass lost
the other runs' outcomes polled with it."""

from dlsched.runtime import train
from dlsched.workloads.emulated import build as emulated


def build(args):
    said = int(float(args.pop("said")))
    honest = train.Trainer.run

    def run(self):
        return {**honest(self), "iteration": said}

    train.Trainer.run = run
    return emulated(args)
