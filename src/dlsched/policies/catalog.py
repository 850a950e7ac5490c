"""The built-in policies by name, and making one from a name and parameters. The one place
that knows every policy: policy modules do not import it, so there is no import cycle."""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import SpecError
from .aryl import Aryl, ArylBase, ArylNaiveReclaim, ArylNoElastic, ArylNoLoan
from .base import Policy
from .elastic import ElasticFifo, ElasticTiresias
from .fairshare import Drf, Ftf
from .fifo import Fifo
from .genie import Edf, Genie, GenieOracle
from .sharing import SjfBsbf, SjfBsbfConsolidated, SjfFfs, SjfFfsConsolidated
from .sjf import Sjf, Srtf
from .tiresias import Tiresias

_BUILT_IN: tuple[type[Policy], ...] = (
    Fifo,
    Sjf,
    Srtf,
    Tiresias,
    SjfFfs,
    SjfBsbf,
    SjfFfsConsolidated,
    SjfBsbfConsolidated,
    ElasticTiresias,
    ElasticFifo,
    Genie,
    GenieOracle,
    Edf,
    Aryl,
    ArylNoLoan,
    ArylNoElastic,
    ArylNaiveReclaim,
    ArylBase,
    Drf,
    Ftf,
)
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in sorted(_BUILT_IN, key=lambda c: c.name)
}


def make_policy(name: str, **params: Any) -> Policy:
    if name not in POLICIES:
        raise SpecError("policy", f"unknown policy '{name}': choose from {', '.join(POLICIES)}")
    cls = POLICIES[name]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise SpecError(
            "param",
            f"policy '{name}' has no parameter '{unknown[0]}' "
            f"(it takes {', '.join(sorted(accepted))})",
        )
    return cls(**params)
