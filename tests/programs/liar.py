"""A program that trains honestly but lies about its progress (tests/test_security.py): its
reports say ``args["field"]`` (iteration or iteration_s) is ``args["lie"]`` (nan or inf)."""

from dlsched.runtime import train
from dlsched.workloads.emulated import build as emulated


def build(args):
    field, lie = args.pop("field"), float(args.pop("lie"))
    honest = train.Trainer.progress

    def progress(self):
        return {**honest(self), field: lie}

    train.Trainer.progress = progress
    return emulated(args)
