"""The trainer's actor on the real default model: packed log-probs against an independent HF forward
and the engine, gradient accumulation, LoRA, checkpoints and weight sync. Tests of the actor's own
bookkeeping (gradient accumulation, score masks, checkpointing, frozen embeddings, master weights, the
value head, the heap hand-back) run on the tiny model (tests/tiny.py): what they compare is two ways of
computing the same thing on whatever model, not what the model computes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from coderl.checkpoint import load_model
from coderl.engine import SamplingParams
from coderl.engine.embedded import EmbeddedEngine
from coderl.errors import ConfigError, ModelError
from coderl.train.actor import Actor, lr_factor
from coderl.train.config import ActorConfig
from coderl.train.forward import micro_batch_groups
from coderl.train.packing import pack, prefix_sources, split_micro_batches
from tests.conftest import hf_logprobs

ANSWERS = [
    "Sure!",
    "def square(x):\n    return x * x\n",
    "A race condition happens when two threads read and write shared state and the result depends on "
    "timing. Wrap the update in `with lock:` so only one thread changes the counter at a time.",
    "git status, git add and git commit.",
]


@pytest.fixture(scope="module")
def batch(chat_prompts: list[list[int]], tokenizer: Any) -> tuple[list[list[int]], list[int]]:
    """Chat prompts with answers of different lengths; scoring starts at each answer."""
    answers = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in ANSWERS]
    sequences = [p + a for p, a in zip(chat_prompts, answers, strict=True)]
    return sequences, [len(p) for p in chat_prompts]


def make_actor(model: Path | None = None, **overrides: Any) -> Actor:
    """An actor on ``model`` (the default model when None), set up."""
    actor = Actor(ActorConfig(device="cpu", seed=0, **overrides), model)
    actor.setup()
    return actor


FP32_ATOL = 5e-5
"""Float32 log-probs of the same math forwarded through different kernels (packed attention against
HF's, one row against many): the summation order follows the CPU's vector width and the blocking,
which moved them up to 1.5e-5 apart on an AVX-512 Xeon. A wrong mask, position or temperature moves
them by 1e-2 or more."""


def nll_loss(sequences: list[list[int]], starts: list[int]) -> Any:
    """-mean logprob over all scored tokens of the batch (a global normaliser, as the loop passes)."""
    total = sum(len(s) - st for s, st in zip(sequences, starts, strict=True))

    def loss_fn(
        indices: list[int], logprobs: list[torch.Tensor], entropy: list[torch.Tensor] | None
    ) -> torch.Tensor:
        return -torch.cat(logprobs).sum() / total

    return loss_fn


def test_micro_batch_split_and_batch_checks() -> None:
    # forwarded tokens are length - 1: [4, 4, 9, 1] against a budget of 8
    assert split_micro_batches([5, 5, 10, 2], 8) == [[0, 1], [2], [3]]
    # padded cost = rows x longest row: [4, 1] costs 8, adding a 4 costs 12
    assert split_micro_batches([5, 2, 5], 8, padded=True) == [[0, 1], [2]]
    # a sequence sharing 3 tokens with the one before costs 3 less, but only in that one's group
    assert split_micro_batches([5, 5, 5], 8, sources=[(-1, 0), (0, 3), (1, 3)]) == [[0, 1, 2]]
    assert split_micro_batches([5, 5, 5], 5, sources=[(-1, 0), (0, 3), (1, 3)]) == [[0, 1], [2]]
    # a prefix whose source is in an earlier micro-batch is forwarded again (counted whole)
    assert split_micro_batches([5, 5, 5], 5, sources=[(-1, 0), (-1, 0), (0, 3)]) == [[0], [1], [2]]
    actor = Actor(ActorConfig(device="cpu"))
    with pytest.raises(ConfigError, match="start"):
        actor.score([[1, 2, 3]], [0], 1.0)
    with pytest.raises(ConfigError, match="starts"):
        actor.score([[1, 2, 3]], [1, 2], 1.0)


def test_lr_schedule_warmup_then_cosine() -> None:
    with pytest.raises(ValueError, match="total_steps"):
        ActorConfig(lr_schedule="cosine")
    cfg = ActorConfig(lr_schedule="cosine", warmup_steps=2, total_steps=6, min_lr_ratio=0.0)
    factor = lr_factor(cfg)
    assert [factor(s) for s in range(7)] == pytest.approx(
        [0.5, 1.0, 1.0, 0.5 + 0.5 * math.cos(math.pi / 4), 0.5, 0.5 - 0.5 * math.cos(math.pi / 4), 0.0]
    )
    linear = lr_factor(ActorConfig(lr_schedule="linear", total_steps=4, min_lr_ratio=0.5))
    assert [linear(s) for s in range(5)] == pytest.approx([1.0, 0.875, 0.75, 0.625, 0.5])


@pytest.mark.slow
@pytest.mark.parametrize("budget", [4096, 100])
def test_packed_logprobs_match_hf_forward(batch: Any, hf_model: Any, budget: int) -> None:
    sequences, starts = batch
    actor = make_actor(micro_batch_tokens=budget)
    assert len(micro_batch_groups(actor.cfg, sequences, starts)) == (1 if budget == 4096 else 3)  # [[0, 1], [2], [3]]
    for temperature in (1.0, 0.7):
        scored = actor.score(sequences, starts, temperature)
        for seq, start, s in zip(sequences, starts, scored, strict=True):
            expected = torch.tensor(hf_logprobs(hf_model, seq[:start], seq[start:], temperature))
            assert s.logprobs.dtype == torch.float32 and s.logprobs.shape == expected.shape
            assert s.entropy is None
            assert torch.allclose(s.logprobs, expected, atol=FP32_ATOL, rtol=0)


@pytest.mark.slow
def test_padded_path_and_entropy_match(batch: Any, hf_model: Any) -> None:
    sequences, starts = batch
    packed = make_actor().score(sequences, starts, 0.7, with_entropy=True)
    # one sequence per padded batch: HF's plain forward
    alone = make_actor(packing=False, micro_batch_tokens=100).score(sequences, starts, 0.7)
    # all four in one padded batch: HF switches to a masked attention kernel, which rounds differently
    padded = make_actor(packing=False, micro_batch_tokens=400).score(
        sequences, starts, 0.7, with_entropy=True
    )
    for seq, start, p, a, q in zip(sequences, starts, packed, alone, padded, strict=True):
        assert torch.allclose(p.logprobs, a.logprobs, atol=FP32_ATOL, rtol=0)
        assert torch.allclose(p.logprobs, q.logprobs, atol=5e-5, rtol=0)
        assert p.entropy is not None and q.entropy is not None
        assert torch.allclose(p.entropy, q.entropy, atol=1e-4, rtol=0)
        with torch.no_grad():
            logits = hf_model(torch.tensor([seq])).logits[0, start - 1 : -1] / 0.7  # [n, V]
        probs = torch.softmax(logits, dim=-1)  # [n, V]
        expected = -(probs * torch.log_softmax(logits, dim=-1)).sum(-1)  # [n]
        assert torch.allclose(p.entropy, expected, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_logprobs_match_the_engine(
    engine: EmbeddedEngine, chat_prompts: list[list[int]], temperature: float
) -> None:
    actor = make_actor(micro_batch_tokens=256)
    params = SamplingParams(max_tokens=24, temperature=temperature, seed=11)
    completions = [await engine.generate(p, params) for p in chat_prompts[:3]]
    sequences = [p + c.token_ids for p, c in zip(chat_prompts, completions, strict=False)]
    scored = actor.score(sequences, [len(p) for p in chat_prompts[:3]], temperature)
    diffs = torch.cat(
        [s.logprobs - torch.tensor(c.logprobs) for s, c in zip(scored, completions, strict=True)]
    ).abs()
    assert diffs.mean() < 1e-4, diffs.mean()


@pytest.mark.slow
def test_train_step_lowers_the_loss(batch: Any, hf_model: Any) -> None:
    sequences, starts = batch
    actor = make_actor(  # unshared: every token forwarded (the chat template's system prompt is common)
        lr=1e-4,
        micro_batch_tokens=100,
        lr_schedule="linear",
        total_steps=10,
        reference=True,
        share_prefix=False,
    )
    loss_fn = nll_loss(sequences, starts)
    first = actor.train_step(sequences, starts, 1.0, loss_fn, with_entropy=True)
    second = actor.train_step(sequences, starts, 1.0, loss_fn)
    assert second["loss"] < first["loss"]
    assert actor.step == 2
    assert first["lr"] == pytest.approx(1e-4) and second["lr"] == pytest.approx(0.9e-4)
    assert first["micro_batches"] > 1 and first["skipped"] == 0.0
    assert first["trained_tokens"] == sum(len(s) - st for s, st in zip(sequences, starts, strict=True))
    assert first["tokens"] == sum(len(s) - 1 for s in sequences)
    assert first["grad_norm"] > 0 and first["tokens_per_s"] > 0 and first["step_s"] > 0
    # the frozen reference copy still scores as the base model
    seq, start = sequences[1], starts[1]
    reference = actor.score([seq], [start], 1.0, reference=True)[0].logprobs
    assert torch.allclose(reference, torch.tensor(hf_logprobs(hf_model, seq[:start], seq[start:])), atol=FP32_ATOL)
    with pytest.raises(ConfigError, match="reference"):
        make_actor().score([seq], [start], 1.0, reference=True)


def test_a_phase_with_frozen_embeddings_leaves_the_vocabulary_rows_alone_and_the_next_trains_them(
    batch: Any, tiny_model: Path
) -> None:
    sequences, starts = batch
    actor = make_actor(tiny_model, lr=1e-3, micro_batch_tokens=512)
    model = actor.model
    embedding = model.get_input_embeddings().weight
    assert model.config.tie_word_embeddings and model.get_output_embeddings().weight is embedding
    layer = model.model.layers[0].mlp.down_proj.weight
    actor.reset_optimizer(lr=1e-3, frozen_embeddings=True)
    optimized = {id(p) for g in actor.optimizer.param_groups for p in g["params"]}  # type: ignore[union-attr]
    assert id(embedding) not in optimized and id(layer) in optimized
    before_embedding, before_layer = embedding.detach().clone(), layer.detach().clone()
    actor.train_step(sequences, starts, 1.0, nll_loss(sequences, starts))
    assert embedding.grad is None and torch.equal(embedding, before_embedding)  # no moments, no update
    assert not torch.equal(layer, before_layer)
    actor.reset_optimizer()  # the next phase trains the embedding again
    optimized = {id(p) for g in actor.optimizer.param_groups for p in g["params"]}  # type: ignore[union-attr]
    assert embedding.requires_grad and id(embedding) in optimized
    actor.train_step(sequences, starts, 1.0, nll_loss(sequences, starts))
    assert not torch.equal(embedding, before_embedding)


@pytest.mark.slow
def test_gradient_accumulation_equals_one_micro_batch(batch: Any, tiny_model: Path) -> None:
    sequences, starts = [batch[0][i] for i in (0, 3, 1)], [batch[1][i] for i in (0, 3, 1)]
    actor = make_actor(tiny_model, micro_batch_tokens=4096, share_prefix=False)  # the token counts below are unshared
    # In float32, sums over a different set of rows round differently: layer-norm weight gradients
    # (sums over every token, with cancellation) then differ by ~1e-4 relative. float64 isolates the
    # accumulation logic from that rounding; the logprobs themselves are still taken in float32.
    actor.model.double()
    loss_fn = nll_loss(sequences, starts)
    whole = actor.compute_grads(sequences, starts, 1.0, loss_fn)
    one = {n: p.grad.clone() for n, p in actor.trainable_parameters() if p.grad is not None}
    actor.optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
    actor.cfg.micro_batch_tokens = 80  # [[0, 3], [1]]: 32 + 43 forwarded tokens, then 52
    split = actor.compute_grads(sequences, starts, 1.0, loss_fn)
    assert whole["micro_batches"] == 1 and split["micro_batches"] == 2
    assert split["loss"] == pytest.approx(whole["loss"], abs=1e-6)
    accumulated = {n: p.grad for n, p in actor.trainable_parameters() if p.grad is not None}
    assert accumulated.keys() == one.keys() == {n for n, _ in actor.trainable_parameters()}
    worst = max(float((accumulated[n] - g).abs().max()) for n, g in one.items())
    assert worst < 1e-7


@pytest.mark.slow
@pytest.mark.parametrize("packing", [True, False])
def test_score_masks_project_only_the_kept_tokens_with_the_same_gradient(
    batch: Any, packing: bool, tiny_model: Path
) -> None:
    sequences, starts = batch[0][:3], batch[1][:3]
    spans = [len(s) - st for s, st in zip(sequences, starts, strict=True)]
    masks = [[(i + j) % 3 != 0 for j in range(n)] for i, n in enumerate(spans)]
    kept = [torch.tensor(m, dtype=torch.float32) for m in masks]

    def masked_nll(indices: list[int], logprobs: list[torch.Tensor], *_: object) -> torch.Tensor:
        seen.append([lp.detach().clone() for lp in logprobs])
        return -torch.stack([(lp * kept[i]).sum() for i, lp in zip(indices, logprobs, strict=True)]).sum()

    grads, losses = [], []
    for score_masks in (None, [[int(b) for b in m] for m in masks]):
        seen: list[list[torch.Tensor]] = []
        actor = make_actor(tiny_model, packing=packing)
        actor.model.double()  # rounding of a different row set aside, the gradients must be the same
        losses.append(
            actor.compute_grads(sequences, starts, 1.0, masked_nll, score_masks=score_masks)["loss"]
        )
        grads.append({n: p.grad for n, p in actor.trainable_parameters() if p.grad is not None})
    assert losses[1] == pytest.approx(losses[0], rel=1e-9)
    assert grads[0].keys() == grads[1].keys()
    assert max(float((grads[1][n] - g).abs().max()) for n, g in grads[0].items()) < 1e-9
    last = [lp for group in seen for lp in group]
    assert all(bool((lp[~torch.tensor(m)] == 0).all()) for lp, m in zip(last, masks, strict=True))
    assert all(bool((lp[torch.tensor(m)] < 0).all()) for lp, m in zip(last, masks, strict=True))
    with pytest.raises(ConfigError, match="score_masks"):
        make_actor(tiny_model).compute_grads(sequences, starts, 1.0, masked_nll, score_masks=[[1]] * 3)


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_gradients(batch: Any, tiny_model: Path) -> None:
    sequences, starts = batch[0][:2], batch[1][:2]
    grads = []
    for checkpointing in (False, True):
        actor = make_actor(tiny_model, gradient_checkpointing=checkpointing)
        actor.compute_grads(sequences, starts, 1.0, nll_loss(sequences, starts))
        grads.append({n: p.grad for n, p in actor.trainable_parameters()})
    assert all(torch.equal(grads[0][n], g) for n, g in grads[1].items())


@pytest.mark.slow
def test_lora_trains_adapters_only_and_syncs_merged_weights(
    batch: Any, hf_model: Any, checkpoint: Path
) -> None:
    sequences, starts = batch
    actor = make_actor(lora_rank=8, lora_alpha=16, lr=2e-3, micro_batch_tokens=200)
    trainable = actor.trainable_parameters()
    assert trainable and all(".lora_" in n for n, _ in trainable)
    frozen = {n: p.detach().clone() for n, p in actor.model.named_parameters() if not p.requires_grad}
    for _ in range(3):
        actor.train_step(sequences, starts, 1.0, nll_loss(sequences, starts))
    assert all(torch.equal(p, frozen[n]) for n, p in actor.model.named_parameters() if not p.requires_grad)

    policy = actor.score(sequences, starts, 1.0)
    reference = actor.score(sequences, starts, 1.0, reference=True)
    for seq, start, pol, ref in zip(sequences, starts, policy, reference, strict=True):
        base = torch.tensor(hf_logprobs(hf_model, seq[:start], seq[start:]))
        assert torch.allclose(ref.logprobs, base, atol=FP32_ATOL, rtol=0)
        assert not torch.allclose(pol.logprobs, base, atol=1e-3)  # the adapters did learn something

    state = actor.state_dict_for_engine()
    expected = hf_model.state_dict()
    assert state.keys() == expected.keys()
    assert all(state[k].shape == expected[k].shape for k in expected)
    fresh = load_model(checkpoint, torch.float32, "cpu")
    fresh.load_state_dict(state)
    for seq, start, pol in zip(sequences, starts, policy, strict=True):
        synced = torch.tensor(hf_logprobs(fresh, seq[:start], seq[start:]))
        assert torch.allclose(pol.logprobs, synced, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.slow
def test_lora_in_the_last_layers_only_trains_those_and_keeps_the_gradients_of_the_full_backward(
    batch: Any,
) -> None:
    sequences, starts = batch[0][:2], batch[1][:2]
    top = make_actor(lora_rank=4, lora_layers=2, lr=1e-3)
    layers = top.model.config.num_hidden_layers
    names = [n for n, _ in top.trainable_parameters()]
    assert names and {int(n.split(".layers.")[1].split(".")[0]) for n in names} == {layers - 2, layers - 1}
    every = make_actor(lora_rank=4, lr=1e-3)  # LoRA's B starts at 0: no adapter changes the forward yet
    same = dict(every.trainable_parameters())
    with torch.no_grad():
        for name, param in top.trainable_parameters():
            same[name].copy_(param)  # the top layers' adapters identical in both
    loss = nll_loss(sequences, starts)
    top.compute_grads(sequences, starts, 1.0, loss)
    every.compute_grads(sequences, starts, 1.0, loss)
    for name, param in top.trainable_parameters():  # the short backward gives the top adapters the same gradient
        assert param.grad is not None, name  # A's gradient is 0 while B is 0; B's is not
        assert ".lora_A." in name or float(param.grad.abs().max()) > 0, name
        assert torch.allclose(param.grad, same[name].grad, atol=1e-6), name
    with pytest.raises(ConfigError, match=r"actor\.lora_layers: got 99"):
        make_actor(lora_rank=4, lora_layers=99)


def test_a_checkpoint_of_a_fresh_optimizer_leaves_the_next_update_as_it_was(batch: Any, tmp_path: Path, tiny_model: Path) -> None:
    """torch's full optimizer-state gather creates missing state with an lr=0 step (AdamW's step 1):
    saved right after reset_optimizer (the trainer saves step 0 after the warm start), the phase's first
    update would then be bias-corrected as a second one, about 0.74x its size."""
    sequences, starts = batch
    first = (sequences[:2], starts[:2])
    actors = [Actor(ActorConfig(device="cpu", seed=0, lr=1e-3), tiny_model) for _ in range(3)]
    for actor in actors:
        actor.setup()
    actors[1].save(tmp_path / "fresh")
    assert not actors[1].optimizer.state  # type: ignore[union-attr]
    actors[2].load(tmp_path / "fresh")
    for actor in actors:
        actor.train_step(*first, 1.0, nll_loss(*first))
    steps = {float(st["step"]) for st in actors[2].optimizer.state.values()}  # type: ignore[union-attr]
    assert steps == {1.0}
    plain = dict(actors[0].trainable_parameters())
    for other in actors[1:]:
        for name, p in other.trainable_parameters():
            assert torch.equal(p, plain[name]), name


@pytest.mark.parametrize(("lora_rank", "exp_avg_dtype"), [(0, "float32"), (4, "float32"), (0, "bfloat16")])
def test_save_load_resumes_bit_for_bit(
    batch: Any, tmp_path: Path, lora_rank: int, exp_avg_dtype: str, tiny_model: Path
) -> None:
    """On the tiny model (tests/tiny.py): what is checked is that a checkpoint holds every state."""
    sequences, starts = batch
    first, second = (sequences[:2], starts[:2]), (sequences[2:], starts[2:])
    cfg: dict[str, Any] = dict(
        exp_avg_dtype=exp_avg_dtype,
        lora_rank=lora_rank,
        lora_dropout=0.1 if lora_rank else 0.0,
        lr=1e-3,
        warmup_steps=3,
        micro_batch_tokens=100,
    )
    actor = Actor(ActorConfig(device="cpu", seed=0, **cfg), tiny_model)
    actor.setup()
    actor.train_step(*first, 1.0, nll_loss(*first))
    if lora_rank:
        actor.save(tmp_path / "ckpt")  # a checkpoint already there is replaced
    actor.save(tmp_path / "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    straight = actor.train_step(*second, 1.0, nll_loss(*second))

    resumed = Actor(ActorConfig(device="cpu", seed=123, **cfg), tiny_model)  # another seed: all from the file
    resumed.load(tmp_path / "ckpt")
    assert resumed.step == 1
    moments = [st["exp_avg"].dtype for st in resumed.optimizer.state.values()]  # type: ignore[union-attr]
    assert moments and set(moments) == {getattr(torch, exp_avg_dtype)}  # kept as chosen through the file
    again = resumed.train_step(*second, 1.0, nll_loss(*second))
    assert again["lr"] == straight["lr"] and again["grad_norm"] == straight["grad_norm"]
    ours = dict(actor.trainable_parameters())
    for name, p in resumed.trainable_parameters():
        assert torch.equal(p, ours[name]), name


@pytest.mark.slow
async def test_engine_matches_actor_after_weight_sync(
    engine: EmbeddedEngine, batch: Any, chat_prompts: list[list[int]], checkpoint: Path
) -> None:
    sequences, starts = batch
    actor = make_actor(lr=1e-4, micro_batch_tokens=400)
    for _ in range(2):
        actor.train_step(sequences, starts, 1.0, nll_loss(sequences, starts))
    try:
        await engine.update_weights(actor.state_dict_for_engine())
        params = SamplingParams(max_tokens=16, temperature=0.8, seed=3)
        completions = [await engine.generate(p, params) for p in chat_prompts[:2]]
        scored = actor.score(
            [p + c.token_ids for p, c in zip(chat_prompts, completions, strict=False)],
            [len(p) for p in chat_prompts[:2]],
            0.8,
        )
        diffs = torch.cat(
            [s.logprobs - torch.tensor(c.logprobs) for s, c in zip(scored, completions, strict=True)]
        ).abs()
        assert diffs.mean() < 1e-4, diffs.mean()
    finally:
        await engine.update_weights(load_model(checkpoint, torch.float32, "cpu").state_dict())


@pytest.mark.slow
def test_bfloat16_keeps_float32_master_weights(batch: Any, tiny_model: Path) -> None:
    sequences, starts = batch
    sequences, starts = sequences[:2], starts[:2]
    exact = make_actor(tiny_model).score(sequences, starts, 1.0)
    actor = make_actor(tiny_model, dtype="bfloat16", reference=True, lr=1e-4)
    approx = actor.score(sequences, starts, 1.0, with_entropy=True)
    ref_before = actor.score(sequences, starts, 1.0, reference=True)
    for e, a in zip(exact, approx, strict=True):
        assert (
            a.logprobs.dtype == torch.float32 and a.entropy is not None and a.entropy.dtype == torch.float32
        )
        assert (a.logprobs - e.logprobs).abs().mean() < 0.1
    metrics = actor.train_step(sequences, starts, 1.0, nll_loss(sequences, starts))
    assert math.isfinite(metrics["grad_norm"]) and metrics["skipped"] == 0.0
    assert all(p.dtype == torch.float32 for _, p in actor.trainable_parameters())
    ref_after = actor.score(sequences, starts, 1.0, reference=True)  # the frozen bf16 copy did not move
    assert all(torch.equal(r.logprobs, b.logprobs) for r, b in zip(ref_after, ref_before, strict=True))


def test_value_head_scores_trains_and_checkpoints(batch: Any, tmp_path: Path, tiny_model: Path) -> None:
    sequences, starts = batch[0][:2], batch[1][:2]  # the two short answers
    # the tiny model's hidden states are small: its head needs a larger step (3e-3) to learn in five
    cfg = ActorConfig(device="cpu", seed=0, lr=1e-5, value_lr=3e-3)
    actor = Actor(cfg, tiny_model, value_head=True)
    actor.setup()
    scored = actor.score(sequences, starts, 1.0, with_values=True)
    for s, seq, st in zip(scored, sequences, starts, strict=True):
        assert s.values is not None and s.values.shape == (len(seq) - st,)
        assert torch.all(s.values == 0)  # zero-initialised head: V = 0, advantages = returns at first
    targets = [torch.full((len(s) - st,), 0.5) for s, st in zip(sequences, starts, strict=True)]
    total = sum(len(t) for t in targets)

    def value_mse(indices: list[int], lps: Any, ents: Any, values: list[torch.Tensor]) -> torch.Tensor:
        errors = [((v - targets[i]) ** 2).sum() for i, v in zip(indices, values, strict=True)]
        return torch.stack(errors).sum() / total

    losses = [actor.train_step(sequences, starts, 1.0, value_mse)["loss"] for _ in range(5)]
    assert losses[0] == pytest.approx(0.25) and losses[-1] < 0.05, losses  # the head learned the target
    after = torch.cat(
        [s.values for s in actor.score(sequences, starts, 1.0, with_values=True) if s.values is not None]
    )
    assert not any("value" in name for name in actor.state_dict_for_engine())  # never synced to the engine

    actor.save(tmp_path / "ckpt")
    resumed = Actor(cfg.model_copy(update={"seed": 1}), tiny_model, value_head=True)
    resumed.load(tmp_path / "ckpt")
    again = resumed.score(sequences, starts, 1.0, with_values=True)
    assert torch.equal(torch.cat([s.values for s in again if s.values is not None]), after)
    with pytest.raises(ModelError, match="value head"):
        Actor(ActorConfig(device="cpu"), tiny_model).load(tmp_path / "ckpt")
    with pytest.raises(ConfigError, match="value_head=True"):
        resumed.score(sequences, starts, 1.0, with_values=True, reference=True)
    with pytest.raises(ConfigError, match="packing=true"):
        Actor(ActorConfig(device="cpu", packing=False), tiny_model, value_head=True).setup()


def test_pack_lays_a_shared_prompt_out_once() -> None:
    prompt = list(range(100, 120))  # 20 tokens: the first 19 (unscored) can be shared
    seqs = [prompt + [1, 2], prompt + [3], list(range(200, 230)) + [4], prompt + [5, 6]]
    starts = [20, 20, 30, 20]
    # each reuses the longest prefix it has with one before it (past an unrelated one, too)
    assert prefix_sources(seqs, starts) == [(-1, 0), (0, 19), (-1, 0), (1, 19)]
    batch = pack(seqs, starts, torch.device("cpu"), share_prefix=True)
    shared = ((0, 19),)
    assert batch.spans == [(0, 21, None), (21, 22, shared), (22, 52, None), (52, 54, shared)]
    assert batch.positions[21:22].tolist() == [19] and batch.positions[52:54].tolist() == [19, 20]
    assert batch.num_tokens == 21 + 1 + 30 + 2
    assert batch.input_ids[batch.scored_rows].tolist() == [119, 1, 119, 229, 119, 5]  # rows predicting 1..6
    assert batch.targets.tolist() == [1, 2, 3, 4, 5, 6] and batch.counts == [2, 1, 1, 2]


def test_samples_of_different_tasks_share_their_common_system_prompt() -> None:
    system = list(range(100, 120))  # 20 tokens every prompt starts with
    a, b = system + [1, 2, 3], system + [4, 5]  # two tasks' prompts
    seqs = [a + [7], a + [8, 9], b + [7], b + [6], system[:10] + [0] * 12 + [5]]
    starts = [23, 23, 22, 22, 23]
    # a GRPO group shares its whole prompt, the next task the system prompt, then its own prompt
    assert prefix_sources(seqs, starts) == [(-1, 0), (0, 22), (1, 20), (2, 21), (-1, 0)]
    tasks = [a + [7], b + [7], system + [9, 9, 9, 9] + [8]]
    assert prefix_sources(tasks, [23, 22, 24]) == [(-1, 0), (0, 20), (1, 20)]  # the system prompt
    batch = pack(tasks, [23, 22, 24], torch.device("cpu"), share_prefix=True)
    assert batch.num_tokens == 20 + 3 + 2 + 4  # the prefix once, then what each adds (less its last token)
    assert batch.targets.tolist() == [7, 7, 8] and batch.input_ids[batch.scored_rows].tolist() == [3, 5, 9]
    assert prefix_sources([a + [7], a[:15] + [0] * 8 + [7]], [23, 23]) == [(-1, 0), (-1, 0)]  # under the minimum


def rewritten_rollout(system: list[int], turns: list[tuple[list[int], list[int]]], reminder: list[int]) -> tuple[list[list[int]], list[int]]:
    """The sequences of one rollout whose agent adds ``reminder`` to its newest user message and removes
    it on the next turn (aider): turn k's prompt is the history so far, the k-th user message and the
    reminder; each turn is a sequence of its own. Returns the sequences and their scoring starts."""
    seqs, starts, history = [], [], list(system)
    for user, reply in turns:
        prompt = history + user + reminder
        seqs.append(prompt + reply)
        starts.append(len(prompt))
        history += user + reply
    return seqs, starts


def test_the_sequences_of_a_rollout_with_a_rewritten_history_forward_the_history_once() -> None:
    system, reminder = list(range(100, 140)), [7, 7, 7]
    turns = [(list(range(200 + 10 * k, 208 + 10 * k)), list(range(500 + 10 * k, 506 + 10 * k))) for k in range(4)]
    seqs, starts = rewritten_rollout(system, turns, reminder)
    # each turn reuses the previous one up to its reminder: 40 + 8, then 40 + 14 + 8, ...
    assert prefix_sources(seqs, starts) == [(-1, 0), (0, 48), (1, 62), (2, 76)]
    batch = pack(seqs, starts, torch.device("cpu"), share_prefix=True)
    unshared = sum(len(q) - 1 for q in seqs)
    assert batch.num_tokens == unshared - (48 + 62 + 76)
    # the last turn's prefix is laid out in three places: turn 1's rows, then turn 2's and turn 3's own
    assert batch.spans[3][2] is not None and len(batch.spans[3][2]) == 3
    assert sum(b - a for a, b in batch.spans[3][2]) == 76
    plain = pack(seqs, starts, torch.device("cpu"))
    assert batch.targets.tolist() == plain.targets.tolist()
    assert batch.input_ids[batch.scored_rows].tolist() == plain.input_ids[plain.scored_rows].tolist()
    assert batch.positions[batch.scored_rows].tolist() == plain.positions[plain.scored_rows].tolist()


@pytest.mark.slow
def test_shared_prefix_forward_equals_the_unshared_one(chat_prompts: list[list[int]], tokenizer: Any) -> None:
    answers = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in ANSWERS]
    prompt = chat_prompts[2]
    sequences = [prompt + a for a in answers] + [chat_prompts[0] + answers[1]]
    starts = [len(prompt)] * len(answers) + [len(chat_prompts[0])]
    # and a rollout whose history was rewritten each turn: prefixes laid out over several segments
    reminder = tokenizer("Reply with one command.", add_special_tokens=False)["input_ids"]
    user = [tokenizer(q, add_special_tokens=False)["input_ids"] for q in ("Then?", "And now?", "Last one.")]
    rollout, rollout_starts = rewritten_rollout(chat_prompts[1], list(zip(user, answers, strict=False)), reminder)
    assert len(rollout) == 3 and [n for _, n in prefix_sources(rollout, rollout_starts)][1:] == [
        len(chat_prompts[1]) + len(user[0]),
        len(chat_prompts[1]) + len(user[0]) + len(answers[0]) + len(user[1]),
    ]
    sequences, starts = sequences + rollout, starts + rollout_starts
    shared, plain = make_actor(share_prefix=True), make_actor(share_prefix=False)
    for a, b in zip(shared.score(sequences, starts, 1.0), plain.score(sequences, starts, 1.0), strict=True):
        assert torch.allclose(a.logprobs, b.logprobs, atol=FP32_ATOL, rtol=0)
    loss = nll_loss(sequences, starts)
    fewer = shared.compute_grads(sequences, starts, 1.0, loss)
    full = plain.compute_grads(sequences, starts, 1.0, loss)
    assert fewer["tokens"] < full["tokens"] - 2 * (
        len(prompt) - 1
    )  # the prompt went through once, not 4 times
    grads = dict(plain.trainable_parameters())
    for name, p in shared.trainable_parameters():
        assert p.grad is not None and grads[name].grad is not None
        assert torch.allclose(p.grad, grads[name].grad, atol=1e-5, rtol=1e-3), name


def test_a_step_hands_the_heap_back_after_each_micro_batch_and_after_the_optimizer(
    batch: Any, monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    sequences, starts = [batch[0][i] for i in (0, 3, 1)], [batch[1][i] for i in (0, 3, 1)]
    actor = make_actor(tiny_model, micro_batch_tokens=80, share_prefix=False, dtype="bfloat16")  # two micro-batches
    calls: list[int] = []
    monkeypatch.setattr("coderl.train.actor.release_free_memory", lambda: calls.append(1))
    metrics = actor.train_step(sequences, starts, 1.0, nll_loss(sequences, starts))
    assert metrics["micro_batches"] == 2 and len(calls) == 3
    with actor._require().autocast():  # no cached bf16 copy of every weight for the whole forward
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_cache_enabled()
