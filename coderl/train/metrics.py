"""What a training step reports: its stage times, the rollout statistics of its row in
``metrics.jsonl``, the console line, and the run's summary at the end (the report's header)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from coderl.memory import PhasePeaks
from coderl.rollout.runner import RolloutResult
from coderl.threads import release_free_memory
from coderl.train.validation import also_prefixes, set_name


class StageTimer:
    """Wall-clock seconds per named stage of one step (a stage entered twice adds up)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0

    def row(self) -> dict[str, Any]:
        """``stage_s`` (seconds per stage) and ``step_s`` (since the timer started)."""
        return {"stage_s": dict(self.seconds), "step_s": time.perf_counter() - self.started}


def rollout_metrics(step: int, results: list[RolloutResult]) -> dict[str, Any]:
    """The rollout half of a step's row: rewards, pass rate, lengths, turns, errors, timings."""
    trajs = [r.trajectory for r in results]
    n = max(len(trajs), 1)
    model_tokens = [sum(t.response_mask) for t in trajs]
    return {
        "step": step,
        "samples": len(trajs),
        "reward_mean": sum(t.reward for t in trajs) / n,
        "pass_rate": sum(r.resolved for r in results) / n,
        "tasks_resolved": len({r.trajectory.task_id for r in results if r.resolved}),
        "task_ids": sorted({t.task_id for t in trajs}),  # the run's summary counts the distinct ones
        "response_len_mean": sum(model_tokens) / n,
        "response_len_max": max(model_tokens, default=0),
        "context_len_max": max((len(t.prompt_ids) + len(t.response_ids) for t in trajs), default=0),
        "turns_mean": sum(t.num_turns for t in trajs) / n,
        "format_errors_mean": sum(t.metrics.get("format_errors", 0.0) for t in trajs) / n,
        "errors": sum(1 for t in trajs if t.exit_status == "error"),
        "exit_statuses": dict(Counter(t.exit_status for t in trajs)),
        "engine_s_total": sum(t.metrics.get("engine_s", 0.0) for t in trajs),
        "grade_s_total": sum(t.metrics.get("grade_s", 0.0) for t in trajs),
    }


def summary_line(row: dict[str, Any]) -> str:
    """One console line per step: the signal first (groups that can teach, solved share, truncation,
    parse failures, tool calls, |advantage|, tokens trained and samples algo.mask_exits left out), then the
    update's health."""
    groups = row.get("groups", 0)
    teaching = round(row.get("teaching_groups", 0.0) * groups)
    return (
        f"teaching groups {teaching}/{groups} solved {row['pass_rate']:.0%} "
        f"reward {row['reward_mean']:.2f} (shaped {row.get('shaped_reward_mean', row['reward_mean']):.2f}) "
        f"truncated {row.get('truncated_share', 0.0):.0%} parse-fail {row.get('parse_failure_rate', 0.0):.0%} "
        + (
            f"credit {row['patch_credit_mean']:.2f} (groups by credit {row.get('credit_groups', 0.0):.0%}) "
            if "patch_credit_mean" in row
            else ""
        )
        + f"calls {row.get('tool_calls_mean', 0.0):.1f} no-change {row.get('no_change_share', 0.0):.0%} fix+edits {row.get('fix_plus_edits_share', 0.0):.0%} |adv| {row.get('advantage_abs_mean', 0.0):.2f} (unsolved groups {row.get('advantage_from_unsolved', 0.0):.0%}) "
        f"trained {row.get('trained_tokens', 0)} tok "
        + (f"(left out {row['left_out_samples']}) " if row.get("left_out_samples") else "")
        + f"len {row['response_len_mean']:.0f} "
        f"kl {row.get('kl', 0.0):.4f} ent {row.get('entropy', 0.0):.2f} mismatch {row.get('logprob_mismatch', 0.0):.1e} "
        f"{row.get('step_s', 0.0):.0f}s"
    )


def heldout(row: dict[str, Any], prefix: str = "val") -> str:
    """A validation row's held-out pass@1 with its interval, e.g. ``0.125 [0.034, 0.360]``."""
    lo, hi = row[f"{prefix}_pass_at_1_ci95"]
    return f"{row[f'{prefix}_pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]"


def run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run at a glance: held-out pass@1 from start to end (the headline), then the first and last
    steps' training pass rate and reward, the worst mismatch."""
    summary: dict[str, Any] = {}
    vals = [r for r in rows if "val_pass_at_1" in r]
    if vals:
        first, last = vals[0], vals[-1]
        rise = last["val_pass_at_1"] - first["val_pass_at_1"]
        dev = last.get("val_split") == "dev"
        summary["held-out pass@1"] = (  # the key stays: a dev split's figures are labelled in the text
            f"{heldout(first)} at step {first['step']} -> {heldout(last)} at step {last['step']} ({rise:+.3f}; "
            f"{last['val_tasks']} {'dev' if dev else 'held-out'} tasks x {last['val_samples']} samples, 95% intervals)"
        )
        if dev:
            summary["validated on"] = "a dev split of training tasks (train.dev_size); the held-out tasks set aside"
    for prefix in also_prefixes(rows):
        also = [r for r in rows if f"{prefix}_pass_at_1" in r]
        rise = also[-1][f"{prefix}_pass_at_1"] - also[0][f"{prefix}_pass_at_1"]
        source = also[-1].get(f"{prefix}_source", "train.val_also")
        summary[f"held-out pass@1, {set_name(prefix)} ({source})"] = (
            f"{heldout(also[0], prefix)} -> {heldout(also[-1], prefix)} ({rise:+.3f}; "
            f"{also[-1][f'{prefix}_tasks']} tasks)"
        )
    warm = [r for r in vals if r.get("phase") == "sft"]
    if warm:
        summary["held-out pass@1 after the warm start"] = heldout(warm[-1])
    train = [r for r in rows if "pass_rate" in r]
    summary["steps"] = len(train)
    if not train:
        return summary
    head, tail = train[: min(5, len(train))], train[-min(5, len(train)) :]
    summary["pass_rate (first steps)"] = sum(r["pass_rate"] for r in head) / len(head)
    summary["pass_rate (last steps)"] = sum(r["pass_rate"] for r in tail) / len(tail)
    summary["reward_mean (last)"] = train[-1]["reward_mean"]
    if any("shaped_reward_mean" in r for r in train):
        shaped = [r.get("shaped_reward_mean", 0.0) for r in train]
        summary["shaped reward (first steps)"] = sum(shaped[: len(head)]) / len(head)
        summary["shaped reward (last steps)"] = sum(shaped[-len(tail) :]) / len(tail)
    distinct = {task for r in train for task in r.get("task_ids", [])}
    if distinct:  # a few tasks drawn again and again teach those tasks, not the skill
        summary["distinct tasks rolled out in RL (all steps)"] = len(distinct)
    summary["teaching groups (mean share over steps)"] = sum(r.get("teaching_groups", 0.0) for r in train) / len(train)
    warnings = [f"step {r['step']}: {r['signal_warning']}" for r in train if r.get("signal_warning")]
    if warnings:
        summary["signal warnings"] = " | ".join(warnings)
    summary["logprob_mismatch (max over steps)"] = max(r.get("logprob_mismatch", 0.0) for r in train)
    summary["token_mismatch (total)"] = sum(r.get("token_mismatch", 0) for r in train)
    return summary


VALIDATION_SECONDS = ("val_s", "val_sampled_s", "val_also_s")


def mark_peak(row: dict[str, Any], peaks: PhasePeaks) -> None:
    """Record in ``row`` (``rss_peak_mb``) this process's peak resident set since the last mark, and
    start the next phase's. Only this process: a Ray actor's or an engine server's memory is their own."""
    row["rss_peak_mb"] = round(peaks.mark())
    release_free_memory()  # the phase's freed memory, before the next phase runs


def phase_memory(rows: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Peak resident MB of each phase of a run that recorded them (:func:`mark_peak`): the start
    validation (with the set-up before it), the supervised warm start's steps, the validation after it,
    the calibration pass and the RL steps (their largest)."""
    peaks: list[tuple[str, float]] = []
    for row in rows:
        if "rss_peak_mb" not in row or "pass_rate" in row:
            continue
        if row.get("phase") == "start":
            peaks.append(("set-up and start validation", float(row["rss_peak_mb"])))
        elif row.get("phase") == "sft":
            if "sft_rss_peak_mb" in row:
                peaks.append(("warm start", float(row["sft_rss_peak_mb"])))
            peaks.append(("validation after it", float(row["rss_peak_mb"])))
        elif row.get("phase") == "calibrate":
            peaks.append(("calibration", float(row["rss_peak_mb"])))
    steps = [float(r["rss_peak_mb"]) for r in rows if "pass_rate" in r and "rss_peak_mb" in r]
    if steps:
        peaks.append(("RL steps", max(steps)))
    return peaks


def phase_minutes(rows: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Wall-clock minutes of each phase of a run, in order: the set-up (the process's start to the
    start validation), the start validation, the warm start, the validation after it, the calibration
    pass, the RL steps (validations inside them apart) and the validations during and after RL."""

    def validation(row: dict[str, Any]) -> float:
        if "validation_s" in row:  # the sets of one point roll out at once: its wall clock
            return float(row["validation_s"])
        return sum(float(row.get(k, 0.0)) for k in VALIDATION_SECONDS)  # a run from before: one after another

    phases: list[tuple[str, float]] = []
    steps = [r for r in rows if "pass_rate" in r]
    for row in rows:
        if row.get("phase") == "start":
            if "setup_s" in row:
                phases.append(("set-up", float(row["setup_s"]) / 60))
            phases.append(("start validation", validation(row) / 60))
        elif row.get("phase") == "sft":
            phases.append(("warm start", (float(row.get("sft_s", 0.0)) - validation(row)) / 60))
            phases.append(("validation after it", validation(row) / 60))
        elif row.get("phase") == "calibrate":
            phases.append(("calibration", float(row.get("calibrate_s", 0.0)) / 60))
    if steps:
        validate = sum(float(r.get("stage_s", {}).get("validate", 0.0)) for r in steps)
        rl = sum(float(r.get("step_s", 0.0)) for r in steps) - validate
        samples = sum(int(r.get("samples", 0)) for r in steps)
        phases.append((f"RL ({len(steps)} steps, {samples} samples)", rl / 60))
        if validate:
            phases.append(("validation during and after RL", validate / 60))
    return phases
