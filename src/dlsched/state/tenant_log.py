"""Every change of the GPUs a tenant's running jobs hold, as the simulator records it for the
per-tenant time series (tenants_timeseries.csv)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator


class TenantLog:
    """(time, tenant, GPUs its jobs hold) at each change, kept as three columns (a tuple per
    change took 70 bytes; a replay of Philly makes 164,000 of them)."""

    def __init__(self) -> None:
        self.times = array("d")
        # C ints (32 bits) hold any count of tenants or GPUs, in half the memory of longs
        self.tenants = array("i")  # index into ``names``
        self.held = array("i")
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def append(self, time: float, tenant: str, held: int) -> None:
        index = self._index.get(tenant)
        if index is None:
            index = self._index[tenant] = len(self.names)
            self.names.append(tenant)
        self.times.append(time)
        self.tenants.append(index)
        self.held.append(held)

    def __len__(self) -> int:
        return len(self.times)

    def __iter__(self) -> Iterator[tuple[float, str, int]]:
        names = self.names
        for time, index, held in zip(self.times, self.tenants, self.held, strict=True):
            yield time, names[index], held
