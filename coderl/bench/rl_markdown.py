"""How ``coderl bench rl``'s results read in BENCHMARKS.md: the seeds' held-out table (with the
trained-task check and the control's reproducibility) and the temperature sweep's own section."""

from __future__ import annotations

from typing import Any


def section_name(r: dict[str, Any]) -> str:
    """The BENCHMARKS.md section a result goes to: the temperature sweep's is its own, so that writing
    one never replaces the seeds' held-out figures (it once did)."""
    return "rl-temperature" if "sweep" in r else "rl"


def to_markdown(r: dict[str, Any]) -> str:
    if "sweep" in r:
        return _sweep_markdown(r)
    m = r["machine"]

    def cells(values: list[float]) -> str:
        return ", ".join(f"{v:.3f}" for v in values)

    minutes = r["warm_start_minutes"]
    made = f"`coderl sft`, {minutes:.0f} min when made" if minutes is not None else f"given: `{r['warm_start']}`"
    controlled = r.get("control_seeds", r["seeds"] if r.get("control", True) else [])
    against = "against a control whose RL learning rate is 0" if controlled else "with no control runs"
    if controlled and controlled != r["seeds"]:
        against += f" (on seed{'s' if len(controlled) > 1 else ''} {', '.join(map(str, controlled))})"
    where = "dev split (train.dev_size)" if r.get("validated_on") == "dev" else "held-out validation"
    gpu = f", {m['cuda']}" if m.get("cuda") else ""

    lines = [
        "## RL's own share (`coderl bench rl`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores{gpu}, torch {m['torch']}. One warm start "
        f"({made}), then the RL phase of `coderl train`'s "
        f"configuration from it ({r['steps']} steps of {r['samples_per_step']} samples on `{r['tasks']}`) over seeds "
        f"{r['seeds']}, {against}. About {r['minutes_per_run']:.0f} min (wall "
        f"clock) per run. Groups that could teach (rewards differ): {r['teaching_group_share']:.0%} of all, mean over steps.",
        "",
        f"| {where} | run | after warm start (per seed) | after RL (per seed) | rise | 95% interval (paired bootstrap over tasks) |",
        "|---|---|---|---|---|---|",
    ]

    def rows(label: str, f: dict[str, Any], infix: str = "", value: str = "pass_at_1", rise: str = "rise") -> list[str]:
        out = []
        for kind, key in (("RL", "rl"), ("control (lr 0)", "control")):
            if f"{key}_{infix}{rise}" not in f:
                continue
            starts = f[f"warm_{infix}{value}"] if key == "rl" else f.get(f"control_{infix}start_{value}", f[f"warm_{infix}{value}"])
            ends = f[f"{key}_{infix}{value}" if key == "rl" else f"control_{infix}end_{value}"]
            lo, hi = f[f"{key}_{infix}{rise}_ci95"]
            out.append(
                f"| {label} | {kind} | {cells(starts)} | {cells(ends)} | **{f[f'{key}_{infix}{rise}']:+.3f}** | [{lo:+.3f}, {hi:+.3f}] |"
            )
        return out

    for infix, label in (("", "greedy"), ("sampled_", "at the rollout temperature")):
        if f"warm_{infix}pass_at_1" in r:
            lines += rows(f"{label} ({r[f'{infix}held_out_tasks']} tasks)", r, infix)
    for infix, label in (("", "greedy"), ("sampled_", "at the rollout temperature")):
        if f"warm_{infix}change_f1" in r:
            tasks = r[f"{infix}change_f1_tasks"]
            lines += rows(f"{label}, change F1 against the gold patches ({tasks} tasks)", r, infix, "change_f1", "change_f1_rise")
    for also in r.get("also", []):
        lines += rows(f"greedy, `{also['source']}` ({also['tasks']} tasks)", also)
    if "trained_rise" in r:
        lo, hi = r["trained_rise_ci95"]
        lines += [
            "",
            f"The tasks each RL run trained on ({', '.join(map(str, r['trained_tasks']))} per seed), "
            f"{r['trained_samples_per_task']} samples each at T={r['trained_temperature']:g}, under the warm start "
            f"and under the run's final weights (an optimisation check, not held out): pass rate "
            f"{cells(r['trained_warm_pass_rate'])} -> {cells(r['trained_rl_pass_rate'])} per seed, "
            f"**{r['trained_rise']:+.3f}** [{lo:+.3f}, {hi:+.3f}] (bootstrap over seed-task pairs).",
        ]
        if r.get("untrained_edge_tasks") and sum(r["untrained_edge_tasks"]):
            (elo, ehi), (olo, ohi) = r["trained_edge_rise_ci95"], r["untrained_edge_rise_ci95"]
            lines[-1] += (
                f" On the tasks the warm start solved at least once, the same final weights: "
                f"**{r['trained_edge_rise']:+.3f}** [{elo:+.3f}, {ehi:+.3f}] on those a run trained on "
                f"({r['trained_edge_pairs']} seed-task pairs) against **{r['untrained_edge_rise']:+.3f}** "
                f"[{olo:+.3f}, {ohi:+.3f}] on those only other seeds trained on "
                f"({', '.join(map(str, r['untrained_edge_tasks']))} per seed)."
            )
    same = [x for x in r.get("control_same_trajectories", []) if x[1]]
    if same:
        lines += ["", _reproducibility_sentence(same)]
    target = "Target: `rl_rise` >= +0.10 with its interval above 0"
    lines += ["", target + (", the control's holding 0." if controlled else " (no control run here).")]
    return "\n".join(lines)


def _reproducibility_sentence(same: list[list[int]]) -> str:
    """What the control's greedy validations at both ends say of the engine's reproducibility."""
    counts = ", ".join(f"{a} of {n}" for a, n in same)
    if all(a == n for a, n in same):
        return (
            f"In the control (weights unchanged) {counts} greedy held-out trajectories came out token for token "
            "the same at both ends: here greedy validation reproduced exactly, so the control's figure is the "
            "same policy's and the RL run's change is the RL phase's (or its seed's)."
        )
    return (
        "Greedy validation is not bit-for-bit reproducible: in the control (weights unchanged) "
        f"{counts} held-out trajectories came out token for token the same at both ends; the rest parted "
        "mid-reply (the engine's bfloat16 sums differ with what else shares its step, and a near-tie can go "
        "the other way), so a run's greedy figure moves by a task or so on its own."
    )


def _sweep_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    return "\n".join(
        [
            "## The RL phase's rollout temperature (`coderl bench rl --temperatures`)",
            "",
            f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores. The warm start's policy, training tasks "
            f"of `{r['tasks']}` (never held-out ones), {r['group_size']} samples each, per temperature:",
            "",
            "| temperature | tasks | pass rate | tasks ever solved | groups that can teach |",
            "|---|---|---|---|---|",
            *[
                f"| {x['temperature']:g} | {x['tasks']} | {x['pass_rate']:.3f} | {x['tasks_ever_solved']} | "
                f"**{x['teaching_group_share']:.3f}** |"
                for x in r["sweep"]
            ],
            "",
            f"Chosen (most groups that can teach): **T = {r['chosen_temperature']:g}**.",
        ]
    )
