"""coderl.rl.advantages: hand-computed values, loop references on random inputs, edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from coderl.rl import ADVANTAGES, AlgoConfig, compute_advantages

EPS = 1e-6


# ---------------------------------------------------------------------------------------------------------
# Independent references: plain Python loops over lists, nothing shared with coderl.rl.
# ---------------------------------------------------------------------------------------------------------


def _members(groups: list[int], i: int) -> list[int]:
    return [j for j in range(len(groups)) if groups[j] == groups[i]]


def _seq_rewards(rewards: list[float], mask: list[list[float]], tok: list[list[float]] | None) -> list[float]:
    out = []
    for b in range(len(rewards)):
        total = rewards[b]
        if tok is not None:
            for t in range(len(mask[b])):
                if mask[b][t] == 1:
                    total += tok[b][t]
        out.append(total)
    return out


def _broadcast(per_seq: list[float], mask: list[list[float]]) -> list[list[float]]:
    return [[per_seq[b] if mask[b][t] == 1 else 0.0 for t in range(len(mask[b]))] for b in range(len(mask))]


def ref_grpo(rewards, mask, groups, tok=None, norm=True):  # type: ignore[no-untyped-def]
    seq = _seq_rewards(rewards, mask, tok)
    adv = []
    for i in range(len(seq)):
        vals = [seq[j] for j in _members(groups, i)]
        mean = sum(vals) / len(vals)
        if len(vals) > 1:
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        else:
            std = 0.0
        adv.append((seq[i] - mean) / (std + EPS) if norm else seq[i] - mean)
    return _broadcast(adv, mask)


def ref_rloo(rewards, mask, groups, tok=None):  # type: ignore[no-untyped-def]
    seq = _seq_rewards(rewards, mask, tok)
    adv = []
    for i in range(len(seq)):
        others = [seq[j] for j in _members(groups, i) if j != i]
        adv.append(seq[i] - sum(others) / len(others) if others else 0.0)
    return _broadcast(adv, mask)


def _whiten(rows: list[list[float]], mask: list[list[float]]) -> list[list[float]]:
    vals = [rows[b][t] for b in range(len(rows)) for t in range(len(rows[b])) if mask[b][t] == 1]
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    return [
        [(rows[b][t] - mean) / (std + EPS) if mask[b][t] == 1 else 0.0 for t in range(len(rows[b]))]
        for b in range(len(rows))
    ]


def _token_rewards(outcome: list[float], mask, tok):  # type: ignore[no-untyped-def]
    rows = []
    for b in range(len(mask)):
        trained = [t for t in range(len(mask[b])) if mask[b][t] == 1]
        row = [0.0] * len(mask[b])
        for t in trained:
            row[t] = tok[b][t] if tok is not None else 0.0
        if trained:
            row[trained[-1]] += outcome[b]
        rows.append(row)
    return rows


def ref_reinforce_pp(outcome, mask, tok, gamma):  # type: ignore[no-untyped-def]
    per_token = _token_rewards(outcome, mask, tok)
    returns = []
    for b in range(len(mask)):
        row = [0.0] * len(mask[b])
        running = 0.0
        for t in reversed([t for t in range(len(mask[b])) if mask[b][t] == 1]):
            running = per_token[b][t] + gamma * running
            row[t] = running
        returns.append(row)
    return _whiten(returns, mask), returns


def ref_reinforce_pp_baseline(rewards, mask, groups, tok, gamma):  # type: ignore[no-untyped-def]
    centred = []
    for i in range(len(rewards)):
        vals = [rewards[j] for j in _members(groups, i)]
        centred.append(rewards[i] - sum(vals) / len(vals))
    return ref_reinforce_pp(centred, mask, tok, gamma)


def ref_gae(rewards, mask, values, tok, gamma, lam, whiten):  # type: ignore[no-untyped-def]
    per_token = _token_rewards(rewards, mask, tok)
    adv_rows, ret_rows = [], []
    for b in range(len(mask)):
        trained = [t for t in range(len(mask[b])) if mask[b][t] == 1]
        adv = [0.0] * len(mask[b])
        ret = [0.0] * len(mask[b])
        gae_next = 0.0
        for k in reversed(range(len(trained))):
            t = trained[k]
            v_next = values[b][trained[k + 1]] if k + 1 < len(trained) else 0.0
            delta = per_token[b][t] + gamma * v_next - values[b][t]
            gae_next = delta + gamma * lam * gae_next
            adv[t] = gae_next
            ret[t] = gae_next + values[b][t]
        adv_rows.append(adv)
        ret_rows.append(ret)
    return (_whiten(adv_rows, mask) if whiten else adv_rows), ret_rows


# ---------------------------------------------------------------------------------------------------------
# Random inputs: gaps of environment tokens, padding, a group of one, a group with equal rewards.
# ---------------------------------------------------------------------------------------------------------


def _random_batch(seed: int):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    B, T = 7, 11
    mask = (torch.rand(B, T, generator=gen) > 0.3).double()  # [B, T]
    lengths = torch.randint(3, T + 1, (B,), generator=gen)
    for b in range(B):
        mask[b, lengths[b] :] = 0
        mask[b, 0] = 1
    groups = torch.tensor([3, 3, 3, 9, 9, 4, 6])  # group 4 and 6 have one sample
    rewards = torch.rand(B, generator=gen, dtype=torch.float64)
    rewards[3] = rewards[4]  # an all-equal group
    values = torch.randn(B, T, generator=gen, dtype=torch.float64)
    tok = 0.1 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    return rewards, mask, groups, values, tok


def _close(actual: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("with_tok", [False, True])
def test_group_estimators_match_loop_reference(seed: int, with_tok: bool) -> None:
    rewards, mask, groups, _, tok = _random_batch(seed)
    tok_arg = tok if with_tok else None
    r, m, g, tk = rewards.tolist(), mask.tolist(), groups.tolist(), (tok.tolist() if with_tok else None)
    for name, expected in [
        ("grpo", ref_grpo(r, m, g, tk)),
        ("drgrpo", ref_grpo(r, m, g, tk, norm=False)),
        ("rloo", ref_rloo(r, m, g, tk)),
    ]:
        adv, returns = ADVANTAGES[name](rewards, mask, groups, AlgoConfig(), token_rewards=tok_arg)
        _close(adv, expected)
        _close(returns, _broadcast(_seq_rewards(r, m, tk), m))
    adv, _ = ADVANTAGES["grpo"](rewards, mask, groups, AlgoConfig(norm_adv_by_std=False))
    _close(adv, ref_grpo(r, m, g, None, norm=False))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("with_tok", [False, True])
def test_reinforce_pp_matches_loop_reference(seed: int, gamma: float, with_tok: bool) -> None:
    rewards, mask, groups, _, tok = _random_batch(seed)
    tok_arg = tok if with_tok else None
    r, m, g, tk = rewards.tolist(), mask.tolist(), groups.tolist(), (tok.tolist() if with_tok else None)
    cfg = AlgoConfig(gamma=gamma)
    adv, returns = ADVANTAGES["reinforce_pp"](rewards, mask, groups, cfg, token_rewards=tok_arg)
    exp_adv, exp_ret = ref_reinforce_pp(r, m, tk, gamma)
    _close(adv, exp_adv)
    _close(returns, exp_ret)
    adv, returns = ADVANTAGES["reinforce_pp_baseline"](rewards, mask, groups, cfg, token_rewards=tok_arg)
    exp_adv, exp_ret = ref_reinforce_pp_baseline(r, m, g, tk, gamma)
    _close(adv, exp_adv)
    _close(returns, exp_ret)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("gamma", "lam", "whiten"), [(1.0, 1.0, False), (0.9, 0.8, False), (0.95, 0.7, True)]
)
def test_gae_matches_loop_reference(seed: int, gamma: float, lam: float, whiten: bool) -> None:
    rewards, mask, groups, values, tok = _random_batch(seed)
    cfg = AlgoConfig(advantage="gae", gamma=gamma, lam=lam, whiten_gae=whiten)
    adv, returns = compute_advantages(rewards, mask, groups, cfg, values=values, token_rewards=tok)
    exp_adv, exp_ret = ref_gae(
        rewards.tolist(), mask.tolist(), values.tolist(), tok.tolist(), gamma, lam, whiten
    )
    _close(adv, exp_adv)
    _close(returns, exp_ret)


# ---------------------------------------------------------------------------------------------------------
# Hand-computed values.
# ---------------------------------------------------------------------------------------------------------


def test_grpo_drgrpo_rloo_by_hand() -> None:
    # Groups: a = [1, 0, 0], b = [1] (alone), c = [1, 1] (all equal).
    # a: mean 1/3; deviations 2/3, -1/3, -1/3; unbiased var = (4/9 + 1/9 + 1/9) / 2 = 1/3, std = 0.57735.
    #   grpo: 0.66667 / 0.57735 = 1.15470, -0.33333 / 0.57735 = -0.57735.  drgrpo: 2/3, -1/3, -1/3.
    #   rloo: 1 - (0 + 0) / 2 = 1;  0 - (1 + 0) / 2 = -0.5.
    # b and c: no signal -> 0 (never NaN).
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 1, 2, 2])
    mask = torch.ones(6, 1)
    cases = {
        "grpo": [1.1547005, -0.5773503, -0.5773503, 0.0, 0.0, 0.0],
        "drgrpo": [2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0],
        "rloo": [1.0, -0.5, -0.5, 0.0, 0.0, 0.0],
    }
    for name, expected in cases.items():
        adv, _ = ADVANTAGES[name](rewards, mask, groups, AlgoConfig())
        torch.testing.assert_close(adv[:, 0], torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_reinforce_pp_by_hand() -> None:
    # Row 0 trained at t = 0, 1, 3 (t = 2 is tool output), reward 1 on t = 3, gamma 0.5:
    #   G_3 = 1, G_1 = 0.5 * 1 = 0.5 (t = 2 skipped, not discounted), G_0 = 0.25.
    # Row 1 trained at t = 0, 1, reward 0: G = 0, 0.
    # Trained returns [0.25, 0.5, 1, 0, 0]: mean 0.35; population var (0.01 + 0.0225 + 0.4225 + 2 * 0.1225) / 5
    #   = 0.14, std 0.374166 -> [-0.267261, 0.400892, 1.737198, -0.935414, -0.935414].
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    adv, returns = ADVANTAGES["reinforce_pp"](
        torch.tensor([1.0, 0.0]), mask, torch.tensor([0, 0]), AlgoConfig(gamma=0.5)
    )
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    expected = torch.tensor([[-0.267261, 0.400892, 0.0, 1.737198], [-0.935414, -0.935414, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)


def test_reinforce_pp_baseline_by_hand() -> None:
    # One group, rewards [1, 0] -> centred [0.5, -0.5]; gamma 1: row 0 returns [0.5, 0.5], row 1 [-0.5].
    # mean 1/6; deviations 1/3, 1/3, -2/3; population var 2/9, std 0.471405 -> 0.707107, 0.707107, -1.414214.
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv, _ = ADVANTAGES["reinforce_pp_baseline"](
        torch.tensor([1.0, 0.0]), mask, torch.tensor([7, 7]), AlgoConfig()
    )
    torch.testing.assert_close(
        adv, torch.tensor([[0.707107, 0.707107], [-1.414214, 0.0]]), atol=1e-5, rtol=1e-5
    )


def test_gae_by_hand_skips_environment_tokens() -> None:
    # Trained at t = 0 and t = 2; the value 9.0 at the tool token t = 1 must be ignored. gamma 0.9, lam 0.8.
    # t = 2: delta = 1 + 0.9 * 0 - 0.2 = 0.8, A = 0.8, return = 1.0.
    # t = 0: delta = 0 + 0.9 * 0.2 - 0.5 = -0.32, A = -0.32 + 0.9 * 0.8 * 0.8 = 0.256, return = 0.756.
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 9.0, 0.2]])
    cfg = AlgoConfig(advantage="gae", gamma=0.9, lam=0.8, whiten_gae=False)
    adv, returns = compute_advantages(torch.tensor([1.0]), mask, torch.tensor([0]), cfg, values=values)
    torch.testing.assert_close(adv, torch.tensor([[0.256, 0.0, 0.8]]))
    torch.testing.assert_close(returns, torch.tensor([[0.756, 0.0, 1.0]]))


# ---------------------------------------------------------------------------------------------------------
# Edge cases.
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ADVANTAGES))
def test_singletons_and_empty_rows_give_no_nan(name: str) -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    rewards = torch.tensor([1.0, 0.5, 0.0])
    groups = torch.tensor([0, 1, 2])  # every group has one sample
    adv, returns = ADVANTAGES[name](rewards, mask, groups, AlgoConfig(), values=torch.zeros(3, 3))
    assert torch.isfinite(adv).all() and torch.isfinite(returns).all()
    assert (adv[mask == 0] == 0).all() and (returns[mask == 0] == 0).all()
    if name in ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline"):
        assert (adv == 0).all()


@pytest.mark.parametrize("name", list(ADVANTAGES))
def test_advantages_carry_no_gradient(name: str) -> None:
    values = torch.randn(2, 3, requires_grad=True)
    adv, returns = ADVANTAGES[name](
        torch.tensor([1.0, 0.0]), torch.ones(2, 3), torch.tensor([0, 0]), AlgoConfig(), values=values
    )
    assert not adv.requires_grad and not returns.requires_grad


def test_gae_without_values_is_an_error() -> None:
    with pytest.raises(ValueError, match="values"):
        compute_advantages(
            torch.ones(1), torch.ones(1, 2), torch.zeros(1, dtype=torch.long), AlgoConfig(advantage="gae")
        )


def test_every_config_name_has_an_estimator() -> None:
    names = AlgoConfig.model_fields["advantage"].annotation.__args__  # type: ignore[union-attr]
    assert set(names) == set(ADVANTAGES)


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo", "reinforce_pp_baseline"])
def test_extra_sequences_of_a_rollout_do_not_weigh_in_the_group_baseline(name: str) -> None:
    """Rollout 0 of group a brought a second sequence (row 3: same reward, counted 0): the group's
    baseline is that of its three rollouts, and the extra row gets its rollout's advantage."""
    cfg = AlgoConfig(advantage=name, gamma=1.0)  # type: ignore[arg-type]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    groups = torch.tensor([0, 0, 0, 0])
    alone, _ = compute_advantages(rewards[:3], mask[:3], groups[:3], cfg)
    both, _ = compute_advantages(rewards, mask, groups, cfg, counted=torch.tensor([1.0, 1.0, 1.0, 0.0]))
    assert torch.allclose(both[3], both[0], atol=1e-6)
    if name != "reinforce_pp_baseline":  # (its batch whitening sees the extra row's tokens too)
        assert torch.allclose(both[:3], alone, atol=1e-6)
        naive, _ = compute_advantages(rewards, mask, groups, cfg)  # counting it twice moves the baseline
        assert not torch.allclose(naive[1], both[1], atol=1e-3)
