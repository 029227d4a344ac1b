"""Whether a training step's rollouts can teach the policy anything, and one loud warning when, for
several steps in a row, none could.

A group-relative estimator (GRPO, RLOO, Dr.GRPO) learns only from a group whose samples got different
rewards: a group that all failed, or all passed, has every advantage 0, and a step made only of such
groups changes nothing however long it runs. That failure is silent — the loss is 0, the gradient is
0, the run looks healthy — and its usual causes are mundane: every sample hits a length limit (its
reward is 0 before the model did anything), the tool-call parser never matches what the model writes,
the group holds one sample, or the tasks are all too hard (or all too easy) for the policy.

Owns: the per-step signal figures of a step's rollouts (:func:`signal_metrics`), how each sample ended
(:func:`outcomes`, also for validation), how close the patches came to the gold ones (:func:`change_f1`)
and the diagnosis of a starved run (:class:`SignalWatch`). Must not: choose what is trained on (DAPO dynamic sampling does,
in the loop) or touch rewards; every figure is read off the rollouts as graded.

Figures, per step (all samples rolled out in the step, refills included):

- ``teaching_groups``: share of groups whose task rewards differ (the groups that can teach);
- ``pass_rate`` (the solved share) and ``reward_mean`` are :func:`coderl.train.metrics.rollout_metrics`';
- ``truncated_share``: share of samples a limit ended (``token_limit``, ``step_limit``,
  ``context_limit``), and ``turn_truncated_share``: share of model turns cut at ``rollout.max_tokens``;
- ``parse_failure_rate``: format errors per model turn (a malformed call, a turn with no call, an
  unknown tool);
- ``tool_calls_mean``: parsed tool calls per sample;
- ``no_change_share``: share of samples the agent ended (no limit, no error) with the repository as
  it was given (an empty patch): a policy that submits without finding what to change;
- ``fix_plus_edits_share``: share of samples that hold every change of the task's gold patch and
  still fail: other edits broke what the fix mended (a policy that rewrites a function and does not
  copy the rest of it faithfully);
- with partial credit (``train.patch_credit``): ``patch_credit_mean`` (per unsolved sample) and
  ``credit_groups``, the share of groups that teach by the credit alone;
- and, from the update, ``advantage_abs_mean``, ``advantage_from_unsolved`` (the share of the |advantage|
  in groups with no solved sample: taught by the credit and the format bonus, not the hidden tests) and
  ``trained_tokens`` (model tokens in the loss).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coderl.rollout.runner import RolloutResult
from coderl.tasks.patching import change_overlap, holds_change
from coderl.train.credit import KEY, credit_of
from coderl.types import Task

LIMITS = ("token_limit", "step_limit", "context_limit")
"""Exit statuses of a rollout that a limit ended, not the agent."""


OUTCOMES = ("solved", "fix_plus_edits", "wrong_change", "no_change", "cut_off", "error")
"""How a sample ended (:func:`outcome`), in the order tables show them."""


def outcome(result: RolloutResult, gold: str = "") -> str:
    """``solved``; ``cut_off`` (a limit ended it); ``error``; else the agent ended it unsolved: with
    the repository as given (``no_change``), or with a change — ``fix_plus_edits`` when it holds every
    change of the task's gold patch ``gold`` (:func:`coderl.tasks.patching.holds_change`), so other
    edits broke what the fix mended, else ``wrong_change``."""
    t = result.trajectory
    if result.resolved:
        return "solved"
    if t.exit_status in LIMITS:
        return "cut_off"
    if t.exit_status == "error":
        return "error"
    if not t.patch.strip():
        return "no_change"
    return "fix_plus_edits" if gold and holds_change(t.patch, gold) else "wrong_change"


def gold_patches(tasks: Iterable[Task]) -> dict[str, str]:
    """Each task's gold patch by id ("" where it has none): what :func:`outcomes` compares against."""
    return {t.id: t.gold_patch or "" for t in tasks}


def outcomes(results: list[RolloutResult], golds: Mapping[str, str] | None = None) -> dict[str, int]:
    """Samples per :data:`OUTCOMES` kind (every kind present, 0 where none); ``golds``: each task's
    gold patch by task id (without it, or for a task without one, no sample is ``fix_plus_edits``)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for r in results:
        counts[outcome(r, (golds or {}).get(r.trajectory.task_id, ""))] += 1
    return counts


def change_f1(results: list[RolloutResult], golds: Mapping[str, str]) -> float | None:
    """Mean over samples of how closely each patch makes its task's gold change
    (:func:`coderl.tasks.patching.change_overlap`: the F1 of the changed lines; 1 for the fix itself, about
    0.5 for its line changed another way, less for every line rewritten beside it, 0 for no change):
    a graded read of how near unsolved samples came, which does not reward rewriting more of the code.
    ``None`` when no sample's task has a gold patch. It reads outcomes only; nothing trains on it."""
    scores = [
        change_overlap(r.trajectory.patch, gold)
        for r in results
        if (gold := golds.get(r.trajectory.task_id, ""))
    ]
    return sum(scores) / len(scores) if scores else None


def _groups(results: list[RolloutResult]) -> dict[str, list[float]]:
    rewards: dict[str, list[float]] = defaultdict(list)
    for r in results:
        rewards[r.trajectory.group_id].append(r.trajectory.reward)
    return rewards


def signal_metrics(results: list[RolloutResult], golds: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The signal figures of one step's rollouts (module doc); ``golds`` as for :func:`outcomes`."""
    trajs = [r.trajectory for r in results]
    n = max(len(trajs), 1)
    groups = _groups(results)
    turns = sum(t.num_turns for t in trajs)
    ended = outcomes(results, golds)
    return {
        "groups": len(groups),
        "teaching_groups": sum(1 for g in groups.values() if max(g) > min(g)) / max(len(groups), 1),
        "truncated_share": sum(1 for t in trajs if t.exit_status in LIMITS) / n,
        "turn_truncated_share": sum(t.metrics.get("truncated_turns", 0.0) for t in trajs) / max(turns, 1),
        "parse_failure_rate": sum(t.metrics.get("format_errors", 0.0) for t in trajs) / max(turns, 1),
        "tool_calls_mean": sum(t.metrics.get("tool_calls", 0.0) for t in trajs) / n,
        **{f"{kind}_share": ended[kind] / n for kind in ("no_change", "fix_plus_edits")},
        **_credit_metrics(results, groups),
    }


def _credit_metrics(results: list[RolloutResult], groups: dict[str, list[float]]) -> dict[str, float]:
    """With partial credit (train.patch_credit): its mean per unsolved sample, and the share of groups
    that teach by the credit alone (their task rewards all equal, their credits not); none without."""
    if not any(KEY in r.trajectory.metrics for r in results):
        return {}
    unsolved = [credit_of(r.trajectory.metrics) for r in results if not r.resolved]
    return {
        "patch_credit_mean": sum(unsolved) / max(len(unsolved), 1),
        "credit_groups": _taught_by_credit(results, groups) / max(len(groups), 1),
    }


def _taught_by_credit(results: list[RolloutResult], groups: dict[str, list[float]]) -> int:
    """Groups (``groups``: task rewards by group, :func:`_groups`) whose task rewards are all equal and
    whose partial credits are not: they teach by the credit alone."""
    credits: dict[str, list[float]] = defaultdict(list)
    for r in results:
        credits[r.trajectory.group_id].append(credit_of(r.trajectory.metrics))
    return sum(1 for gid, g in groups.items() if max(g) == min(g) and max(credits[gid]) > min(credits[gid]))


@dataclass
class _Window:
    """What the steps of the current streak without a teaching group rolled out."""

    steps: list[int] = field(default_factory=list)
    samples: int = 0
    solved: int = 0
    truncated: int = 0
    limits: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    turns: int = 0
    truncated_turns: float = 0.0
    format_errors: float = 0.0
    tool_calls: float = 0.0
    no_change: int = 0
    largest_group: int = 0
    guided: int = 0  # samples started from a gold demonstration's prefix (train.guide_share)
    all_pass_groups: int = 0
    all_fail_groups: int = 0
    credit_groups: int = 0  # groups that taught by partial credit alone (train.patch_credit)


@dataclass
class InUse:
    """What the run already does among the remedies a starved streak's warning names: those are left
    out of its advice (a run that warm-started is not told to warm-start)."""

    warm_start: bool = False
    """The policy imitated demonstrations: this run's warm start, or model.path's (coderl-demos.json)."""
    edge: bool = False
    """train.curriculum=edge."""
    guided: bool = False
    """train.guide_share > 0 (whether the streak's samples were guided is read off them: guidance fades)."""
    dynamic_sampling: bool = False
    """algo.dynamic_sampling."""


class SignalWatch:
    """Counts steps in a row in which no group could teach and, when there are ``patience`` of them,
    says so once (per streak) with the likely cause and what to try (what ``in_use`` says the run already
    does is not suggested). ``patience`` 0: never warns."""

    def __init__(self, patience: int, group_size: int, in_use: InUse | None = None) -> None:
        self.patience = patience
        self.group_size = group_size
        self.in_use = in_use or InUse()
        self.window = _Window()

    @property
    def streak(self) -> int:
        """Steps in a row, up to the last one observed, in which no group could teach."""
        return len(self.window.steps)

    def observe(self, step: int, results: list[RolloutResult]) -> str | None:
        """Take one step's rollouts; the warning text when this step completes a starved streak of
        ``patience`` steps, else None."""
        groups = _groups(results)
        if any(max(g) > min(g) for g in groups.values()):
            self.window = _Window()
            return None
        w = self.window
        w.steps.append(step)
        for r in results:
            t = r.trajectory
            w.samples += 1
            w.solved += int(r.resolved)
            if t.exit_status in LIMITS:
                w.truncated += 1
                w.limits[t.exit_status] += 1
            w.turns += t.num_turns
            w.truncated_turns += t.metrics.get("truncated_turns", 0.0)
            w.format_errors += t.metrics.get("format_errors", 0.0)
            w.tool_calls += t.metrics.get("tool_calls", 0.0)
            w.no_change += int(outcome(r) == "no_change")
            w.guided += int(t.metrics.get("guided", 0.0) > 0)
        w.credit_groups += _taught_by_credit(results, groups)
        for g in groups.values():
            w.largest_group = max(w.largest_group, len(g))
            if g and min(g) > 0:
                w.all_pass_groups += 1
            else:
                w.all_fail_groups += 1
        if self.patience <= 0 or len(w.steps) != self.patience:
            return None
        credit = (
            f" Only partial credit (train.patch_credit) taught, in {w.credit_groups} group(s): the policy learns "
            "from near misses, not from solved tasks, and the credit falls to 0."
            if w.credit_groups
            else ""
        )
        return (
            f"no training signal for {len(w.steps)} steps in a row (steps {w.steps[0]}-{w.steps[-1]}): "
            f"{diagnose(w, self.in_use, self.group_size)}{credit}"
        )


def _listed(items: list[str], last: str = "or", clauses: bool = False) -> str:
    """``a``, ``a or b``, ``a, b or c``; ``clauses``: ``a, or b`` and ``a, b, or c`` (long items)."""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ("," if clauses else "") + f" {last} " + items[-1]


def diagnose(w: _Window, in_use: InUse | None = None, group_size: int | None = None) -> str:
    """The likely cause of a starved streak and what to try, most specific first; a remedy ``in_use``
    says the run already has is not suggested, and the run's remedies are named."""
    on = in_use or InUse()
    group = group_size or w.largest_group
    warm_up = "" if on.warm_start else ", or warm the policy up first (sft.before_rl=true) so it "
    if w.largest_group <= 1:
        return (
            "every group has one sample (train.group_size=1), so no group can compare its samples and every "
            "group-relative advantage is 0. Set train.group_size to 2 or more (8 gives a task solved 1 time "
            "in 5 a success in 83% of its groups)."
        )
    limits = ", ".join(f"{k} {v}" for k, v in sorted(w.limits.items()))
    cut_short = w.truncated_turns >= w.turns / 2 or any(k != "step_limit" for k in w.limits)
    if w.samples and w.truncated == w.samples and cut_short:
        return (
            f"every sample was cut off by a limit ({limits}; {w.truncated_turns:.0f} of {w.turns} turns cut at "
            "rollout.max_tokens) before it finished, so its reward is 0 whatever the model did. Raise "
            "rollout.max_total_tokens / rollout.max_tokens (or engine.max_model_len with "
            f"rollout.max_context_tokens){warm_up + 'finishes in fewer tokens' if warm_up else ''}."
        )
    if w.samples and w.tool_calls == 0 and w.format_errors > 0:
        return (
            f"the tool-call parser matched none of the model's {w.turns} turns ({w.format_errors:.0f} format "
            "errors, 0 tool calls), so no sample could act and every reward is 0. Check model.tool_format "
            "(hermes / xml) against the form the model writes, and rollout.response_prefix; look at a "
            "trajectory with `coderl view RUN_DIR`."
        )
    if w.samples and w.truncated == w.samples:
        return (
            f"every sample used all its turns ({limits}) without submitting. Raise rollout.max_turns"
            f"{warm_up + 'submits sooner' if warm_up else ''}."
        )
    if w.solved == 0:
        unchanged = (
            f"; {w.no_change} of them ended without changing the repository (the policy does not find what to "
            "change: look at them with `coderl view RUN_DIR`)"
            if w.no_change * 2 >= w.samples
            else ""
        )
        guide = (
            [] if w.guided else
            ["more guided samples (train.guide_share, train.guide_steps; none of these steps' samples was guided)"]
            if on.guided else ["guided samples (train.guide_share > 0)"]
        )  # fmt: skip
        tries = [
            *([] if on.warm_start else ["a supervised warm start (sft.before_rl=true)"]),
            *([] if on.edge else ["train.curriculum=edge with calibrated pass rates (coderl tasks calibrate)"]),
            "a lower rollout.temperature",
            f"a larger train.group_size (now {group})",
            *guide,
        ]
        has = [
            *(["a warm start"] if on.warm_start else []), *(["the edge curriculum"] if on.edge else []),
            *([f"{w.guided} guided sample{'s' if w.guided != 1 else ''}"] if w.guided else []),
        ]  # fmt: skip
        return (
            f"every sample failed ({w.samples} samples, 0 solved{unchanged}): the tasks are too hard for this policy"
            f"{' even with ' + _listed(has, 'and') if has else ''}. Try {_listed(tries, clauses=len(tries) > 2)}."
        )
    if w.solved == w.samples:
        return (
            f"every sample solved its task ({w.samples} samples): the tasks are too easy for this policy. "
            f"{'Draw harder ones (train.curriculum=edge), or raise' if not on.edge else 'Raise'} rollout.temperature."
        )
    tries = [
        "raise train.group_size so a task the policy sometimes solves shows both",
        *([] if on.edge else ["use train.curriculum=edge"]),
        *([] if on.dynamic_sampling else ["turn on DAPO dynamic sampling (algo.dynamic_sampling=true)"]),
    ]
    said = _listed(tries, clauses=True)
    return (
        f"every group was all-pass ({w.all_pass_groups}) or all-fail ({w.all_fail_groups}); no group mixed "
        f"the two{' even with dynamic sampling' if on.dynamic_sampling else ''}. {said[0].upper()}{said[1:]}."
    )
