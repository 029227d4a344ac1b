"""coderl.rl losses, KL, TIS, entropy, aggregation and compute_loss: by hand, against loops, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from coderl.rl import (
    KL_ESTIMATORS,
    LOSS_AGG,
    POLICY_LOSSES,
    AlgoConfig,
    aggregate,
    compute_loss,
    count_normalisers,
    entropy_from_logits,
    explained_variance,
    kl_penalty,
    kl_token_rewards,
    tis_weights,
    value_loss,
)

# ---------------------------------------------------------------------------------------------------------
# Independent references: plain Python loops over lists, nothing shared with coderl.rl.
# ---------------------------------------------------------------------------------------------------------


def _clip(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


def ref_policy_loss(name: str, logp, old, adv, mask, cfg: AlgoConfig) -> list[list[float]]:  # type: ignore[no-untyped-def]
    out = []
    for b in range(len(logp)):
        trained = [t for t in range(len(logp[b])) if mask[b][t] == 1]
        seq_ratio = math.exp(sum(logp[b][t] - old[b][t] for t in trained) / max(len(trained), 1))
        row = []
        for t in range(len(logp[b])):
            if mask[b][t] != 1:
                row.append(0.0)
                continue
            a = adv[b][t]
            r = math.exp(logp[b][t] - old[b][t])
            if name == "ppo_clip":
                value = -min(r * a, _clip(r, 1 - cfg.clip_low, 1 + cfg.clip_high) * a)
            elif name == "dual_clip":
                value = -min(r * a, _clip(r, 1 - cfg.clip_low, 1 + cfg.clip_high) * a)
                if a < 0:
                    value = min(value, -cfg.dual_clip_c * a)
            elif name == "gspo":
                value = -min(
                    seq_ratio * a, _clip(seq_ratio, 1 - cfg.gspo_clip_low, 1 + cfg.gspo_clip_high) * a
                )
            else:  # cispo
                low = 0.0 if cfg.cispo_clip_low is None else 1 - cfg.cispo_clip_low
                value = -_clip(r, low, 1 + cfg.cispo_clip_high) * a * logp[b][t]
            row.append(value)
        out.append(row)
    return out


def ref_aggregate(loss, mask, mode: str, num_tokens: float, num_seqs: float, max_len: float) -> float:  # type: ignore[no-untyped-def]
    total = 0.0
    for b in range(len(loss)):
        seq_sum = 0.0
        count = 0
        for t in range(len(loss[b])):
            if mask[b][t] == 1:
                seq_sum += loss[b][t]
                count += 1
        if mode == "token-mean":
            total += seq_sum / num_tokens
        elif mode == "seq-mean-token-sum":
            total += seq_sum / num_seqs
        elif mode == "seq-mean-token-mean":
            total += (seq_sum / count if count else 0.0) / num_seqs
        else:
            total += seq_sum / max_len / num_seqs
    return total


def ref_kl(kind: str, logp: float, ref: float) -> float:
    log_r = ref - logp
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r * log_r
    return math.exp(log_r) - 1 - log_r


def _random(seed: int, B: int = 5, T: int = 8, spread: float = 0.4):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=gen) > 0.25).double()  # [B, T]
    mask[:, 0] = 1
    mask[-1, 4:] = 0
    logp = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3  # [B, T]
    old = logp + spread * torch.randn(B, T, generator=gen, dtype=torch.float64)  # [B, T]
    adv = torch.randn(B, T, generator=gen, dtype=torch.float64)  # [B, T]
    return logp, old, adv, mask


def _close(actual: torch.Tensor, expected: object) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Policy losses.
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(POLICY_LOSSES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_losses_match_loop_reference(name: str, seed: int) -> None:
    logp, old, adv, mask = _random(seed, spread=1e-3 if name == "gspo" else 0.4)
    cfg = AlgoConfig(dual_clip_c=1.5, cispo_clip_high=0.3, cispo_clip_low=0.2 if seed == 1 else None)
    loss, metrics = POLICY_LOSSES[name](logp, old, adv, mask, cfg)
    _close(loss, ref_policy_loss(name, logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), cfg))
    assert 0.0 <= float(metrics["clip_fraction"]) <= 1.0
    assert float(metrics["approx_kl"]) >= 0.0


def test_every_config_name_has_a_loss_and_an_aggregation() -> None:
    assert set(AlgoConfig.model_fields["policy_loss"].annotation.__args__) == set(POLICY_LOSSES)  # type: ignore[union-attr]
    assert set(AlgoConfig.model_fields["loss_agg"].annotation.__args__) == set(LOSS_AGG)  # type: ignore[union-attr]
    assert set(AlgoConfig.model_fields["kl_estimator"].annotation.__args__) == set(KL_ESTIMATORS)  # type: ignore[union-attr]


def _four_tokens() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5]])
    old = torch.full((1, 4), -1.0)
    logp = (old + ratios.log()).requires_grad_()
    return logp, old, torch.tensor([[1.0, -1.0, -1.0, 1.0]])


def test_ppo_clip_by_hand_and_clipped_tokens_have_no_gradient() -> None:
    # clip range [0.8, 1.28]:
    #   r 1.5, A  1: max(-1.5, -1.28) = -1.28 (clipped)    r 1.5, A -1: max(1.5, 1.28) = 1.5
    #   r 0.5, A -1: max(0.5, 0.8)    =  0.8 (clipped)    r 0.5, A  1: max(-0.5, -0.8) = -0.5
    # d/dlogp of -A r = -A r: clipped -> 0, 0; unclipped -> 1.5 and -0.5. clip_fraction 2 / 4.
    logp, old, adv = _four_tokens()
    loss, metrics = POLICY_LOSSES["ppo_clip"](logp, old, adv, torch.ones(1, 4), AlgoConfig())
    _close(loss.detach(), [[-1.28, 1.5, 0.8, -0.5]])
    loss.sum().backward()
    assert logp.grad is not None
    _close(logp.grad, [[0.0, 1.5, 0.0, -0.5]])
    assert float(metrics["clip_fraction"]) == pytest.approx(0.5)


def test_dual_clip_by_hand() -> None:
    # c = 3. r 5, A -1: ppo = max(5, 1.28) = 5 -> min(5, 3) = 3 (gradient 0).
    #        r 0.5, A -1: ppo = 0.8 < 3 stays.   r 5, A 1: max(-5, -1.28) = -1.28 (no lower bound for A > 0).
    old = torch.zeros(1, 3)
    logp = torch.tensor([[5.0, 0.5, 5.0]]).log().requires_grad_()
    loss, metrics = POLICY_LOSSES["dual_clip"](
        logp, old, torch.tensor([[-1.0, -1.0, 1.0]]), torch.ones(1, 3), AlgoConfig()
    )
    _close(loss.detach(), [[3.0, 0.8, -1.28]])
    loss.sum().backward()
    assert logp.grad is not None
    _close(logp.grad, [[0.0, 0.0, 0.0]])
    assert float(metrics["dual_clip_fraction"]) == pytest.approx(1 / 3)


def test_gspo_by_hand() -> None:
    # Trained tokens t = 0, 1 with log-ratios 0.2, -0.1 (t = 2 is masked, its 5.0 ignored):
    # s = exp(0.05) = 1.0512711; clip range [0.9997, 1.0004].
    # A = 1: max(-1.0512711, -1.0004) = -1.0004 per token; A = -1: max(1.0512711, 1.0004) = 1.0512711.
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.2, -0.1, 5.0], [0.2, -0.1, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    loss, _ = POLICY_LOSSES["gspo"](logp, old, adv, mask, AlgoConfig())
    _close(loss, [[-1.0004, -1.0004, 0.0], [1.0512711, 1.0512711, 0.0]])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gspo_gradient_equals_sequence_objective_gradient(seed: int) -> None:
    # GSPO's objective: J = 1/G sum_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t (logp - old)).
    # Its token form, aggregated seq-mean-token-mean, must have the same gradient. Per-sequence offsets of
    # the old log-probs make rows 0 and 1 clipped (s > 1.0004 with A > 0, s < 0.9997 with A < 0) and the
    # others not, plus 1e-4 noise per token.
    logp, old, _, mask = _random(seed, spread=1e-4)
    old = old - torch.tensor([1e-3, -1e-3, 0.0, 1e-4, -1e-4], dtype=torch.float64)[:, None]  # [B, T]
    magnitude = torch.rand(logp.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    seq_adv = (magnitude + 0.1) * torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)  # [B]
    adv = seq_adv[:, None].expand_as(logp)  # [B, T]
    cfg = AlgoConfig(policy_loss="gspo", loss_agg="seq-mean-token-mean")

    token_logp = logp.clone().requires_grad_()
    loss_mat, _ = POLICY_LOSSES["gspo"](token_logp, old, adv, mask, cfg)
    aggregate(loss_mat, mask, cfg.loss_agg).backward()

    seq_logp = logp.clone().requires_grad_()
    objective = torch.zeros((), dtype=torch.float64)
    for b in range(logp.shape[0]):
        log_ratio = torch.zeros((), dtype=torch.float64)
        count = 0
        for t in range(logp.shape[1]):
            if mask[b, t] == 1:
                log_ratio = log_ratio + seq_logp[b, t] - old[b, t]
                count += 1
        s = torch.exp(log_ratio / count)
        a = float(seq_adv[b])
        objective = objective + torch.minimum(s * a, s.clamp(1 - 3e-4, 1 + 4e-4) * a) / logp.shape[0]
    (-objective).backward()
    assert token_logp.grad is not None and seq_logp.grad is not None
    torch.testing.assert_close(token_logp.grad, seq_logp.grad, atol=1e-9, rtol=1e-7)
    per_row = token_logp.grad.abs().sum(-1)  # [B]
    assert (per_row[:2] == 0).all() and (per_row[2:] > 0).all()


def test_cispo_by_hand_and_weight_carries_no_gradient() -> None:
    # Token 0: r = 6 -> w = min(6, 1 + 3) = 4; A = 0.5; logp = -1 + ln 6 = 0.7917595:
    #   L = -4 * 0.5 * 0.7917595 = -1.583519, dL/dlogp = -w A = -2 (a weight with gradient would add
    #   -A * logp * dw/dlogp, but w is clipped here anyway; token 1 tests the unclipped case).
    # Token 1: r = 0.1 (no lower bound) -> w = 0.1; A = -1; logp = -1 + ln 0.1 = -3.3025851:
    #   L = 0.1 * -3.3025851 = -0.3302585, dL/dlogp = -w A = 0.1 (with a live weight: 0.1 + 0.1 * logp).
    old = torch.tensor([[-1.0, -1.0]])
    logp = (old + torch.tensor([[6.0, 0.1]]).log()).requires_grad_()
    loss, metrics = POLICY_LOSSES["cispo"](
        logp, old, torch.tensor([[0.5, -1.0]]), torch.ones(1, 2), AlgoConfig()
    )
    _close(loss.detach(), [[-1.5835190, -0.3302585]])
    loss.sum().backward()
    assert logp.grad is not None
    _close(logp.grad, [[-2.0, 0.1]])
    assert float(metrics["clip_fraction"]) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------------------
# KL, entropy, TIS.
# ---------------------------------------------------------------------------------------------------------


def test_kl_estimators_by_hand() -> None:
    # logp = ln 0.5, ref = ln 0.25: log r = ln 0.5 = -0.6931472.
    # k1 = 0.6931472; k2 = 0.5 * 0.4804530 = 0.2402265; k3 = 0.5 - 1 + 0.6931472 = 0.1931472.
    logp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    for kind, expected in [("k1", 0.6931472), ("k2", 0.2402265), ("k3", 0.1931472)]:
        _close(kl_penalty(logp, ref, kind), [[expected]])  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_estimators_match_loop_reference(kind: str) -> None:
    logp, ref, _, _ = _random(4)
    expected = [
        [ref_kl(kind, lp, rf) for lp, rf in zip(lr, rr, strict=True)]
        for lr, rr in zip(logp.tolist(), ref.tolist(), strict=True)
    ]
    _close(kl_penalty(logp, ref, kind), expected)  # type: ignore[arg-type]


def test_kl_in_reward_token_rewards() -> None:
    # kl_coef 0.1, k1 = logp - ref = 0.5 on the trained token, masked elsewhere -> -0.05, 0.
    cfg = AlgoConfig(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True)
    out = kl_token_rewards(
        torch.tensor([[-1.0, -1.0]]), torch.tensor([[-1.5, -3.0]]), torch.tensor([[1.0, 0.0]]), cfg
    )
    _close(out, [[-0.05, 0.0]])


def test_entropy_from_logits_matches_loop_reference() -> None:
    # Uniform over 4 tokens: H = ln 4 = 1.3862944.
    _close(entropy_from_logits(torch.zeros(1, 1, 4)), [[1.3862944]])
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = []
    for row in logits.tolist():
        out = []
        for z in row:
            norm = sum(math.exp(v) for v in z)
            out.append(-sum(math.exp(v) / norm * math.log(math.exp(v) / norm) for v in z))
        expected.append(out)
    _close(entropy_from_logits(logits), expected)


def test_tis_weights_by_hand() -> None:
    # exp(ln 3) = 3 -> capped at 2; exp(ln 0.5) = 0.5; masked token -> 0. Detached.
    old = torch.tensor([[math.log(3.0), math.log(0.5), 1.0]], requires_grad=True)
    w = tis_weights(old, torch.zeros(1, 3), torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)
    _close(w, [[2.0, 0.5, 0.0]])
    assert not w.requires_grad


def test_tis_weights_match_loop_reference() -> None:
    old, rollout, _, mask = _random(5)
    expected = [
        [min(math.exp(o - r), 1.7) * m for o, r, m in zip(orow, rrow, mrow, strict=True)]
        for orow, rrow, mrow in zip(old.tolist(), rollout.tolist(), mask.tolist(), strict=True)
    ]
    _close(tis_weights(old, rollout, mask, 1.7), expected)


# ---------------------------------------------------------------------------------------------------------
# Aggregation.
# ---------------------------------------------------------------------------------------------------------


def test_aggregate_by_hand() -> None:
    # L = [[1, 2, 3], [4, 5, 6]], trained: (0, 0), (0, 1), (1, 0).
    # token-mean (1 + 2 + 4) / 3 = 7/3; seq-mean-token-sum (3 + 4) / 2 = 3.5;
    # seq-mean-token-mean (3/2 + 4/1) / 2 = 2.75; seq-mean-token-sum-norm, L_max 4: (3 + 4) / 4 / 2 = 0.875.
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    expected = {
        "token-mean": 7 / 3,
        "seq-mean-token-sum": 3.5,
        "seq-mean-token-mean": 2.75,
        "seq-mean-token-sum-norm": 0.875,
    }
    for mode, value in expected.items():
        assert float(aggregate(loss, mask, mode, max_len=4)) == pytest.approx(value)  # type: ignore[arg-type]
    assert count_normalisers(mask) == (3.0, 2.0)


@pytest.mark.parametrize("mode", list(LOSS_AGG))
def test_aggregate_matches_loop_reference(mode: str) -> None:
    loss, _, _, mask = _random(6)
    mask[2] = 0  # a sequence with no trained token does not count as a sequence
    tokens = float(sum(sum(row) for row in mask.tolist()))
    seqs = float(sum(1 for row in mask.tolist() if sum(row) > 0))
    expected = ref_aggregate(loss.tolist(), mask.tolist(), mode, tokens, seqs, 16.0)
    assert float(aggregate(loss, mask, mode, max_len=16)) == pytest.approx(expected, abs=1e-9)  # type: ignore[arg-type]


def _micro_batches(mask: torch.Tensor) -> list[tuple[slice, int]]:
    """Uneven row splits, each trimmed to its own padded length (as a trainer's collator would)."""
    out = []
    for rows in (slice(0, 2), slice(2, 3), slice(3, 7)):
        trained = mask[rows].sum(0).nonzero()
        out.append((rows, int(trained.max()) + 1 if len(trained) else 1))
    return out


@pytest.mark.parametrize("mode", list(LOSS_AGG))
def test_micro_batch_sum_equals_full_batch(mode: str) -> None:
    loss, _, _, mask = _random(7, B=7, T=10)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    full = aggregate(loss, mask, mode, max_len=12)  # type: ignore[arg-type]
    tokens, seqs = count_normalisers(mask)
    parts = [
        aggregate(loss[rows, :T], mask[rows, :T], mode, num_tokens=tokens, num_seqs=seqs, max_len=12)  # type: ignore[arg-type]
        for rows, T in _micro_batches(mask)
    ]
    assert float(sum(parts)) == pytest.approx(float(full), abs=1e-12)
    # Without the global normalisers the sum is wrong (the test can tell the difference).
    local = [aggregate(loss[rows, :T], mask[rows, :T], mode, max_len=12) for rows, T in _micro_batches(mask)]  # type: ignore[arg-type]
    assert float(sum(local)) != pytest.approx(float(full), abs=1e-6)


# ---------------------------------------------------------------------------------------------------------
# compute_loss.
# ---------------------------------------------------------------------------------------------------------


def test_compute_loss_by_hand() -> None:
    # One sequence, two trained tokens, ppo_clip, token-mean, logp = old (ratio 1, nothing clipped):
    #   pg = mean(-A) = -(1 + 3) / 2 = -2.
    #   TIS: exp(old - rollout) = [1, e^1 -> capped 2] -> pg = (-1 * 1 + -3 * 2) / 2 = -3.5.
    #   KL k1 = logp - ref = [0.5, 0.5] -> 0.5, kl_coef 0.2 -> +0.1.
    #   entropy [1, 2] -> 1.5, entropy_coef 0.1 -> -0.15.  loss = -3.5 + 0.1 - 0.15 = -3.55.
    logp = torch.tensor([[-1.0, -2.0]])
    cfg = AlgoConfig(kl_coef=0.2, kl_estimator="k1", entropy_coef=0.1)
    loss, metrics = compute_loss(
        logp,
        logp.clone(),
        torch.tensor([[1.0, 3.0]]),
        torch.ones(1, 2),
        cfg,
        ref_logp=logp - 0.5,
        entropy=torch.tensor([[1.0, 2.0]]),
        rollout_logp=torch.tensor([[-1.0, -3.0]]),
    )
    assert float(loss) == pytest.approx(-3.55)
    assert metrics["pg_loss"] == pytest.approx(-3.5)
    assert metrics["kl"] == pytest.approx(0.5)
    assert metrics["entropy"] == pytest.approx(1.5)
    assert metrics["tis_mean"] == pytest.approx(1.5)
    assert metrics["clip_fraction"] == 0.0
    assert metrics["loss"] == pytest.approx(-3.55)


def test_fork_share_trains_only_the_highest_entropy_tokens_at_full_scale() -> None:
    # Four trained tokens (one padded), entropies [0.1, 2.0, 0.3, 1.0]: fork_share 0.5 keeps the two
    # highest (2.0 and 1.0), each weighted 1 / 0.5, so with logp = old (ratio 1) and token-mean over the
    # 4 tokens: pg = -(3 * 2 + 4 * 2) / 4 = -3.5; the low-entropy tokens get no gradient.
    logp = torch.tensor([[-1.0, -2.0, -0.5, -0.2, -9.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 3.0, 2.0, 4.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    entropy = torch.tensor([[0.1, 2.0, 0.3, 1.0, 5.0]])  # the padded token's entropy is not a candidate
    loss, metrics = compute_loss(logp, logp.detach().clone(), adv, mask, AlgoConfig(fork_share=0.5), entropy=entropy)
    assert loss.item() == pytest.approx(-3.5) and metrics["fork_tokens"] == pytest.approx(0.5)
    loss.backward()
    assert logp.grad is not None and logp.grad[0, [0, 2, 4]].abs().sum() == 0
    assert torch.count_nonzero(logp.grad[0, [1, 3]]) == 2
    every, _ = compute_loss(logp, logp.detach().clone(), adv, mask, AlgoConfig(fork_share=1.0), entropy=entropy)
    plain, _ = compute_loss(logp, logp.detach().clone(), adv, mask, AlgoConfig(), entropy=entropy)
    assert every.item() == pytest.approx(plain.item())  # a share of 1 trains every token, as without it
    with pytest.raises(ValueError, match="entropy"):
        compute_loss(logp, logp.detach(), adv, mask, AlgoConfig(fork_share=0.5))


def test_compute_loss_kl_in_reward_leaves_the_loss_alone() -> None:
    logp, old, adv, mask = _random(8)
    base, _ = compute_loss(logp, old, adv, mask, AlgoConfig())
    cfg = AlgoConfig(kl_coef=0.5, kl_in_reward=True)
    with_ref, metrics = compute_loss(logp, old, adv, mask, cfg, ref_logp=old)
    assert float(with_ref) == pytest.approx(float(base))
    assert metrics["kl"] > 0


def test_compute_loss_needs_ref_logp_for_kl_in_loss() -> None:
    logp, old, adv, mask = _random(9)
    with pytest.raises(ValueError, match="ref_logp"):
        compute_loss(logp, old, adv, mask, AlgoConfig(kl_coef=0.1))


@pytest.mark.parametrize("policy_loss", list(POLICY_LOSSES))
@pytest.mark.parametrize("mode", list(LOSS_AGG))
def test_compute_loss_gradient_accumulation_equals_full_batch(policy_loss: str, mode: str) -> None:
    logp, old, adv, mask = _random(10, B=7, T=10, spread=2e-4 if policy_loss == "gspo" else 0.3)
    gen = torch.Generator().manual_seed(11)
    ref = logp + 0.2 * torch.randn(logp.shape, generator=gen, dtype=torch.float64)
    rollout = old + 0.5 * torch.randn(logp.shape, generator=gen, dtype=torch.float64)
    entropy = torch.rand(logp.shape, generator=gen, dtype=torch.float64)
    cfg = AlgoConfig(
        policy_loss=policy_loss, loss_agg=mode, kl_coef=0.05, entropy_coef=0.01, loss_norm_len=12
    )  # type: ignore[arg-type]

    def run(
        rows: slice, T: int, tokens: float | None, seqs: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        param = logp.clone().requires_grad_()
        ent = (entropy + 0 * param)[rows, :T]  # [b, T] entropy that depends on the parameters
        loss, _ = compute_loss(
            param[rows, :T], old[rows, :T], adv[rows, :T], mask[rows, :T], cfg,
            ref_logp=ref[rows, :T], entropy=ent, rollout_logp=rollout[rows, :T], num_tokens=tokens, num_seqs=seqs,
        )  # fmt: skip
        loss.backward()
        assert param.grad is not None
        return loss.detach(), param.grad

    full_loss, full_grad = run(slice(None), logp.shape[1], None, None)
    tokens, seqs = count_normalisers(mask)
    parts = [run(rows, T, tokens, seqs) for rows, T in _micro_batches(mask)]
    assert float(sum(p[0] for p in parts)) == pytest.approx(float(full_loss), abs=1e-12)
    torch.testing.assert_close(sum(p[1] for p in parts), full_grad, atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------------------------------------------------
# The value head's loss (GAE / PPO with a critic)
# ---------------------------------------------------------------------------------------------------------


def test_value_loss_by_hand_clipped_and_plain() -> None:
    values = torch.tensor([[0.5, 1.0, 9.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.9, 0.0]])
    returns = torch.tensor([[1.0, 0.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = value_loss(values, old, returns, mask, clip=0.2)
    # token 0: unclipped (0.5-1)^2 = 0.25, clipped V = 0 + 0.2 -> (0.2-1)^2 = 0.64 -> max 0.64 -> 0.32
    # token 1: unclipped (1-0)^2 = 1, clipped V = 0.9 + 0.1 -> 1 -> max 1 -> 0.5; token 2 masked
    assert loss[0].tolist() == pytest.approx([0.32, 0.5, 0.0])
    assert float(stats["value_loss"]) == pytest.approx((0.32 + 0.5) / 2)
    assert float(stats["value_clip_fraction"]) == pytest.approx(0.5)
    assert float(stats["value_mean"]) == pytest.approx(0.75)
    loss.sum().backward()
    assert values.grad is not None
    # the clipped term wins on token 0 and is flat in V there (|V - V_old| > clip): no gradient
    assert values.grad[0].tolist() == pytest.approx([0.0, 1.0, 0.0])
    plain, _ = value_loss(values.detach(), old, returns, mask, clip=None)
    assert plain[0].tolist() == pytest.approx([0.125, 0.5, 0.0])


def test_explained_variance() -> None:
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)
    # V = 2R leaves the residual -R, as variable as R itself
    assert explained_variance(2 * returns, returns, mask) == pytest.approx(0.0)
    assert math.isnan(explained_variance(returns, torch.ones_like(returns), mask))


def test_compute_loss_adds_the_weighted_value_loss() -> None:
    cfg = AlgoConfig(advantage="gae", vf_coef=0.5, value_clip=None, tis_cap=None)
    logp = torch.tensor([[-1.0, -2.0]])
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    values = torch.tensor([[0.0, 2.0]])
    returns = torch.tensor([[1.0, 1.0]])
    base, _ = compute_loss(logp, logp, adv, mask, cfg)
    both, stats = compute_loss(logp, logp, adv, mask, cfg, values=values, old_values=values, returns=returns)
    # token-mean of 1/2 (V - R)^2 = (0.5 + 0.5) / 2 = 0.5, weighted 0.5
    assert float(both - base) == pytest.approx(0.25)
    assert stats["value_loss"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="old_values and returns"):
        compute_loss(logp, logp, adv, mask, cfg, values=values)


@pytest.mark.parametrize("cap", [2.0, 3.4, 5.5, 7.0, 9.1])
def test_tis_capped_fraction_counts_every_capped_token(cap: float) -> None:
    # exp(log(cap)) lands just below cap in float32 for some caps (7.0 -> 6.9999995): a token whose
    # weight was capped must still count as capped. Token 0 is over the cap, token 1 is not.
    old = torch.tensor([[math.log(cap) + 1.0, 0.0]])
    rollout = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    cfg = AlgoConfig(tis_cap=cap)
    logp = old.clone().requires_grad_()
    _, metrics = compute_loss(logp, old, torch.ones(1, 2), mask, cfg, rollout_logp=rollout)
    assert metrics["tis_capped_fraction"] == pytest.approx(0.5)


def test_k3_is_bounded_and_a_far_token_cannot_blow_up_the_gradient() -> None:
    # log r = ref - logp. At 0.5 the estimate is exact (r - 1 - log r) with gradient d/dlogp = 1 - r;
    # at 15 it would be e^15 ~ 3.3e6 with a gradient as large: bounded to 10, with no gradient.
    from coderl.rl.kl import K3_BOUND

    logp = torch.zeros(2, requires_grad=True)
    ref = torch.tensor([0.5, 15.0])
    kl = kl_penalty(logp, ref, "k3")
    kl.sum().backward()
    r = math.exp(0.5)
    _close(kl.detach(), [r - 1 - 0.5, K3_BOUND])
    assert logp.grad is not None
    _close(logp.grad, [1 - r, 0.0])
    assert K3_BOUND == 10.0
