"""The training loop's parts without a model: sampled-id ledger, batch + loss, checkpoints, report."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.rl import AlgoConfig
from coderl.train import checkpoints
from coderl.train.batch import BatchLoss, build_batch, merged_metrics, mini_batches
from coderl.train.budget import RLBudget
from coderl.train.config import TrainConfig
from coderl.train.ledger import SampledLedger
from coderl.train.loggers import flatten
from coderl.train.report import write_report
from coderl.types import Trajectory

# ---------------------------------------------------------------- ledger


async def _two_turn(ledger: SampledLedger, prompt: list[int]) -> Trajectory:
    """Two model turns with 2 environment tokens between them, as an agent loop builds them."""
    traj = Trajectory(task_id="t", group_id="t#0", prompt_ids=list(prompt))
    for turn in range(2):
        if turn:
            traj.response_ids += [7, 7]
            traj.response_mask += [0, 0]
            traj.logprobs += [0.0, 0.0]
        c = await ledger.generate(traj.prompt_ids + traj.response_ids, SamplingParams(max_tokens=3))
        traj.response_ids += c.token_ids
        traj.response_mask += [1] * len(c.token_ids)
        traj.logprobs += c.logprobs
    return traj


async def test_ledger_accepts_exactly_what_was_sampled() -> None:
    ledger = SampledLedger(ScriptedEngine(name="e"))
    traj = await _two_turn(ledger, [1, 2, 3])
    assert ledger.verify(traj) is None


async def test_ledger_rejects_a_changed_model_token() -> None:
    ledger = SampledLedger(ScriptedEngine(name="e"))
    traj = await _two_turn(ledger, [1, 2, 3])
    traj.response_ids[-1] += 1  # a retokenised or edited model token
    problem = ledger.verify(traj)
    assert problem is not None and "response[" in problem


async def test_ledger_rejects_a_changed_context() -> None:
    ledger = SampledLedger(ScriptedEngine(name="e"))
    traj = await _two_turn(ledger, [1, 2, 3])
    traj.response_ids[3] = 8  # the environment tokens differ from what the engine was sent
    assert ledger.verify(traj) is not None
    traj2 = await _two_turn(ledger, [1, 2, 3])
    traj2.response_mask[3] = 1  # an environment token claimed as sampled
    assert ledger.verify(traj2) is not None


async def test_ledger_tells_apart_samples_with_the_same_tokens_and_other_logprobs() -> None:
    """A group's samples share a prompt; a low-entropy policy repeats the same tokens, and batched
    arithmetic gives them slightly different logprobs. Each is what the engine returned: accepted."""

    class Jittered(ScriptedEngine):
        calls = 0

        async def generate(self, prompt_ids, params, session_id=None):  # type: ignore[no-untyped-def]
            c = await super().generate(prompt_ids, params, session_id)
            Jittered.calls += 1
            return dataclasses.replace(c, logprobs=[x - 1e-6 * Jittered.calls for x in c.logprobs])

    ledger = SampledLedger(Jittered(name="e"))
    first, second = await _two_turn(ledger, [1, 2, 3]), await _two_turn(ledger, [1, 2, 3])
    assert first.response_ids == second.response_ids and first.logprobs != second.logprobs
    assert ledger.verify(first) is None and ledger.verify(second) is None
    second.logprobs[0] -= 1e-3  # logprobs no call returned with these tokens
    assert "logprobs at response[0:" in (ledger.verify(second) or "")


async def test_ledger_rejects_ragged_lengths_and_forgets_on_clear() -> None:
    ledger = SampledLedger(ScriptedEngine(name="e"))
    traj = await _two_turn(ledger, [1, 2, 3])
    traj.logprobs.pop()
    assert "lengths differ" in (ledger.verify(traj) or "")
    traj = await _two_turn(ledger, [4])
    ledger.clear()
    assert ledger.verify(traj) is not None


# ---------------------------------------------------------------- batch and loss


def _traj(group: str, prompt: int, response: list[int], mask: list[int], reward: float) -> Trajectory:
    return Trajectory(
        task_id=group,
        group_id=group,
        prompt_ids=list(range(1, prompt + 1)),
        response_ids=response,
        response_mask=mask,
        logprobs=[-0.5 if m else 0.0 for m in mask],
        reward=reward,
    )


def _trajs() -> list[Trajectory]:
    return [
        _traj("a", 3, [5, 6, 7, 8], [1, 1, 0, 1], 1.0),
        _traj("a", 2, [5, 6], [1, 1], 0.0),
        _traj("b", 4, [9, 9, 9], [1, 0, 1], 1.0),
        _traj("b", 1, [9, 9, 9, 9, 9], [1, 1, 1, 1, 1], 0.0),
    ]


def test_build_batch_pads_masks_and_gives_group_advantages() -> None:
    batch = build_batch(_trajs(), AlgoConfig(advantage="grpo"), max_response=8)
    assert batch.mask.shape == (4, 5) and batch.mask.sum() == 3 + 2 + 2 + 5
    assert batch.starts == [3, 2, 4, 1]
    assert batch.sequences[0] == [1, 2, 3, 5, 6, 7, 8]
    assert batch.group_index.tolist() == [0, 0, 1, 1]
    adv = batch.advantages
    assert adv[0, 0] > 0 > adv[1, 0]  # the resolved sample of a group is pushed up
    assert torch.all(adv[0, 2] == 0) and torch.all(adv[1, 2:] == 0)  # nothing on masked or padding


def _logprobs(batch_size: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = [4, 2, 3, 5][:batch_size]
    return [(-torch.rand(n, generator=gen) - 0.1).requires_grad_() for n in lengths]


@pytest.mark.parametrize(
    "agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_micro_batches_give_the_full_batch_gradient(agg: str) -> None:
    algo = AlgoConfig(advantage="grpo", loss_agg=agg)  # type: ignore[arg-type]
    batch = build_batch(_trajs(), algo, max_response=8)
    full = _logprobs(4)
    BatchLoss(batch, algo)([0, 1, 2, 3], full, None).backward()
    parts = _logprobs(4)
    split = BatchLoss(batch, algo)
    (split([0, 2], [parts[0], parts[2]], None) + split([1, 3], [parts[1], parts[3]], None)).backward()
    for a, b in zip(full, parts, strict=True):
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, atol=1e-7)


def test_batch_loss_reports_the_rollout_trainer_mismatch_on_trained_tokens_only() -> None:
    algo = AlgoConfig(advantage="grpo")
    batch = build_batch(_trajs(), algo, max_response=8)
    lps = [torch.full((len(t.response_ids),), -0.5) for t in batch.trajectories]
    lps[0][0] = -0.75  # one trained token off by 0.25
    lps[0][2] = -9.0  # a masked (environment) token: must not count
    loss = BatchLoss(batch, algo)
    loss([0, 1, 2, 3], lps, None)
    metrics = loss.metrics()
    assert metrics["logprob_mismatch"] == pytest.approx(0.25 / 12)
    assert metrics["logprob_mismatch_max"] == pytest.approx(0.25)
    assert "loss" in metrics and "clip_fraction" in metrics


def _three_groups() -> list[Trajectory]:
    return [*_trajs(), _traj("c", 2, [4, 4, 4, 4, 4, 4], [1] * 6, 1.0), _traj("c", 2, [4], [1], 0.0)]


def test_mini_batches_hold_whole_groups_with_even_tokens() -> None:
    batch = build_batch(_three_groups(), AlgoConfig(advantage="grpo"), max_response=8)
    # trained tokens per group: a 3+2=5, b 2+5=7, c 6+1=7
    parts = mini_batches(batch, 2)
    assert parts == [[0, 1, 2, 3], [4, 5]]  # largest first: b, c, then a beside the lighter (b): 12 and 7
    assert mini_batches(batch, 1) == [[0, 1, 2, 3, 4, 5]]
    assert len(mini_batches(batch, 9)) == 3  # never more mini-batches than groups, none empty
    for part in mini_batches(batch, 3):
        assert len({int(batch.group_index[i]) for i in part}) == 1


def test_a_subset_keeps_its_rows_advantages() -> None:
    batch = build_batch(_three_groups(), AlgoConfig(advantage="grpo"), max_response=8)
    batch.old_logp = torch.randn(batch.mask.shape)
    sub = batch.subset([2, 3])
    assert sub.sequences == batch.sequences[2:4] and sub.starts == batch.starts[2:4]
    assert torch.equal(sub.advantages, batch.advantages[2:4]) and torch.equal(sub.mask, batch.mask[2:4])
    assert sub.old_logp is not None and torch.equal(sub.old_logp, batch.old_logp[2:4])


def test_a_later_mini_batch_is_clipped_against_the_policy_before_the_first_update() -> None:
    """With ``old_logp`` (PPO mini-batches) the ratio is taken against the weights the step started from:
    a token whose probability already rose beyond 1 + clip_high gets no more push (its gradient is 0);
    without it the ratio starts at 1 and the same token is pushed again."""
    algo = AlgoConfig(advantage="grpo", tis_cap=None)
    batch = build_batch(_trajs(), algo, max_response=8)
    rows = [0]  # the resolved sample of group a: advantage > 0 on its trained tokens
    before = torch.full((1, batch.mask.shape[1]), -1.0)
    now = torch.full((4,), -0.5, requires_grad=True)  # ratio e^0.5 = 1.65 > 1.28
    BatchLoss(batch, algo)(rows, [now], None).backward()
    assert now.grad is not None and float(now.grad.abs().sum()) > 0
    batch.old_logp = torch.cat([before, torch.zeros(3, batch.mask.shape[1])])
    again = torch.full((4,), -0.5, requires_grad=True)
    loss = BatchLoss(batch, algo)
    loss(rows, [again], None).backward()
    assert again.grad is not None and float(again.grad.abs().sum()) == 0.0
    assert loss.metrics()["clip_fraction"] == 1.0


def test_merged_metrics_weigh_token_means_by_tokens() -> None:
    algo = AlgoConfig(advantage="grpo")
    batch = build_batch(_trajs(), algo, max_response=8)
    losses = []
    for part, value in (([0, 1], -0.5), ([2, 3], -0.25)):
        sub = batch.subset(part)
        loss = BatchLoss(sub, algo)
        loss([0, 1], [torch.full((len(t.response_ids),), value) for t in sub.trajectories], None)
        losses.append(loss)
    merged = merged_metrics(losses)
    # rollout logprobs are -0.5: the first mini-batch (5 tokens) matches them, the second (7) is 0.25 off
    assert merged["logprob_mismatch"] == pytest.approx(0.25 * 7 / 12)
    assert merged["logprob_mismatch_max"] == pytest.approx(0.25)
    assert merged["loss"] == pytest.approx((losses[0].metrics()["loss"] + losses[1].metrics()["loss"]) / 2)


# ---------------------------------------------------------------- checkpoints and metrics


def test_checkpoints_are_atomic_and_pruned(tmp_path: Path) -> None:
    assert checkpoints.latest(tmp_path) is None
    for step in (1, 2, 3):
        tmp = checkpoints.begin(tmp_path, step)
        (tmp / "weights.bin").write_bytes(b"x" * step)
        checkpoints.commit(tmp_path, tmp, step, {"step": step, "cursor": step * 2}, keep=2)
    checkpoints.begin(tmp_path, 4)  # a kill -9 while writing step 4: never counts
    names = [p.name for p in checkpoints.complete(tmp_path)]
    assert names == ["step-000002", "step-000003"]
    found = checkpoints.latest(tmp_path)
    assert found is not None and found[1] == {"step": 3, "cursor": 6}
    assert (found[0] / "weights.bin").read_bytes() == b"xxx"


def test_truncate_metrics_drops_lost_steps_and_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"step": s, "reward_mean": 0.1 * s}) for s in (1, 2, 3)]
    path.write_text("\n".join(rows) + '\n{"step": 4, "rew')  # killed mid-write
    assert checkpoints.truncate_metrics(path, 2) == 2
    assert [r["step"] for r in checkpoints.read_metrics(path)] == [1, 2]
    assert path.read_text().endswith("\n")


def test_flatten_keeps_numeric_leaves_only() -> None:
    row = {
        "step": 1,
        "stage_s": {"rollout": 2.5, "update": 1},
        "exit_statuses": {"x": 2},
        "ok": True,
        "s": "a",
    }
    assert flatten(row) == {
        "step": 1.0,
        "stage_s/rollout": 2.5,
        "stage_s/update": 1.0,
        "exit_statuses/x": 2.0,
    }


def test_report_has_a_chart_per_metric_family(tmp_path: Path) -> None:
    rows = [
        {"step": s, "reward_mean": s / 4, "pass_rate": s / 8, "kl": 0.01 * s, "entropy": 1.0,
         "logprob_mismatch": 1e-6, "grad_norm": 0.5, "response_len_mean": 40.0 + s,
         "stage_s": {"rollout": 10.0, "update": 5.0}}
        for s in (1, 2, 3)
    ]  # fmt: skip
    path = write_report(tmp_path, rows, {"steps": 3})
    page = path.read_text()
    assert path.name == "report.html" and page.count("<svg") >= 5
    for title in ("RL signal: groups that can teach", "KL and entropy", "Stage times"):
        assert title in page
    assert "stage_s/rollout" in page and "reward_mean" in page
    assert "No training signal" not in page
    rows[-1]["signal_warning"] = "no training signal for 2 steps in a row (steps 2-3): every sample failed"
    page = write_report(tmp_path, rows, {"steps": 3}).read_text()
    assert page.index("No training signal") < page.index("<table>")  # the warning comes first
    assert "step 3: no training signal for 2 steps in a row" in page


def test_format_reward_shapes_the_batch_rewards_only() -> None:
    trajs = _trajs()
    for t, errors in zip(trajs, (0.0, 2.0, 1.0, 0.0), strict=True):
        t.num_turns, t.metrics["format_errors"] = 2, errors
    batch = build_batch(trajs, AlgoConfig(advantage="grpo", format_reward=0.5), max_response=8)
    assert batch.rewards.tolist() == [1.5, 0.0, 1.25, 0.5]
    assert [t.reward for t in trajs] == [1.0, 0.0, 1.0, 0.0]  # the recorded task reward is untouched


def test_a_checkpointed_row_lost_before_the_metrics_file_is_restored(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    assert checkpoints.restore_row(path, {"step": 2, "reward_mean": 0.25})  # killed after the checkpoint
    assert not checkpoints.restore_row(path, {"step": 2, "reward_mean": 0.25})  # never twice
    assert not checkpoints.restore_row(path, None)
    assert [r["step"] for r in checkpoints.read_metrics(path)] == [1, 2]


# ---------------------------------------------------------------- GAE with a value head


def _values(batch_size: int, seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(len(t.response_ids), generator=gen) for t in _trajs()[:batch_size]]


def test_gae_batch_uses_the_critic_and_regresses_it_to_the_returns() -> None:
    algo = AlgoConfig(advantage="gae", gamma=1.0, lam=1.0, whiten_gae=False, vf_coef=1.0, value_clip=None)
    old = _values(4)
    batch = build_batch(_trajs(), algo, max_response=8, values=old)
    assert batch.old_values is not None and batch.returns is not None
    # gamma = lam = 1: A_t = R - V_t on trained tokens, and the return is R everywhere trained
    for i, t in enumerate(batch.trajectories):
        for j, m in enumerate(t.response_mask):
            expected_adv = t.reward - float(old[i][j]) if m else 0.0
            assert float(batch.advantages[i, j]) == pytest.approx(expected_adv, abs=1e-6)
            assert float(batch.returns[i, j]) == pytest.approx(t.reward if m else 0.0, abs=1e-6)
    with pytest.raises(ValueError, match="values"):
        build_batch(_trajs(), algo, max_response=8)  # gae without a critic

    values = [v.clone().requires_grad_() for v in old]
    loss = BatchLoss(batch, algo)
    loss([0, 1, 2, 3], [v.detach() - 1.0 for v in old], None, values).backward()
    metrics = loss.metrics()
    assert metrics["value_loss"] > 0 and "explained_variance" in metrics
    for i, v in enumerate(values):  # d/dV of 1/2 (V - R)^2 / N = (V - R) / N on trained tokens
        t = batch.trajectories[i]
        expected = [(float(old[i][j]) - t.reward) / 12 if m else 0.0 for j, m in enumerate(t.response_mask)]
        assert v.grad is not None and v.grad.tolist() == pytest.approx(expected, abs=1e-6)
    plain = BatchLoss(build_batch(_trajs(), AlgoConfig(advantage="grpo"), max_response=8), algo)
    with pytest.raises(ValueError, match="no GAE returns"):
        plain([0], [old[0]], None, [old[0]])


def test_a_rollouts_parts_share_its_group_reward_and_advantage_but_not_its_baseline() -> None:
    algo = AlgoConfig(advantage="grpo")
    trajs = _trajs()
    alone = build_batch(trajs, algo, max_response=8)
    # a sub-agent's sequence of rollout 0, labelled as nothing else: the batch takes its rollout's
    extra = _traj("elsewhere", 2, [5, 9, 9], [1, 0, 1], reward=-3.0)
    trajs[0].parts = [extra]
    both = build_batch(trajs, algo, max_response=8)
    assert both.counted.tolist() == [1.0, 0.0, 1.0, 1.0, 1.0] and both.rollout_index.tolist() == [
        0,
        0,
        1,
        2,
        3,
    ]
    assert both.group_index.tolist() == [0, 0, 0, 1, 1] and both.rewards[1] == both.rewards[0]
    rows = [0, 2, 3, 4]  # the counted rows: as if the part were not there
    assert torch.allclose(both.advantages[rows, :5], alone.advantages, atol=1e-6)
    assert float(both.advantages[1, 0]) == pytest.approx(float(alone.advantages[0, 0]))
    assert float(both.advantages[1, 1]) == 0.0  # its environment token


@pytest.mark.parametrize("split", [[[0, 1]], [[0], [1]], [[1], [0]]])
def test_seq_mean_token_sum_norm_does_not_depend_on_the_micro_batches(split: list[list[int]]) -> None:
    # Two rows with 8 and 2 trained tokens, advantage 1, ratio 1: every token's loss is -1, and
    # seq-mean-token-sum-norm is -(8 + 2) / (2 sequences x L) with L the run's constant 8: -0.625.
    # Dividing each micro-batch by its own padded width gave -8/16 - 2/4 = -1.0 when split in two.
    algo = AlgoConfig(advantage="grpo", loss_agg="seq-mean-token-sum-norm")
    trajs = [_traj("a", 2, list(range(8)), [1] * 8, 1.0), _traj("a", 2, [1, 2], [1, 1], 0.0)]
    for t in trajs:
        t.logprobs = [0.0] * len(t.response_ids)
    batch = build_batch(trajs, algo, max_response=8)
    batch.advantages = batch.mask.clone()
    loss = BatchLoss(batch, algo)
    total = sum(
        float(loss(rows, [torch.zeros(len(trajs[i].response_ids)) for i in rows], None)) for rows in split
    )
    assert total == pytest.approx(-0.625)


async def test_ledger_rejects_a_changed_logprob() -> None:
    ledger = SampledLedger(ScriptedEngine(name="e"))
    traj = await _two_turn(ledger, [1, 2, 3])
    first = traj.response_mask.index(1)
    traj.logprobs[first] += 0.5
    assert "logprobs" in (ledger.verify(traj) or "")


def test_phase_minutes_by_hand() -> None:
    from coderl.train.metrics import phase_minutes

    rows = [
        {"step": 0, "phase": "start", "setup_s": 90.0, "val_s": 60.0, "val_sampled_s": 120.0},
        # a point whose sets rolled out at once: its wall clock, not the sum of the overlapping sets'
        {"step": 0, "phase": "sft", "sft_s": 600.0, "val_s": 30.0, "val_sampled_s": 120.0, "validation_s": 120.0},
        {"step": 0, "phase": "calibrate", "calibrate_s": 120.0},
        {"step": 1, "pass_rate": 0.0, "samples": 16, "step_s": 60.0, "stage_s": {"rollout": 40.0}},
        {"step": 2, "pass_rate": 0.0, "samples": 16, "step_s": 240.0, "stage_s": {"validate": 180.0}},
    ]
    assert phase_minutes(rows) == [
        ("set-up", 1.5), ("start validation", 3.0), ("warm start", 8.0), ("validation after it", 2.0), ("calibration", 2.0),
        ("RL (2 steps, 32 samples)", 2.0), ("validation during and after RL", 3.0),
    ]  # fmt: skip


def test_phase_memory_by_hand() -> None:
    from coderl.train.metrics import phase_memory

    rows = [
        {"step": 0, "phase": "start", "rss_peak_mb": 2000},
        {"step": 0, "phase": "sft", "sft_rss_peak_mb": 7400, "rss_peak_mb": 3900},
        {"step": 0, "phase": "calibrate", "rss_peak_mb": 2700},
        {"step": 1, "pass_rate": 0.0, "rss_peak_mb": 5000},
        {"step": 2, "pass_rate": 0.0, "rss_peak_mb": 5600},
        {"step": 3, "pass_rate": 0.0},  # a step from before peaks were recorded
    ]
    assert phase_memory(rows) == [
        ("set-up and start validation", 2000.0), ("warm start", 7400.0), ("validation after it", 3900.0),
        ("calibration", 2700.0), ("RL steps", 5600.0),
    ]  # fmt: skip
    assert phase_memory([{"step": 1, "pass_rate": 0.0}]) == []  # a run from before: nothing printed


def test_the_rl_budget_ends_on_the_step_whose_expected_end_passes_it() -> None:
    now = [0.0]
    budget = RLBudget(minutes=1.0, steps=10, clock=lambda: now[0])
    assert not budget.last(1)  # no step yet: no mean to judge by
    now[0] = 20.0
    budget.done({"step_s": 20.0, "stage_s": {}})
    assert not budget.last(2)  # 20 s spent + 20 s expected = 40 s < 60 s
    now[0] = 40.0
    budget.done({"step_s": 20.0, "stage_s": {}})
    assert budget.last(3)  # 40 + 20 = 60 s: step 3 would end at the budget, so it is the last
    now[0] = 100.0
    budget.done({"step_s": 60.0, "stage_s": {"validate": 40.0}})  # the last step, validated
    assert "RL stopped after step 3 of 10 (1.0 min of RL steps, their validation apart)" in budget.stopped_line(3)
    unbounded = RLBudget(minutes=None, steps=2, clock=lambda: now[0])
    assert not unbounded.last(1) and unbounded.last(2)  # without a budget: train.steps alone
    with pytest.raises(ValidationError, match="rl_minutes"):
        TrainConfig(rl_minutes=0)
    with pytest.raises(ValidationError, match=r"train\.guide_steps: empty with train\.guide_share=0\.5"):
        TrainConfig(rl_minutes=10, guide_share=0.5)  # guidance would outlive a run the budget ends
    assert TrainConfig(rl_minutes=10, guide_share=0.5, guide_steps=4).guide_steps == 4


def test_the_rl_budget_leaves_validation_out_of_the_mean_and_counts_the_steps_before_a_resume() -> None:
    now = [0.0]
    budget = RLBudget(minutes=1.0, steps=10, clock=lambda: now[0])
    budget.last(1)
    now[0] = 30.0  # a 10 s step with a 20 s validation
    budget.done({"step_s": 30.0, "stage_s": {"validate": 20.0}})
    assert not budget.last(2)  # 30 s spent + 10 s expected < 60 s
    before = [{"step": 1, "step_s": 25.0, "stage_s": {}}, {"step": 2, "step_s": 25.0, "stage_s": {}}]
    resumed = RLBudget(minutes=1.0, steps=10, done_rows=before, clock=lambda: now[0])
    assert not resumed.spent_before_resume() and resumed.last(3)  # 50 s before it + 25 s expected > 60 s
    ended = [*before, {"step": 3, "step_s": 25.0, "stage_s": {}, "last_step": True}]
    assert RLBudget(minutes=1.0, steps=10, done_rows=ended).spent_before_resume()  # nothing left to train
    assert not RLBudget(minutes=5.0, steps=10, done_rows=ended).spent_before_resume()  # a budget raised since


def test_the_run_budget_ends_on_the_last_step_expected_to_end_inside_it() -> None:
    now = [0.0]
    budget = RLBudget(None, 10, clock=lambda: now[0], room_s=100.0, run_minutes=30.0)
    assert not budget.last(1)  # room, and no mean yet
    now[0] = 30.0
    budget.done({"step_s": 30.0, "stage_s": {}})
    assert not budget.last(2)  # step 2 would end at 60 s and step 3 at 90 s: both fit
    now[0] = 60.0
    budget.done({"step_s": 30.0, "stage_s": {}})
    assert budget.last(3)  # step 3 ends at 90 s, step 4 would at 120 s > 100 s: 3 is the last
    assert "train.run_minutes=30: RL stopped after step 3 of 10" in budget.stopped_line(3)
    assert "another would not have ended inside the run's budget" in budget.stopped_line(3)
    # a slow machine: nothing left when RL begins; train.min_steps are taken all the same
    none_left = RLBudget(None, 8, clock=lambda: now[0], room_s=-50.0, run_minutes=30.0)
    assert none_left.last(1)
    floor = RLBudget(None, 8, clock=lambda: now[0], room_s=-50.0, run_minutes=30.0, min_steps=3)
    assert not floor.last(1) and not floor.last(2) and floor.last(3)
    assert RLBudget(None, 2, clock=lambda: now[0], room_s=-50.0, min_steps=4).last(2)  # train.steps is the most
    # with train.rl_minutes too, whichever ends the phase first
    both = RLBudget(0.5, 10, clock=lambda: now[0], room_s=1000.0, run_minutes=30.0)
    both.last(1)
    now[0] += 20.0
    both.done({"step_s": 20.0, "stage_s": {}})
    assert both.last(2) and both.bound_name() == "train.rl_minutes=0.5"  # 20 + 20 s >= 30 s
    with pytest.raises(ValidationError, match=r"train\.patch_credit_steps: empty with train\.patch_credit=0\.3 and train\.run_minutes=28"):
        TrainConfig(run_minutes=28, patch_credit=0.3)
    assert TrainConfig(steps=2, min_steps=4).min_steps == 4  # `train.steps=2` on the packaged recipe: 2 steps


def test_the_run_budget_counts_from_the_process_start_and_the_phases_before_a_resume() -> None:
    from coderl.train.budget import last_validation_seconds, phase_seconds, process_seconds

    age = process_seconds()
    assert 0 < age < time.monotonic() + 1  # this process began after the machine did
    rows = [
        {"step": 0, "phase": "start", "validation_s": 60.0, "setup_s": 20.0},  # the earlier process's set-up
        {"step": 0, "phase": "sft", "sft_s": 400.0, "validation_s": 90.0},  # its validation is inside sft_s
        {"step": 0, "phase": "calibrate", "calibrate_s": 50.0},
        {"step": 1, "step_s": 30.0},
    ]
    assert phase_seconds(rows) == 530.0 and last_validation_seconds(rows) == 90.0
    assert last_validation_seconds([]) == 0.0


def test_the_advantage_share_of_unsolved_groups_under_grpo_and_drgrpo() -> None:
    """Two groups of two: one with a solved sample, one of near misses 0.01 apart (patch credit). GRPO
    divides by each group's spread, so the near misses weigh as much as the solve; Dr. GRPO does not."""
    from coderl.train.credit import KEY
    from coderl.train.update import unsolved_share

    def sample(group: str, reward: float, credit: float) -> Trajectory:
        return Trajectory(
            task_id=group, group_id=group, prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 1, 1],
            logprobs=[-0.1, -0.1, -0.1], reward=reward, metrics={KEY: credit},
        )  # fmt: skip

    rollouts = [sample("a", 1.0, 0.0), sample("a", 0.0, 0.0), sample("b", 0.0, 0.02), sample("b", 0.0, 0.01)]
    shares = {}
    for advantage in ("grpo", "drgrpo"):
        batch = build_batch(rollouts, AlgoConfig(advantage=advantage), 8)
        shares[advantage] = unsolved_share(batch.advantages, batch.mask, batch.rollout_index, rollouts)
    assert shares["grpo"] == pytest.approx(0.5, abs=1e-3)  # a 0.01 spread taught as loudly as a solve
    assert shares["drgrpo"] == pytest.approx(0.01 / (1.0 + 0.01), abs=1e-3)  # by the rewards' own size
    nothing = build_batch(rollouts[:2], AlgoConfig(advantage="grpo"), 8)
    assert unsolved_share(nothing.advantages, nothing.mask * 0, nothing.rollout_index, rollouts[:2]) == 0.0


class _RecordingPolicy:
    """Records what the RL update hands the actor (isolates the update's wiring from a model)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[list[int]], list[int], list[list[int]] | None]] = []

    def train_step(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        loss_fn: Any,
        with_entropy: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> dict[str, float]:
        self.calls.append((sequences, starts, score_masks))
        rows = [len(s) - st for s, st in zip(sequences, starts, strict=True)]
        logprobs = [torch.full((n,), -0.5) for n in rows]
        loss_fn(list(range(len(sequences))), logprobs, [torch.zeros(n) for n in rows])
        return {"loss": 0.0, "tokens": float(sum(map(len, sequences))), "trained_tokens": float(sum(rows)),
                "micro_batches": 1.0, "grad_norm": 0.0, "lr": 1e-4, "step_s": 0.1, "tokens_per_s": 1.0,
                "skipped": 0.0}  # fmt: skip


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_the_rl_update_projects_only_the_models_own_tokens(mini_batches: int) -> None:
    # tool output (mask 0) is context: the actor gets each row's response mask as its score mask
    import asyncio

    from rich.progress import Progress

    from coderl.train.metrics import StageTimer
    from coderl.train.update import update_policy

    policy = _RecordingPolicy()
    trajs = _trajs()
    algo = AlgoConfig(advantage="grpo", mini_batches=mini_batches)
    if mini_batches > 1:
        policy.score = lambda seqs, starts, t, **kw: [  # type: ignore[attr-defined]
            type("S", (), {"logprobs": torch.full((len(s) - st,), -0.5)})() for s, st in zip(seqs, starts, strict=True)
        ]
    row = asyncio.run(update_policy(policy, algo, 1.0, 8, trajs, StageTimer(), Progress(disable=True), "update"))  # type: ignore[arg-type]
    by_sequence = {tuple(t.prompt_ids + t.response_ids): t.response_mask for t in trajs}
    assert len(policy.calls) == mini_batches
    for sequences, _, masks in policy.calls:
        assert masks == [by_sequence[tuple(s)] for s in sequences]
    assert row["trained_tokens"] == 3 + 2 + 2 + 5
