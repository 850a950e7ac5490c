"""The policies by name, and making one from a name and parameters. The one place that knows
every policy: policy modules do not import it, so there is no import cycle.

A name is a built-in policy's, a plug-in's that an installed package declares in the entry
point group ``dlsched.policies`` (``name = "package.module:ClassName"``), or any policy class
given as ``package.module:ClassName`` (importable from ``sys.path`` or the current directory).
A plug-in is a subclass of :class:`Policy`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from importlib.metadata import EntryPoint, entry_points
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


ENTRY_POINT_GROUP = "dlsched.policies"


def installed_policies() -> dict[str, EntryPoint]:
    """Plug-ins declared by installed packages, by name (a built-in name cannot be taken)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in POLICIES}


def policy_descriptions() -> dict[str, str]:
    """Every policy by name, built-in and installed plug-ins, and what it does."""
    out = {name: cls.description for name, cls in POLICIES.items()}
    for name, entry in installed_policies().items():
        try:
            what = find_policy(name).description or "(no description)"
        except SpecError as e:
            what = f"(cannot be used: {e.reason})"
        dist = entry.dist.name if entry.dist else "?"
        out[name] = f"{what} [plug-in {entry.value} from {dist}]"
    return out


def find_policy(name: str) -> type[Policy]:
    """The policy class a name stands for; a :class:`SpecError` naming it if there is none."""
    if name in POLICIES:
        return POLICIES[name]
    if ":" in name:
        return _policy_class(name, _import(name))
    installed = installed_policies()
    if name in installed:
        try:
            loaded = installed[name].load()
        except Exception as e:  # a plug-in's own import error, whatever it is
            raise SpecError(
                "policy", f"plug-in '{name}' ({installed[name].value}) cannot be loaded: {_say(e)}"
            ) from e
        return _policy_class(name, loaded)
    raise SpecError(
        "policy",
        f"unknown policy '{name}': choose from {', '.join([*POLICIES, *installed])}, "
        "or give a plug-in as package.module:ClassName",
    )


def takes_parameter(name: str, param: str) -> bool:
    """Whether policy ``name``'s constructor takes ``param`` (or any keyword)."""
    signature = inspect.signature(find_policy(name).__init__).parameters
    return param in signature or any(p.kind is p.VAR_KEYWORD for p in signature.values())


def make_policy(name: str, **params: Any) -> Policy:
    cls = find_policy(name)
    signature = inspect.signature(cls.__init__).parameters
    accepted = set(signature) - {"self"}
    if not any(p.kind is p.VAR_KEYWORD for p in signature.values()):
        unknown = sorted(set(params) - accepted)
        if unknown:
            raise SpecError(
                "param",
                f"policy '{name}' has no parameter '{unknown[0]}' "
                f"(it takes {', '.join(sorted(accepted)) or 'none'})",
            )
    try:
        policy = cls(**params)
    except SpecError:
        raise
    except Exception as e:
        if cls not in POLICIES.values():  # a plug-in's constructor: say whose
            raise SpecError("policy", f"plug-in '{name}' failed to start: {_say(e)}") from e
        if not isinstance(e, (ValueError, TypeError, OverflowError)):
            raise  # a built-in's own fault, not its parameters'
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())  # its check, or an int()
        raise SpecError("param", f"policy '{name}' refused {given}: {e}") from None
    if not policy.name:
        policy.name = name  # errors and reports name it as it was given
    return policy


def _import(ref: str) -> object:
    module_name, _, attribute = ref.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # a module beside you, as uvicorn finds an app
    try:
        target: object = importlib.import_module(module_name)
    except Exception as e:  # not found, or the plug-in module's own error
        raise SpecError("policy", f"cannot import '{module_name}' for '{ref}': {_say(e)}") from e
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise SpecError("policy", f"'{module_name}' has no '{attribute}' (from '{ref}')")
        target = getattr(target, part)
    return target


def _policy_class(name: str, obj: object) -> type[Policy]:
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise SpecError(
            "policy",
            f"'{name}' is not a policy: expected a subclass of dlsched.policies.base.Policy, "
            f"got {obj!r:.80}",
        )
    return obj


def _say(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"
