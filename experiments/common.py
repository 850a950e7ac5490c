"""The options the reproduction experiments share (each script adds its own)."""

from __future__ import annotations

import argparse


def experiment_parser(doc: str, out: str, workers: bool = True) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc``, with ``--out`` (default ``out``),
    ``--skip-philly`` and, unless ``workers`` is false, ``--workers``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--out", default=out, help="the folder of the results (default %(default)s)"
    )
    parser.add_argument(
        "--skip-philly",
        action="store_true",
        help="leave out the full-Philly runs (minutes each)",
    )
    if workers:
        parser.add_argument(
            "--workers",
            type=int,
            default=2,
            help="simulations at once, one process each (default %(default)s)",
        )
    return parser
