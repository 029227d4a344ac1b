"""GRPO on a coding task, in one page: sample a group, grade it, compute advantages, update, sync.

`coderl train` does the same with more care (checkpoints, resume, validation, every algorithm in
coderl.rl, checks on every batch); this file shows the idea with coderl's parts and nothing hidden.

    python examples/minimal_grpo.py --steps 3

Runs on the CPU in a few minutes: SmolLM2-135M-Instruct on the embedded engine, the swe agent in a
bubblewrap sandbox, one bundled warm-up task.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import torch

from coderl.agents import get_loop
from coderl.agents.baseline import BaselineCache
from coderl.chat import ChatFormat
from coderl.checkpoint import load_tokenizer, resolve_checkpoint
from coderl.config import Config
from coderl.engine import create_engine
from coderl.rollout.context import ContextFactory
from coderl.tasks import grade, load_tasks
from coderl.train.actor import Actor
from coderl.train.config import ActorConfig
from coderl.types import Trajectory

# The environment opens each turn with a bash call and the model writes the command (mask 0 for the
# opener, so it is never trained on): a 135M model rarely writes a valid tool call unaided.
PREFIX = '<tool_call>\n{"name": "bash", "arguments": {"command": "'
FORMAT_BONUS = 0.5  # reward for well-formed turns, so there is something to learn before a task is solved


def grpo_update(
    actor: Actor, trajs: list[Trajectory], adv: torch.Tensor, temperature: float
) -> dict[str, float]:
    """One optimizer step: loss = -sum over sampled tokens of A_i * ratio_t / (tokens in the batch)."""
    masks = [torch.tensor(t.response_mask, dtype=torch.float32) for t in trajs]  # G x [T_i]
    n_tokens = float(sum(m.sum() for m in masks))
    mismatch = 0.0

    def loss_fn(indices: list[int], logprobs: list[torch.Tensor], _entropy: object) -> torch.Tensor:
        nonlocal mismatch
        loss = torch.zeros(())
        for i, logp in zip(indices, logprobs, strict=True):  # logp [T_i]: the trainer's log-probs
            ratio = torch.exp(logp - logp.detach())  # [T_i] = 1, but carries the gradient of log pi
            loss = loss - (adv[i] * ratio * masks[i]).sum() / n_tokens
            sampled = torch.tensor(trajs[i].logprobs)  # [T_i] what the engine reported when sampling
            mismatch += float(((logp.detach() - sampled).abs() * masks[i]).sum()) / n_tokens
        return loss

    sequences = [t.prompt_ids + t.response_ids for t in trajs]
    starts = [len(t.prompt_ids) for t in trajs]  # the actor scores response_ids only
    stats = actor.train_step(sequences, starts, temperature, loss_fn)
    return {**stats, "mismatch": mismatch}


async def main(
    steps: int, group_size: int, task_id: str, max_turns: int = 3, max_tokens: int = 48, model: Path | None = None
) -> None:
    cfg = Config.model_validate(
        {"rollout": {"agent": "swe", "max_turns": max_turns, "max_tokens": max_tokens, "response_prefix": PREFIX}}
        | ({"model": {"path": str(model)}} if model is not None else {})
    )
    task = load_tasks(f"bundled:{task_id}")[0]
    # 1. The policy twice: the engine samples, the actor (a Hugging Face model) learns.
    engine = create_engine(cfg.engine, cfg.model, seed=0)
    await engine.start()
    actor = Actor(ActorConfig(lr=1e-5, device="cpu"), model)
    actor.setup()
    chat = ChatFormat(load_tokenizer(resolve_checkpoint(model)))
    contexts = ContextFactory(cfg.rollout, cfg.sandbox, chat)  # engine, sampling, limits, sandboxes
    baselines = BaselineCache()  # each task snapshot with its starting state committed to git, once
    try:
        for step in range(1, steps + 1):
            # 2. Rollout: G samples of the same task, each a token-exact multi-turn trajectory.
            trajs: list[Trajectory] = await asyncio.gather(
                *(get_loop("swe").run(task, contexts(engine, f"{task.id}#{step}", baselines)) for _ in range(group_size))
            )
            # 3. Reward: the task's hidden tests decide; plus the format bonus.
            rewards = []
            for t in trajs:
                tests = (await grade(task, t.patch)).reward
                well_formed = 1 - t.metrics["format_errors"] / max(t.num_turns, 1)
                rewards.append(tests + FORMAT_BONUS * well_formed)
            # 4. GRPO advantage: each sample's reward against its group, A_i = (r_i - mean) / (std + eps).
            r = torch.tensor(rewards)  # [G]
            adv = (r - r.mean()) / (r.std() + 1e-6)  # [G]
            # 5. Update: policy gradient on the tokens the model sampled (mask 1) only.
            stats = grpo_update(actor, trajs, adv, cfg.rollout.temperature)
            # 6. Sync: the engine samples from the new weights from now on (in process, no disk).
            await engine.update_weights(actor.state_dict_for_engine())
            print(
                f"step {step}: rewards {[round(x, 2) for x in rewards]}  grad_norm {stats['grad_norm']:.3f}  "
                f"|rollout - trainer logprob| {stats['mismatch']:.1e}"
            )
    finally:
        baselines.close()
        await engine.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--task", default="collkit-001", help="a bundled task id (coderl tasks list)")
    parser.add_argument("--max-turns", type=int, default=3, help="model calls per rollout")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per model call")
    parser.add_argument("--model", type=Path, default=None, help="a model folder (default: the default model)")
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.group_size, args.task, args.max_turns, args.max_tokens, args.model))
