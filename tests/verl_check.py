"""coderl's registered agent loop run through verl's own code, on CPU, with a server client backed by
coderl's embedded engine (run by tests/test_verl_loop.py with a Python that has verl installed):

    python -m tests.verl_check WORKDIR [VERL OVERRIDES TO COMPOSE ...]

It composes verl's own ``ppo_trainer`` config, writes a dataset with ``coderl tasks convert --format
verl``, reads it with verl's ``RLHFDataset``, loads the agent-loop YAML as verl's worker does,
instantiates the class with ``hydra.utils.instantiate`` and verl's wrappers, runs one sample and
pads it with verl's ``AgentLoopWorker._agent_loop_postprocess``. It checks the output is token-exact
and prints a JSON summary for the test to check the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hydra
import torch
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from coderl.checkpoint import load_tokenizer, resolve_checkpoint
from coderl.config import load_config
from coderl.config.packaged import default_train_config
from coderl.engine.config import EngineConfig, ModelConfig
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import ConfigError
from coderl.tasks import grade, load_tasks
from coderl.train.demos import gold_turns
from tests.verl_fakes import EngineServerClient

TASKS = "bundled:collkit-001,spanlib-s005"


def verl_config(work: Path) -> Any:
    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    loops = work / "agent_loops.yaml"
    loops.write_text("- name: coderl\n  _target_: coderl.integrations.verl.CoderlAgentLoop\n")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                f"data.train_files={work / 'train.parquet'}",
                "data.max_prompt_length=2048",
                "actor_rollout_ref.rollout.prompt_length=2048",
                "actor_rollout_ref.rollout.response_length=2048",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
            ],
        )


def instantiate(name: str, config: Any, client: Any, tokenizer: Any, **extra: Any) -> Any:
    """The registered loop ``name``, made as verl's AgentLoopWorker makes one (its wrappers, Hydra)."""
    return hydra.utils.instantiate(
        config=_agent_loop_registry[name],
        trainer_config=DictConfigWrap(config=config),
        server_manager=client,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
        **extra,
    )


async def main(work: Path, example_overrides: list[str]) -> dict[str, Any]:
    convert = [sys.executable, "-m", "coderl", "tasks", "convert", str(work / "train.parquet"), "--format", "verl",
               f"tasks.source={TASKS}"]  # fmt: skip
    subprocess.run(convert, check=True, capture_output=True)
    config = verl_config(work)
    tokenizer = load_tokenizer(resolve_checkpoint(None))
    dataset = RLHFDataset(str(work / "train.parquet"), tokenizer, config.data)
    sample = dataset[1]  # spanlib-s005
    # examples/verl/agent_loops.yaml's entry (with coderl_overrides) in the registry, as the worker loads
    # it, then three samples' loops made from it, as the worker makes one per sample: the first imports
    # coderl.integrations.verl, which must not replace the entry with a bare one
    for entry in OmegaConf.load(Path(__file__).resolve().parents[1] / "examples" / "verl" / "agent_loops.yaml"):
        _agent_loop_registry[entry.name] = entry
    assert "coderl.integrations.verl" not in sys.modules
    idle = EngineServerClient(ScriptedEngine([], tokenizer))
    registry_turns = [instantiate("coderl", config, idle, tokenizer).coderl.rollout.max_turns for _ in range(3)]
    for entry in OmegaConf.load(
        config.actor_rollout_ref.rollout.agent.agent_loop_config_path
    ):  # as the worker
        _agent_loop_registry[entry.name] = entry

    engine = EmbeddedEngine(EngineConfig(max_batch_size=2), ModelConfig())
    await engine.start()
    client = EngineServerClient(engine)
    loop = instantiate(
        sample["agent_name"], config, client, tokenizer,
        coderl_overrides=["rollout.max_turns=2", "rollout.max_tokens=24", "rollout.max_format_errors=null"],
    )  # fmt: skip
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    kwargs = {k: v for k, v in sample.items() if k != "agent_name" and not isinstance(v, torch.Tensor)}
    output = await loop.run(sampling, **kwargs)

    task = next(t for t in load_tasks(TASKS) if t.id == output.extra_fields["coderl_task_id"])
    packaged = load_config(defaults=default_train_config())
    turns = gold_turns(task, packaged.rollout, packaged.model.tool_format)
    assert turns is not None
    gold_client = EngineServerClient(ScriptedEngine(turns, tokenizer, default="Done."))
    gold = instantiate("coderl", config, gold_client, tokenizer)  # the packaged recipe, gold moves
    solved = await gold.run(sampling, **kwargs)
    short = OmegaConf.merge(config, {"actor_rollout_ref": {"rollout": {"prompt_length": 64}}})
    cramped = instantiate(
        "coderl", short, EngineServerClient(ScriptedEngine(turns, tokenizer, default="Done.")), tokenizer
    )
    try:
        await cramped.run(sampling, **kwargs)
        prompt_error = ""
    except ConfigError as exc:
        prompt_error = str(exc)

    ids, mask, lps = output.response_ids, output.response_mask, output.response_logprobs
    sampled = [t for c in client.calls for t in c.token_ids]
    assert [t for t, m in zip(ids, mask, strict=True) if m] == sampled, (
        "mask-1 ids differ from the sampled ids"
    )
    assert [x for x, m in zip(lps, mask, strict=True) if m] == [x for c in client.calls for x in c.log_probs]
    full = output.prompt_ids + ids
    for call in client.calls:
        n = len(call.prompt_ids)
        assert full[:n] == call.prompt_ids and full[n : n + len(call.token_ids)] == call.token_ids

    worker = object.__new__(AgentLoopWorker)  # verl's own worker code, on this worker's settings
    worker.rollout_config, worker.tokenizer, worker.processor = (
        config.actor_rollout_ref.rollout,
        tokenizer,
        None,
    )
    worker.config, worker.reward_loop_worker_handles, worker.distillation_enabled = config, None, False
    worker.mm_processor_kwargs, worker.hf_model_type, worker.dataset_cls = {}, "llama", RLHFDataset
    worker.tools, worker.teacher_client = [], None
    padded = await worker._agent_loop_postprocess(output, False, **kwargs)

    # the whole batch through AgentLoopWorker.generate_sequences: the DataProto verl's trainer consumes
    await engine.stop()
    scripted = ScriptedEngine(turns, tokenizer, per_session=True, default="Done.")  # gold moves of one task
    worker.llm_client = batch_client = EngineServerClient(scripted)
    batch = DataProto.from_single_dict(collate_fn([dataset[0], dataset[1]]))
    produced = await worker.generate_sequences(batch)
    rows = []
    for i in range(len(produced)):
        b, extra = produced.batch, {k: v[i] for k, v in produced.non_tensor_batch.items()}
        keep = b["response_mask"][i].bool()
        rows.append({
            "task_id": str(extra.get("coderl_task_id")),
            "model_ids": b["responses"][i][keep].tolist(),
            "model_logprobs": b["rollout_log_probs"][i][keep].tolist(),
            "reward": float(b["rm_scores"][i].sum()) if "rm_scores" in b.keys() else None,
            "resolved": bool(extra.get("coderl_resolved")),
        })  # fmt: skip
    served: dict[str, tuple[list[int], list[float]]] = {}
    for call in batch_client.calls:
        served.setdefault(call.request_id, ([], []))
        served[call.request_id][0].extend(call.token_ids)
        served[call.request_id][1].extend(call.log_probs)
    verdict = await grade(task, str(output.extra_fields["coderl_patch"]), None)
    return {
        "task_id": task.id,
        "turns": output.num_turns,
        "calls": len(client.calls),
        "request_ids": sorted({c.request_id for c in client.calls}),
        "reward_score": output.reward_score,
        "grade_reward": verdict.reward,
        "model_tokens": int(sum(mask)),
        "env_tokens": len(mask) - int(sum(mask)),
        "padded_response_mask": int(padded.response_mask.sum()),
        "padded_shape": list(padded.input_ids.shape),
        "logprobs": [[c.prompt_ids, c.token_ids, c.log_probs] for c in client.calls],
        "index": int(sample["index"]),
        "gold_reward_score": solved.reward_score,
        "gold_resolved": solved.extra_fields["coderl_resolved"],
        "prompt_error": prompt_error,
        "example": compose_check(example_overrides),
        "batch_rows": rows,
        "batch_served": list(served.values()),
        "batch_keys": sorted(produced.batch.keys()),
        "gold_rm_scores_last": float(solved.as_dict()["rm_scores"][-1]),  # verl's reward tensor
        "registry_turns": registry_turns,
    }


def compose_check(overrides: list[str]) -> dict[str, Any]:
    """verl's own config composed with ``overrides`` (fails on a key verl does not have)."""
    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    return {"composed": len(overrides), "rollout_name": cfg.actor_rollout_ref.rollout.name}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1]), sys.argv[2:]))))
