"""SWE-bench-style evaluation report: resolved ids, pass@1 with a 95% interval and the unbiased
pass@k, per tier."""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb, sqrt
from typing import Any

Z95 = 1.959964
"""The standard normal quantile of a two-sided 95% interval."""


def wilson_interval(p_hat: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p_hat`` observed on ``n`` units (Wilson 1927).

    Unlike the normal approximation it stays inside [0, 1] and does not collapse to a point at 0 or 1:
    0 of 8 gives [0, 0.32], not [0, 0]. For pass@1 the units are the tasks (the samples of one task are
    not independent of each other), and ``p_hat`` the mean of the per-task pass rates.
    """
    if n <= 0:
        return 0.0, 1.0
    denom = 1 + z * z / n
    centre = (p_hat + z * z / (2 * n)) / denom
    half = z * sqrt(p_hat * (1 - p_hat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator of pass@k from n samples with c correct (Chen et al., 2021):
    1 - C(n - c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def build_report(rows: list[dict[str, Any]], tiers: dict[str, str], ks: list[int]) -> dict[str, Any]:
    """``rows``: one per trajectory with task_id, reward, exit_status and ``resolved``."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        by_task[row["task_id"]].append(bool(row.get("resolved")))
    n_min = min((len(v) for v in by_task.values()), default=0)
    resolved_ids = sorted(t for t, v in by_task.items() if any(v))

    def mean_pass(task_ids: list[str], k: int) -> float:
        vals = [pass_at_k(len(by_task[t]), sum(by_task[t]), k) for t in task_ids]
        return sum(vals) / len(vals) if vals else 0.0

    ids = sorted(by_task)
    by_tier: dict[str, dict[str, Any]] = {}
    for tier in sorted({tiers.get(t, "") for t in ids}):
        members = [t for t in ids if tiers.get(t, "") == tier]
        by_tier[tier or "untiered"] = {
            "total": len(members),
            "resolved": sum(1 for t in members if any(by_task[t])),
            "pass@1": mean_pass(members, 1),
        }
    pass1 = mean_pass(ids, 1)
    return {
        "total_instances": len(ids),
        "samples_per_instance": n_min,
        "resolved_instances": len(resolved_ids),
        "resolved_ids": resolved_ids,
        "unresolved_ids": sorted(set(ids) - set(resolved_ids)),
        "pass@1": pass1,
        "pass@1_ci95": list(wilson_interval(pass1, len(ids))),
        "pass@k": {str(k): mean_pass(ids, k) for k in ks if k <= n_min},
        "by_tier": by_tier,
        "exit_statuses": dict(Counter(row.get("exit_status", "") for row in rows)),
        "mean_reward": sum(float(r.get("reward", 0.0)) for r in rows) / len(rows) if rows else 0.0,
    }
