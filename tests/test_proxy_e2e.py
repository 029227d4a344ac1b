"""End to end: `coderl proxy serve` semantics on loopback with the real engine and model, driven by the
official OpenAI and Anthropic SDKs; the record is checked against an independent forward pass."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from coderl.chat import ChatFormat
from coderl.config import EngineConfig, ModelConfig
from coderl.engine.embedded import EmbeddedEngine
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig
from tests.conftest import hf_logprobs
from tests.servers import free_port, serve

pytestmark = pytest.mark.slow
ADMIN = "adm-e2e"
OPENAI_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": "bash",
        "description": "Run a shell command",
        "input_schema": OPENAI_TOOLS[0]["function"]["parameters"],
    }
]


def admin(base: str, method: str, path: str) -> dict[str, Any]:
    r = httpx.request(method, base + path, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


def check_record_against_reference(rec: dict[str, Any], hf_model: Any) -> None:
    for call in rec["calls"]:
        ref = hf_logprobs(hf_model, call["prompt_ids"], call["completion_ids"])
        diff = sum(abs(a - b) for a, b in zip(ref, call["logprobs"], strict=True)) / len(ref)
        assert diff < 1e-3, (call["id"], diff)


def test_sdks_against_the_real_engine(tokenizer: Any, hf_model: Any, tmp_path: Path) -> None:
    engine = EmbeddedEngine(EngineConfig(max_batch_size=4, prefill_chunk=256), ModelConfig())
    chat = ChatFormat(tokenizer)
    app = create_app(ProxyConfig(db=tmp_path / "p.db", admin_token=ADMIN), engine, chat, model_name="smol")
    with serve(app) as base:
        s = admin(base, "POST", "/sessions")
        oa = openai.OpenAI(base_url=s["openai_base_url"], api_key=s["secret"], max_retries=2)
        messages: list[Any] = [
            {"role": "system", "content": "You are a coding assistant. Use the bash tool."},
            {"role": "user", "content": "List the Python files in the current directory."},
        ]
        kwargs: dict[str, Any] = {"model": "smol", "tools": OPENAI_TOOLS, "max_tokens": 24, "seed": 1}
        stream = oa.chat.completions.create(
            messages=messages, stream=True, stream_options={"include_usage": True}, **kwargs
        )
        chunks = list(stream)
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if deltas:  # rebuild the streamed tool calls the way an agent does
            calls: dict[int, dict[str, Any]] = {}
            for d in deltas:
                entry = calls.setdefault(
                    d.index, {"id": d.id, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                entry["function"]["name"] += (d.function.name or "") if d.function else ""
                entry["function"]["arguments"] += (d.function.arguments or "") if d.function else ""
            reply["tool_calls"] = list(calls.values())
        messages.append(reply)
        if deltas:
            messages += [
                {"role": "tool", "tool_call_id": c["id"], "content": "main.py\nutil.py"}
                for c in reply["tool_calls"]
            ]
        else:
            messages.append({"role": "user", "content": "Now use the bash tool."})
        second = oa.chat.completions.create(messages=messages, logprobs=True, **kwargs)
        again = oa.chat.completions.create(messages=messages, logprobs=True, **kwargs)  # a retry: same body
        assert again.model_dump() == second.model_dump()

        an = anthropic.Anthropic(base_url=s["anthropic_base_url"], api_key=s["secret"], max_retries=2)
        conv: list[Any] = [{"role": "user", "content": "Say hello in French."}]
        with an.messages.stream(model="smol", max_tokens=16, messages=conv, tools=ANTHROPIC_TOOLS) as st:
            first_msg = st.get_final_message()
        conv += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first_msg.content]},
            {"role": "user", "content": "And in Spanish?"},
        ]
        an.messages.create(model="smol", max_tokens=16, messages=conv, tools=ANTHROPIC_TOOLS)

        rec = admin(base, "GET", f"/sessions/{s['id']}")
        c1, c2, c3, c4 = rec["calls"]
        assert second.choices[0].logprobs is not None and second.choices[0].logprobs.content is not None
        assert [t.logprob for t in second.choices[0].logprobs.content] == pytest.approx(c2["logprobs"])
        assert c2["base_call_id"] == c1["id"] and c4["base_call_id"] == c3["id"]
        assert all(c["policy_version"] == 0 for c in rec["calls"])
        check_record_against_reference(rec, hf_model)
        # Two conversations: OpenAI (2 calls) and Anthropic (2 calls); the second one is a split.
        assert rec["stats"] == {
            "calls": 4,
            "trajectories": 2,
            "splits": 1,
            "split_reasons": {"new_context": 1},
            "context_refusals": 0,
        }
        for traj, (a, b) in zip(rec["trajectories"], [(c1, c2), (c3, c4)], strict=True):
            assert traj["prompt_ids"] == a["prompt_ids"]
            assert traj["prompt_ids"] + traj["response_ids"] == b["prompt_ids"] + b["completion_ids"]
            sampled = [t for t, m in zip(traj["response_ids"], traj["response_mask"], strict=True) if m]
            assert sampled == a["completion_ids"] + b["completion_ids"]
            assert [lp for lp, m in zip(traj["logprobs"], traj["response_mask"], strict=True) if not m] == [
                0.0
            ] * (len(traj["response_mask"]) - len(sampled))

        # Stop sequences end generation in the engine, and the record is exactly the text returned.
        s2 = admin(base, "POST", "/sessions")
        oa2 = openai.OpenAI(base_url=s2["openai_base_url"], api_key=s2["secret"], max_retries=0)
        an2 = anthropic.Anthropic(base_url=s2["anthropic_base_url"], api_key=s2["secret"], max_retries=0)
        before = engine.stats()["generated_tokens"]
        story = oa2.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "Tell me a story."}],
            stop=[" "],
            max_tokens=400,
            temperature=0,
        )
        spent = engine.stats()["generated_tokens"] - before
        before = engine.stats()["generated_tokens"]
        hello = an2.messages.create(
            model="smol",
            max_tokens=1024,
            extra_body={"temperature": 0},  # greedy (this SDK version has no temperature argument)
            messages=[{"role": "user", "content": "Write one sentence about cats."}],
            stop_sequences=["."],
        )
        spent_an = engine.stats()["generated_tokens"] - before
        o_call, a_call = admin(base, "GET", f"/sessions/{s2['id']}")["calls"]
        said = story.choices[0].message.content or ""
        assert story.choices[0].finish_reason == "stop" and said and " " not in said
        assert tokenizer.decode(o_call["completion_ids"], skip_special_tokens=True) == said
        assert spent == len(o_call["completion_ids"]) + 1 < 10  # one more token held the stop: then it ended
        written = hello.content[0].text  # type: ignore[union-attr]
        assert hello.stop_reason == "stop_sequence" and hello.stop_sequence == "." and "." not in written
        assert tokenizer.decode(a_call["completion_ids"], skip_special_tokens=True) == written
        assert spent_an == len(a_call["completion_ids"]) + 1 < 100, spent_an

        # Streams stream: the first content arrives while the engine is still sampling the reply.
        s3 = admin(base, "POST", "/sessions")
        oa3 = openai.OpenAI(base_url=s3["openai_base_url"], api_key=s3["secret"], max_retries=0)
        an3 = anthropic.Anthropic(base_url=s3["anthropic_base_url"], api_key=s3["secret"], max_retries=0)
        before = engine.stats()["generated_tokens"]
        at_first: int | None = None
        pieces = []
        for chunk in oa3.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "Tell me a long story about a dragon."}],
            max_tokens=48,
            temperature=0,
            stream=True,
        ):
            text = chunk.choices[0].delta.content if chunk.choices else None
            if text and at_first is None:
                at_first = engine.stats()["generated_tokens"] - before
            pieces.append(text or "")
        streamed_call = admin(base, "GET", f"/sessions/{s3['id']}")["calls"][0]
        assert at_first is not None and at_first < len(streamed_call["completion_ids"]) == 48
        assert "".join(pieces) == tokenizer.decode(streamed_call["completion_ids"], skip_special_tokens=True)
        before = engine.stats()["generated_tokens"]
        at_first = None
        with an3.messages.stream(
            model="smol",
            max_tokens=48,
            messages=[{"role": "user", "content": "Describe the sea at night in detail."}],
            extra_body={"temperature": 0},
        ) as events:
            for piece in events.text_stream:
                if piece and at_first is None:
                    at_first = engine.stats()["generated_tokens"] - before
            final = events.get_final_message()
        assert at_first is not None and at_first < final.usage.output_tokens
        anthropic_call = admin(base, "GET", f"/sessions/{s3['id']}")["calls"][1]
        assert final.content[0].text == tokenizer.decode(  # type: ignore[union-attr]
            anthropic_call["completion_ids"], skip_special_tokens=True
        )


def _start(db: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "coderl", "proxy", "serve", f"proxy.db={db}", f"proxy.port={port}"]
    cmd += [f"proxy.admin_token={ADMIN}", "engine.max_batch_size=2", "run.log_level=warning"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})


def _wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError("proxy did not become healthy")


def readme_proxy_commands() -> list[str]:
    """The command lines of the README's recording-proxy block (comments and the agent placeholder out)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Recording proxy", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert sum("my-agent" in line for line in lines) == 1, lines  # the one line a user fills in
    return [line for line in lines if "my-agent" not in line]


def run_readme_line(line: str, port: int, db: Path, session: str = "") -> subprocess.CompletedProcess[str]:
    line = line.replace("8100", str(port)).replace("runs/proxy.sqlite", str(db)).replace("s…", session)
    env = {**os.environ, "TOKEN": ADMIN}
    return subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=60, check=True
    )


def test_the_readme_commands_work_and_sigkill_and_restart_lose_no_completed_call(tmp_path: Path) -> None:
    db, port = tmp_path / "proxy.sqlite", free_port()
    base = f"http://127.0.0.1:{port}"
    serve_line, create_line, read_line = readme_proxy_commands()
    assert serve_line.startswith("coderl proxy serve ")
    line = serve_line.replace("8100", str(port)).replace("runs/proxy.sqlite", str(db))
    proc = subprocess.Popen(  # the README's own command, as written (port and db moved)
        ["bash", "-c", f"exec {line} run.log_level=warning engine.max_batch_size=2"],
        env={**os.environ, "TOKEN": ADMIN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_healthy(base, proc)
        created = json.loads(run_readme_line(create_line, port, db).stdout)
        assert set(created) >= {"id", "secret", "openai_base_url", "anthropic_base_url"}
        read = json.loads(run_readme_line(read_line.split("#")[0], port, db, created["id"]).stdout)
        assert read["metadata"] == {"task_id": "t1"} and read["calls"] == []
        s = admin(base, "POST", "/sessions")
        h = {"Authorization": f"Bearer {s['secret']}"}
        url = f"{base}/s/{s['id']}/v1/chat/completions"
        msgs: list[Any] = [{"role": "user", "content": "Count to three."}]
        body = {"messages": msgs, "max_tokens": 4, "seed": 5}
        r1 = httpx.post(url, json=body, headers=h, timeout=120).json()
        msgs = [*msgs, r1["choices"][0]["message"], {"role": "user", "content": "Again."}]
        body2 = {"messages": msgs, "max_tokens": 4, "seed": 6}
        r2 = httpx.post(url, json=body2, headers=h, timeout=120).json()
        before = admin(base, "GET", f"/sessions/{s['id']}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

        proc = _start(db, port)
        _wait_healthy(base, proc)
        after = admin(base, "GET", f"/sessions/{s['id']}")
        assert after["calls"] == before["calls"] and len(after["calls"]) == 2
        assert after["trajectories"] == before["trajectories"]
        retried = httpx.post(url, json=body2, headers=h, timeout=120)
        assert retried.headers["x-coderl-replayed"] == "true" and retried.json() == r2
        msgs = [*msgs, r2["choices"][0]["message"], {"role": "user", "content": "Thanks."}]
        httpx.post(url, json={"messages": msgs, "max_tokens": 4}, headers=h, timeout=120)
        final = admin(base, "GET", f"/sessions/{s['id']}")
        assert (
            final["calls"][2]["base_call_id"] == final["calls"][1]["id"]
        )  # sampled ids reused after restart
        assert final["stats"]["trajectories"] == 1 and final["stats"]["calls"] == 3
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_ctrl_c_with_a_stream_under_way_stops_at_once_and_quietly(tmp_path: Path) -> None:
    """SIGINT while the real engine streams a long reply: the proxy ends the call (an error event closes
    the stream), stops without waiting for the generation, and logs no unretrieved engine error."""
    db, port = tmp_path / "proxy.sqlite", free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(db, port)
    try:
        _wait_healthy(base, proc)
        s = admin(base, "POST", "/sessions")
        body = {
            "prompt": "The history of Rome, in great detail. Chapter 1.",
            "max_tokens": 2000,
            "stream": True,
        }
        url, h = f"{base}/s/{s['id']}/v1/completions", {"Authorization": f"Bearer {s['secret']}"}
        with httpx.stream("POST", url, json=body, headers=h, timeout=120) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: {"))  # sampling is under way
            proc.send_signal(signal.SIGINT)
            rest = list(lines)
        proc.wait(timeout=30)  # not the minutes 2000 tokens take here
    finally:
        proc.kill()
        _, stderr = proc.communicate(timeout=30)
    errors = [json.loads(line[6:]) for line in rest if line.startswith('data: {"error"')]
    assert errors and "shutting down" in errors[0]["error"]["message"], rest[-3:]
    log = stderr.decode()
    assert "never retrieved" not in log and "Traceback" not in log and "ERROR" not in log, log[-3000:]
