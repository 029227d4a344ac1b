"""The verl bridge without verl: coderl's loops on a verl-style server client (backed by coderl's own
engines), the ``AgentLoopOutput`` fields token-exact and graded as ``coderl eval`` grades, and tasks
as verl's RL dataset. (tests/test_verl_loop.py runs the registered class through verl's own code.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from coderl.chat import ChatFormat
from coderl.config import load_config
from coderl.config.packaged import default_train_config
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import EngineError, TaskError
from coderl.integrations.verl_bridge import (
    ServerClientEngine,
    agent_loop_fields,
    check_verl_version,
    run_sample,
    task_of,
    verl_rows,
    write_verl_parquet,
)
from coderl.rollout.runner import RolloutResult
from coderl.tasks import grade, load_tasks
from coderl.train.demos import gold_turns
from coderl.types import Trajectory
from tests.conftest import hf_logprobs
from tests.verl_fakes import EngineServerClient

VERL_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def recipe(*overrides: str) -> Any:
    return load_config(defaults=default_train_config(), overrides=list(overrides))


async def test_a_rollout_on_verls_client_is_token_exact_and_graded_like_coderl_eval(
    engine: Any, tokenizer: Any, hf_model: Any
) -> None:
    cfg = recipe("rollout.max_turns=2", "rollout.max_tokens=24", "rollout.max_format_errors=null")
    task = load_tasks("bundled:warmup")[0]
    client = EngineServerClient(engine)
    adapter = ServerClientEngine(client, "req-7", VERL_SAMPLING, decode=tokenizer.decode)
    result = await run_sample(
        task, adapter, cfg.rollout, cfg.sandbox, ChatFormat(tokenizer, cfg.model.tool_format), cfg.tasks.reward
    )
    out = agent_loop_fields(result, response_length=8192)

    assert len(client.calls) == 2 and {c.request_id for c in client.calls} == {"req-7"}  # sticky
    ids, mask, lps = out["response_ids"], out["response_mask"], out["response_logprobs"]
    assert len(ids) == len(mask) == len(lps)
    sampled = [t for c in client.calls for t in c.token_ids]
    assert [t for t, m in zip(ids, mask, strict=True) if m] == sampled  # mask 1 = what the server sampled
    assert [x for x, m in zip(lps, mask, strict=True) if m] == [x for c in client.calls for x in c.log_probs]
    assert all(x == 0.0 for x, m in zip(lps, mask, strict=True) if not m) and 0 in mask  # tool output: mask 0
    full, p = out["prompt_ids"] + ids, len(out["prompt_ids"])
    for call in client.calls:  # each turn's prompt is exactly the trajectory so far; its tokens follow it
        n, k = len(call.prompt_ids), len(call.token_ids)
        assert full[:n] == call.prompt_ids and full[n : n + k] == call.token_ids
        assert mask[n - p : n - p + k] == [1] * k
        assert call.sampling_params["max_tokens"] == 24 and call.sampling_params["logprobs"] is True
        ref = hf_logprobs(hf_model, call.prompt_ids, call.token_ids)
        assert sum(abs(a - b) for a, b in zip(ref, call.log_probs, strict=True)) / len(ref) < 1e-3

    verdict = await grade(task, result.trajectory.patch, cfg.sandbox)  # coderl eval's grade of the same patch
    assert (
        out["reward_score"] == verdict.reward and out["extra_fields"]["coderl_resolved"] == verdict.resolved
    )
    assert out["num_turns"] == 2 and out["extra_fields"]["coderl_task_id"] == task.id
    assert out["metrics"]["generate_sequences"] > 0 and out["metrics"]["compute_score"] > 0


async def test_serving_many_sessions_each_stays_sticky_and_carries_the_servers_weight_step(
    tokenizer: Any,
) -> None:
    client = EngineServerClient(ScriptedEngine(["a", "b", "c", "d"], tokenizer), global_steps=7)
    proxy_side = ServerClientEngine(client, None)  # the recording proxy's: one adapter, many sessions
    params = SamplingParams(max_tokens=4)
    for session in ("s1", "s2", "s1"):
        c = await proxy_side.generate([1, 2], params, session_id=session)
        assert c.policy_version == 7  # the step whose weights verl's server sampled with
    await proxy_side.generate([1, 2], params)
    await proxy_side.generate([1, 2], params)
    ids = [c.request_id for c in client.calls]
    assert ids[:3] == ["s1", "s2", "s1"]  # a session's calls go to verl under its id: sticky to one server
    assert ids[3] != ids[4] and all(i.startswith("coderl-") for i in ids[3:])  # no session: one id per call


async def test_a_gold_demonstration_through_the_bridge_is_rewarded(tokenizer: Any) -> None:
    cfg = recipe()
    task = load_tasks("bundled:spanlib-s005")[0]
    turns = gold_turns(task, cfg.rollout, cfg.model.tool_format)
    assert turns is not None
    client = EngineServerClient(ScriptedEngine(turns, tokenizer, default="Done."))
    adapter = ServerClientEngine(client, "gold", VERL_SAMPLING)
    result = await run_sample(
        task, adapter, cfg.rollout, cfg.sandbox, ChatFormat(tokenizer, cfg.model.tool_format), cfg.tasks.reward
    )
    out = agent_loop_fields(result)
    assert out["reward_score"] == 1.0 and out["extra_fields"]["coderl_resolved"] is True
    assert out["extra_fields"]["coderl_tool_calls"] == 3 and out["extra_fields"]["coderl_exit_status"]


async def test_verl_decides_sampling_and_coderl_decides_the_turn(tokenizer: Any) -> None:
    client = EngineServerClient(ScriptedEngine(["hello world. more"], tokenizer))
    greedy = {"temperature": 0, "top_p": 1.0, "top_k": -1, "logprobs": False, "n": 4}  # validation settings
    adapter = ServerClientEngine(client, "r", greedy, decode=tokenizer.decode)
    params = SamplingParams(max_tokens=50, temperature=1.0, stop=["."], stop_token_ids=[2], seed=3)
    sent = adapter.sampling_params(params)
    assert sent == {
        "temperature": 0, "top_p": 1.0, "top_k": -1, "max_tokens": 50, "logprobs": True, "stop": ["."],
        "include_stop_str_in_output": True, "stop_token_ids": [2], "seed": 3,
    }  # fmt: skip
    c = await adapter.generate([1, 2, 3], params)
    assert c.finish_reason == "stop" and c.stop_str == "." and tokenizer.decode(c.token_ids).endswith(".")
    long = await adapter.generate([1, 2, 3], SamplingParams(max_tokens=2))
    assert long.finish_reason == "length" and len(long.token_ids) == 2
    blind = ServerClientEngine(EngineServerClient(ScriptedEngine(["x"], tokenizer), with_logprobs=False), "r")
    with pytest.raises(EngineError, match="calculate_log_probs=True"):
        await blind.generate([1], SamplingParams(max_tokens=4))
    with pytest.raises(EngineError, match="verl syncs"):
        await adapter.update_weights("/somewhere")


def test_output_is_cut_to_verls_response_length_and_extra_sequences_are_counted() -> None:
    traj = Trajectory("t1", "g", [1, 2], [3, 4, 5, 6], [1, 0, 1, 1], [-0.1, 0.0, -0.2, -0.3], reward=0.5)
    traj.parts = [Trajectory("t1", "g", [1], [9], [1], [-0.9])]
    out = agent_loop_fields(RolloutResult(traj, resolved=False, grade=None), response_length=3)
    assert out["response_ids"] == [3, 4, 5] and out["response_mask"] == [1, 0, 1]
    assert out["response_logprobs"] == [-0.1, 0.0, -0.2] and out["reward_score"] == 0.5
    assert out["extra_fields"]["coderl_truncated"] and out["extra_fields"]["coderl_parts_dropped"] == 1


def test_tasks_round_trip_through_a_verl_dataset(tmp_path: Path) -> None:
    tasks = load_tasks("bundled:spanlib-s005,collkit-001")
    path = tmp_path / "train.parquet"
    write_verl_parquet(tasks, path)
    rows = pq.read_table(path).to_pylist()
    assert [r["agent_name"] for r in rows] == ["coderl", "coderl"]
    first = rows[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"}
    assert first["prompt"] == [{"role": "user", "content": tasks[0].instruction}]
    assert first["extra_info"]["index"] == 0 and first["extra_info"]["task_id"] == tasks[0].id
    assert {r["data_source"] for r in rows} == {"coderl/synth", "coderl/warmup"}
    assert first["reward_model"] == {"style": "rule", "ground_truth": tasks[0].id}
    for row, task in zip(rows, tasks, strict=True):
        back = task_of(row["extra_info"])
        assert (back.id, back.instruction, back.fail_to_pass, back.gold_patch, back.metadata) == (
            task.id, task.instruction, task.fail_to_pass, task.gold_patch, task.metadata
        )  # fmt: skip
        files = sorted(p.relative_to(task.repo).as_posix() for p in task.repo.rglob("*") if p.is_file())
        assert (
            sorted(p.relative_to(back.repo).as_posix() for p in back.repo.rglob("*") if p.is_file()) == files
        )
    # read with pandas (as verl's dataset does), list columns are numpy arrays: two or more items too
    frame = pd.read_parquet(path)
    for (_, row), task in zip(frame.iterrows(), tasks, strict=True):
        back = task_of(row["extra_info"])
        assert len(task.fail_to_pass) + len(task.pass_to_pass) > 1
        assert (back.id, back.fail_to_pass, back.pass_to_pass) == (task.id, task.fail_to_pass, task.pass_to_pass)
    assert verl_rows(tasks[:1], agent_name="mine")[0]["agent_name"] == "mine"
    with pytest.raises(TaskError, match=r"no coderl_task \(keys: \['index', 'task_id'\]\).*--format verl"):
        task_of({"index": 3, "task_id": "x"})
    row = dict(rows[0]["extra_info"]["coderl_task"])
    with pytest.raises(
        TaskError, match=rf"task {row['id']}: extra_info.coderl_task lacks \['repo_archive'\]"
    ):
        task_of({"coderl_task": {**row, "repo_archive": None}})  # a missing snapshot
    with pytest.raises(TaskError, match=rf"task {row['id']}-bad: extra_info.coderl_task does not unpack"):
        task_of({"coderl_task": {**row, "id": row["id"] + "-bad", "repo_archive": b"not a tarball"}})


def test_the_cli_writes_a_verl_dataset(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "d.parquet"
    cmd = [sys.executable, "-m", "coderl", "tasks", "convert", str(out), "--format", "verl",
           "tasks.source=bundled:collkit-001,collkit-002"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())  # (the console wraps long lines)
    assert said.startswith("wrote 2 tasks to ") and said.endswith("(verl format)")  # options before overrides
    rows = pq.read_table(out).to_pylist()
    assert [json.loads(json.dumps(r["extra_info"]["task_id"])) for r in rows] == [
        "collkit-001",
        "collkit-002",
    ]


def test_verl_versions_outside_the_supported_range_are_refused() -> None:
    check_verl_version("0.9.1")
    for bad in ("0.10.0", "0.8.5", "1.0.0", "unknown"):
        with pytest.raises(ImportError, match=rf"supports verl>=0.9,<0.10; verl {bad} is installed"):
            check_verl_version(bad)
    if importlib.util.find_spec("verl") is None:  # no verl here: the module says what is missing
        with pytest.raises(ImportError, match=r"needs verl installed \(pip install 'verl>=0.9,<0.10'\)"):
            import coderl.integrations.verl  # noqa: F401


@pytest.mark.slow
async def test_an_unmodified_sdk_agent_through_the_bridge_is_recorded_token_exactly(
    tmp_path: Path, engine: Any, tokenizer: Any
) -> None:
    from tests.test_remote_agent import COMMAND
    from tests.test_tasks import make_native

    cfg = recipe("rollout.agent=remote", "rollout.tools=null", "rollout.remote_command=placeholder")
    rollout = cfg.rollout.model_copy(update={"remote_command": COMMAND, "remote_timeout_s": 120})
    sandbox = cfg.sandbox.model_copy(update={"network": True})  # the agent reaches its proxy on loopback
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    client = EngineServerClient(engine)
    adapter = ServerClientEngine(client, "agent-1", VERL_SAMPLING, decode=tokenizer.decode)
    result = await run_sample(task, adapter, rollout, sandbox, ChatFormat(tokenizer), cfg.tasks.reward)
    out = agent_loop_fields(result)
    assert out["extra_fields"]["coderl_exit_status"] == "submitted", out["extra_fields"]["coderl_error"]
    assert {c.request_id for c in client.calls} == {"agent-1"} and len(
        client.calls
    ) == 3  # 2 turns + sub-agent
    full = out["prompt_ids"] + out["response_ids"]
    main = [c for c in client.calls if full[: len(c.prompt_ids)] == c.prompt_ids]
    assert len(main) == 2  # the main agent's two calls lie on the returned sequence, their tokens after them
    for call in main:
        n = len(call.prompt_ids)
        assert full[n : n + len(call.token_ids)] == call.token_ids
    assert sum(out["response_mask"]) == sum(len(c.token_ids) for c in main)
    assert out["extra_fields"]["coderl_parts_dropped"] == 1  # the sub-agent's sequence: verl trains one
    assert out["reward_score"] == 1.0 and (await grade(task, result.trajectory.patch)).resolved
