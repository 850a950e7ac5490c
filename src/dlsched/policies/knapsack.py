"""The multiple-choice knapsack Aryl solves to hand spare GPUs to elastic jobs (PAPERS.md s. 3).

Each group (an elastic job) offers options (extra GPUs, value), of which at most one is taken;
the taken weights must fit the capacity (spare GPUs) and their summed value (JCT reduction) is
maximized. Solved exactly by dynamic programming over the capacity: O(options x capacity), in
plain Python. A simulation then imports no numpy, and at its sizes numpy's calls cost more than
the work (full Philly under aryl: 4,308 solves, 9.6 s with numpy, 1.0 s without); one pass over
thousands of jobs and GPUs (``benchmarks/knapsack.py``) takes 44-68 ms against numpy's 7-14 ms,
still far below a scheduling interval.

When every group's options are 1, 2, .., K extra GPUs with positive, non-increasing marginal
values (diminishing returns, the usual shape of a speedup curve), taking the largest marginals
overall is also exact and much cheaper; :func:`solve` checks that and otherwise runs the
dynamic program. ``benchmarks/knapsack.py`` measures both, and HiGHS on the same instances.
"""

from __future__ import annotations

Option = tuple[int, float]  # (weight >= 1, value)


def solve(groups: list[list[Option]], capacity: int) -> list[int]:
    """The index of the option taken in each group, -1 for none; an optimum."""
    if capacity <= 0 or not groups:
        return [-1] * len(groups)
    marginals = _concave_marginals(groups)
    if marginals is not None:
        return _largest_marginals(groups, marginals, capacity)
    return solve_dp(groups, capacity)


def solve_dp(groups: list[list[Option]], capacity: int) -> list[int]:
    """The exact dynamic program (any weights and values)."""
    cap = int(capacity)
    dp = [0.0] * (cap + 1)  # dp[c]: best value with total weight <= c
    picks = []
    for options in groups:
        best = dp[:]
        pick = [-1] * (cap + 1)
        for index, (weight, value) in enumerate(options):
            if weight > cap or value <= 0:
                continue
            for c in range(weight, cap + 1):
                candidate = dp[c - weight] + value
                if candidate > best[c]:
                    best[c], pick[c] = candidate, index
        dp = best
        picks.append(pick)
    chosen = [-1] * len(groups)
    c = cap
    for g in range(len(groups) - 1, -1, -1):
        index = picks[g][c]
        if index >= 0:
            chosen[g] = index
            c -= groups[g][index][0]
    return chosen


def total_value(groups: list[list[Option]], chosen: list[int]) -> float:
    return sum(groups[g][i][1] for g, i in enumerate(chosen) if i >= 0)


def _concave_marginals(groups: list[list[Option]]) -> list[list[float]] | None:
    """Per group the marginal values of options 1..K, when every group is concave; else None."""
    out = []
    for options in groups:
        previous, marginal = 0.0, []  # type: float, list[float]
        for k, (weight, value) in enumerate(options, start=1):
            gain = value - previous
            if weight != k or gain <= 0 or (marginal and gain > marginal[-1]):
                return None
            marginal.append(gain)
            previous = value
        out.append(marginal)
    return out


def _largest_marginals(
    groups: list[list[Option]], marginals: list[list[float]], capacity: int
) -> list[int]:
    ranked = sorted((-m, g, k) for g, ms in enumerate(marginals) for k, m in enumerate(ms))
    taken = [0] * len(groups)
    for _, g, _ in ranked[:capacity]:
        taken[g] += 1  # within a group marginals are non-increasing: a prefix is taken
    return [t - 1 for t in taken]
