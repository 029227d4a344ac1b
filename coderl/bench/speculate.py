"""``coderl bench speculate``: the embedded engine with and without drafts from the context
(``engine.speculate``), on the same requests, alternating.

The requests are agent turns: by default the model asked to copy functions of the bundled libraries
(what the swe agent does when it writes a function back with one line changed); with
``--trajectories FILE`` the model turns of a run's recorded trajectories (a validation's greedy ones,
say), each sent with the context it had, to the model that wrote them (``model.path``). All greedy,
so both settings should write the same tokens: ``same_tokens`` counts the requests whose outputs agree
(a few may differ where a near-tie in the logits goes the other way under another matmul shape).

Per concurrency level and setting: output tokens/s, engine steps, draft tokens proposed and kept.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.errors import ConfigError
from coderl.progress import progress_bars

Request = tuple[list[int], int]
"""A prompt's token ids and the most tokens to generate."""


def copy_requests(tokenizer: Any, n: int, max_tokens: int) -> list[Request]:
    """``n`` chat prompts asking to copy a function of the bundled libraries (5-25 lines each)."""
    root = Path(str(resources.files("coderl") / "tasks" / "bundled" / "repos"))
    sources: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if "test" in path.name:
            continue
        text = path.read_text()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.end_lineno and 5 <= node.end_lineno - node.lineno + 1 <= 25:
                sources.append(ast.get_source_segment(text, node) or "")
    sources = [s for s in sources if s][:n]
    out: list[Request] = []
    for src in sources:
        messages = [{"role": "user", "content": f"Copy this function exactly:\n```python\n{src}\n```"}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        out.append((list(ids), max_tokens))
    return out


Session = list[Request]
"""One recorded trajectory's model turns in order (one session's turns)."""


def trajectory_sessions(path: Path, limit: int, turns_limit: int | None = None) -> list[Session]:
    """The model turns (``response_mask`` 1 runs) of recorded trajectories, one session per
    trajectory, each turn with its context: the first ``limit`` sessions, read no further than
    ``turns_limit`` turns in all where given."""
    if not path.is_file():
        raise ConfigError(f"--trajectories {path}: no such file; name a run's trajectories.jsonl")
    out: list[Session] = []
    turns = 0
    with path.open() as lines:
        for line in lines:
            t = json.loads(line)
            ctx, ids = t["prompt_ids"], t["response_ids"]
            session: Session = []
            at = 0
            for flag, run in itertools.groupby(t["response_mask"]):
                n = len(list(run))
                if flag == 1:
                    session.append((ctx + ids[:at], n))
                at += n
            if session:
                out.append(session)
                turns += len(session)
            if len(out) >= limit or (turns_limit is not None and turns >= turns_limit):
                break
    if not out:
        raise ConfigError(f"--trajectories {path}: no model turn in it (no response_mask 1)")
    return out


def trajectory_requests(path: Path, limit: int) -> list[Request]:
    """The first ``limit`` model turns of recorded trajectories, each with its context."""
    sessions = trajectory_sessions(path, limit, turns_limit=limit)
    return [turn for session in sessions for turn in session][:limit]


async def _run(
    cfg: Config, speculate: int, requests: list[Request], concurrency: int
) -> tuple[dict[str, Any], list[list[int]]]:
    engine = EmbeddedEngine(cfg.engine.model_copy(update={"speculate": speculate}), cfg.model, seed=cfg.run.seed)
    await engine.start()
    try:
        await engine.generate(requests[0][0][:16], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
        before = engine.stats()
        gate = asyncio.Semaphore(concurrency)

        async def one(prompt: list[int], max_tokens: int) -> list[int]:
            async with gate:
                c = await engine.generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=0))
                return c.token_ids

        t0 = time.perf_counter()
        outputs = await asyncio.gather(*(one(p, m) for p, m in requests))
        seconds = time.perf_counter() - t0
        after = engine.stats()
    finally:
        await engine.stop()  # one engine thread (and its OpenMP team) at a time
    tokens = sum(map(len, outputs))
    diff = {k: after[k] - before[k] for k in ("steps", "draft_tokens", "accepted_draft_tokens")}
    return {"tok_s": tokens / seconds, "tokens": tokens, "seconds": seconds, **diff}, outputs


async def bench_speculate(
    cfg: Config,
    trajectories: Path | None = None,
    speculate: int = 4,
    quick: bool = False,
    console: Console | None = None,
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    if speculate < 1:
        raise ConfigError(f"--speculate {speculate}: give the draft length to compare with 0 (1-16)")
    levels = (4,) if quick else (4, 16)
    limit = 8 if quick else 64
    if trajectories is not None:
        requests = trajectory_requests(trajectories, limit)
    else:
        from coderl.checkpoint import load_tokenizer, resolve_checkpoint

        tokenizer = load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir))
        requests = copy_requests(tokenizer, limit, 256)
    runs: dict[str, dict[str, Any]] = {}
    same: dict[str, int] = {}
    with progress_bars(console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
        bar = progress.add_task("speculate", total=2 * len(levels))
        for c in levels:
            outs: dict[int, list[list[int]]] = {}
            for k in (speculate, 0):  # alternating, the drafted run first
                progress.update(bar, description=f"{c} concurrent, engine.speculate={k}")
                runs[f"{c}/{k}"], outs[k] = await _run(cfg, k, requests, c)
                progress.advance(bar)
            same[str(c)] = sum(a == b for a, b in zip(outs[speculate], outs[0], strict=True))
    return {
        "speculate": speculate,
        "runs": runs,
        "speedup": {str(c): runs[f"{c}/{speculate}"]["tok_s"] / runs[f"{c}/0"]["tok_s"] for c in levels},
        "same_tokens": same,
        "setup": {
            "requests": len(requests),
            "workload": str(trajectories) if trajectories is not None else "copy a bundled function",
            "model": str(cfg.model.path or "SmolLM2-135M-Instruct"),
            "dtype": cfg.model.dtype,
            "decode_attention": cfg.engine.decode_attention,
            "levels": list(levels),
            "quick": quick,
        },
        "machine": machine_info(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    m, s, k = r["machine"], r["setup"], r["speculate"]
    rows = []
    for c in s["levels"]:
        on, off = r["runs"][f"{c}/{k}"], r["runs"][f"{c}/0"]
        kept = on["accepted_draft_tokens"] / max(on["draft_tokens"], 1)
        rows.append(
            f"| {c} | {off['tok_s']:.1f} | {on['tok_s']:.1f} | **{r['speedup'][str(c)]:.2f}×** | "
            f"{off['steps']} / {on['steps']} | {kept:.0%} | {r['same_tokens'][str(c)]} of {s['requests']} |"
        )
    table = "\n".join(rows)
    return f"""## Speculative decoding from the context (`coderl bench speculate`)

Command: `{r.get("command", "coderl bench speculate")}` — {m["cpu"]}, {m["cores"]} cores, torch {m["torch"]},
{s["dtype"]}, model {s["model"]}. {s["requests"]} greedy requests ({s["workload"]}), run with
`engine.speculate=0` and `={k}` one after the other at each level.

| concurrent | tok/s, off | tok/s, speculate={k} | speedup | engine steps off / on | drafts kept | same tokens |
|---|---|---|---|---|---|---|
{table}
"""
