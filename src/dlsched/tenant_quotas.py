"""Tenants' quotas, in the vocabulary operators know from Kueue's ClusterQueue.

Per tenant: a nominal quota of GPUs (``nominal``), how much more it may borrow from its cohort's
unused quota (``borrowing_limit``; None: no limit but the cohort's), how much of its nominal
quota its cohort may borrow (``lending_limit``; None: all of it; the rest is kept for the
tenant alone), its ``cohort`` (None: it neither lends nor borrows) and a fair-share
``weight``. A priority class is a job's (its spec's ``priority``: a higher class may take the
places of its tenant's lower ones), not a tenant's. A tenant the configuration does not name
gets ``default``. The semantics followed are Kueue's
(nominalQuota, borrowingLimit, lendingLimit, cohort, preemption with ``reclaimWithinCohort:
Any`` and ``withinClusterQueue: LowerPriority``), of a cohort without quotas of its own.

A YAML file::

    tenants:
      vision: {nominal: 64, borrowing_limit: 32, cohort: lab, weight: 2}
      speech: {nominal: 32, lending_limit: 16, cohort: lab}
    default: {nominal: 0, cohort: lab}

or built in: ``equal`` (the training GPUs split equally between the trace's tenants, one cohort,
no borrowing limit) and ``philly-vc`` (Philly's virtual clusters with their node counts from
Helios' artifact, scaled to the cluster's training GPUs by largest remainder; VCs the file does
not list get 0 and may only borrow).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

from .cluster import MAX_GPUS
from .errors import SpecError
from .yamlfile import read_yaml

# Chosen bound: a fair-share weight is relative (a million to one is past any lab's)
MAX_WEIGHT = 1e6


@dataclass(slots=True, frozen=True)
class TenantQuota:
    nominal: int = 0
    borrowing_limit: int | None = None  # None: only the cohort's unused quota bounds it
    cohort: str | None = None
    weight: float = 1.0
    lending_limit: int | None = None  # None: its cohort may borrow all of its unused quota
    # the part of its nominal quota only the tenant may use (Kueue's guaranteed quota: what its
    # lending limit keeps back; 0 without one or without a cohort). Stored, not a property:
    # the quota stage read it 4.4 million times in a replay of Philly (tiresias, philly-vc).
    kept: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kept = 0
        if self.lending_limit is not None and self.cohort is not None:
            kept = self.nominal - self.lending_limit
        object.__setattr__(self, "kept", kept)  # (frozen)

    def cohort_use(self, used: int) -> int:
        """What of ``used`` GPUs counts against its cohort: the use beyond the part it keeps."""
        return used - self.kept if used > self.kept else 0

    @property
    def limit(self) -> float:
        """The most the tenant may ever hold."""
        if self.cohort is None:
            return self.nominal
        return math.inf if self.borrowing_limit is None else self.nominal + self.borrowing_limit


@dataclass(slots=True)
class TenantConfig:
    tenants: dict[str, TenantQuota] = field(default_factory=dict)
    default: TenantQuota = field(default_factory=TenantQuota)
    source: str = ""

    def quota(self, tenant: str) -> TenantQuota:
        return self.tenants.get(tenant, self.default)

    def as_dict(self) -> dict:
        """The configuration as a quotas file holds it (:func:`load_tenants` reads it back)."""

        def entry(q: TenantQuota) -> dict:
            values = ((f.name, getattr(q, f.name)) for f in fields(q) if f.init)
            return {k: v for k, v in values if v is not None}

        return {
            "tenants": {t: entry(q) for t, q in self.tenants.items()},
            "default": entry(self.default),
        }

    def without_borrowing(self) -> TenantConfig:
        """Hard quotas (as Philly ran): nobody lends or borrows."""
        return TenantConfig(
            {t: replace(q, cohort=None, lending_limit=None) for t, q in self.tenants.items()},
            replace(self.default, cohort=None, lending_limit=None),
            f"{self.source}, hard",
        )


_FIELDS = {"nominal", "borrowing_limit", "lending_limit", "cohort", "weight", "priority"}


def quota_from(data: object, where: str) -> TenantQuota:
    """A tenant's quota from a mapping (a file's entry, an API body); SpecError names the field."""
    if not isinstance(data, dict):
        raise SpecError(where, f"must be a mapping of {', '.join(sorted(_FIELDS))}")
    unknown = set(data) - _FIELDS
    if unknown:
        raise SpecError(
            f"{where}.{min(unknown, key=str)}",
            f"unknown field (known: {', '.join(sorted(_FIELDS))})",
        )
    nominal, limit = data.get("nominal", 0), data.get("borrowing_limit")
    lending = data.get("lending_limit")
    for name, v in (("nominal", nominal), ("borrowing_limit", limit), ("lending_limit", lending)):
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_GPUS
        ):
            raise SpecError(f"{where}.{name}", f"must be an integer in 0..{MAX_GPUS:,}, got {v!r}")
    weight = data.get("weight", 1.0)
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or not 0 < weight <= MAX_WEIGHT
    ):
        raise SpecError(
            f"{where}.weight", f"must be a number in (0, {MAX_WEIGHT:g}], got {weight!r}"
        )
    priority = data.get("priority", 0)
    if isinstance(priority, bool) or priority != 0:  # (0: what files and exports once held)
        raise SpecError(
            f"{where}.priority",
            f"a tenant has no priority class, a job has (its spec's priority), got {priority!r}",
        )
    cohort = data.get("cohort")
    if cohort is not None and (not isinstance(cohort, str) or not cohort):
        raise SpecError(f"{where}.cohort", f"must be a non-empty string, got {cohort!r}")
    if lending is not None and cohort is None:  # (as Kueue's validation refuses it)
        raise SpecError(f"{where}.lending_limit", "lends to a cohort: give the tenant one")
    if lending is not None and lending > nominal:
        raise SpecError(
            f"{where}.lending_limit",
            f"at most the nominal quota ({nominal}): a tenant lends only its own, got {lending}",
        )
    return TenantQuota(nominal, limit, cohort, float(weight), lending)


def load_tenants(source: str, tenants: list[str], training_gpus: int) -> TenantConfig:
    """A configuration by name (``equal``, ``philly-vc``) or from a YAML file; ``tenants`` are
    the trace's, ``training_gpus`` the cluster's."""
    if source == "equal":
        return equal_shares(tenants, training_gpus)
    if source == "philly-vc":
        return philly_vc(training_gpus)
    path = Path(source)
    if not path.is_file():
        raise SpecError("quotas", f"'{source}' is neither equal, philly-vc nor a file")
    data = read_yaml(path, "quotas")
    if not isinstance(data, dict) or not isinstance(data.get("tenants", {}), dict):
        raise SpecError("quotas", f"{source} must hold a mapping with a 'tenants' mapping")
    unknown = set(data) - {"tenants", "default"}
    if unknown:
        raise SpecError(f"quotas.{min(unknown, key=str)}", "unknown key (known: tenants, default)")
    config = TenantConfig(
        {str(t): quota_from(q, f"tenants.{t}") for t, q in data.get("tenants", {}).items()},
        quota_from(data.get("default", {}), "default"),
        path.name,
    )
    return config


def equal_shares(tenants: list[str], training_gpus: int, cohort: str = "all") -> TenantConfig:
    """The documented default: the GPUs split as evenly as whole GPUs allow, one cohort."""
    names = sorted(set(tenants))
    shares = _largest_remainder([1.0] * len(names), training_gpus)
    return TenantConfig(
        {t: TenantQuota(s, None, cohort) for t, s in zip(names, shares)},
        TenantQuota(0, None, cohort),
        "equal",
    )


def philly_vc(training_gpus: int, cohort: str = "philly") -> TenantConfig:
    text = resources.files("dlsched").joinpath("data/traces/philly/philly_vc_nodes.csv").read_text()
    rows = [(r["vc"], int(r["node num"])) for r in csv.DictReader(io.StringIO(text))]
    shares = _largest_remainder([float(n) for _, n in rows], training_gpus)
    return TenantConfig(
        {vc: TenantQuota(s, None, cohort) for (vc, _), s in zip(rows, shares)},
        TenantQuota(0, None, cohort),
        "philly-vc",
    )


def _largest_remainder(weights: list[float], total: int) -> list[int]:
    if not weights:
        return []
    exact = [w * total / sum(weights) for w in weights]
    out = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: (out[i] - exact[i], i))[: total - sum(out)]:
        out[i] += 1
    return out
