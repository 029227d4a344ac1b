"""``coderl demo``: concurrent chat generations on the embedded default engine, with progress."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from coderl.chat import ChatFormat
from coderl.cli.common import config_from_args
from coderl.config import Config
from coderl.engine import SamplingParams, create_engine
from coderl.engine.embedded import EmbeddedEngine
from coderl.progress import progress_bars
from coderl.rundir import append_jsonl, create_run_dir
from coderl.signals import run as run_command

PROMPTS = [
    "Write a Python function that reverses a string.",
    "Fix this bug: `def add(a, b): return a - b`.",
    "What does `git diff --staged` show?",
    "Write a unit test for a function `is_even(n)`.",
    "Explain what a Python list comprehension is in one sentence.",
    "Write a bash command that counts lines in all .py files.",
    "Why does `for i in range(len(xs)): xs.pop(i)` fail?",
    "Write a function that parses 'key=value' lines into a dict.",
]


def run_demo(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    return run_command(_demo(cfg, max(1, ns.requests), max(1, ns.max_tokens)))


async def _demo(cfg: Config, n_requests: int, max_tokens: int) -> int:
    console = Console(stderr=True)
    run_dir = create_run_dir(cfg, "demo")
    engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    with console.status("loading the model (the first start converts the default checkpoint once)"):
        t0 = time.perf_counter()
        await engine.start()
        load_s = time.perf_counter() - t0
    tokenizer = engine.tokenizer if isinstance(engine, EmbeddedEngine) else None
    if tokenizer is None:
        from coderl.checkpoint import load_tokenizer, resolve_checkpoint

        tokenizer = load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir))
    chat = ChatFormat(tokenizer)
    console.print(
        f"model loaded in {load_s:.1f}s; {n_requests} concurrent requests, {max_tokens} tokens each"
    )
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n_requests)]
    results: list[dict[str, Any]] = []
    with progress_bars(console, TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as progress:
        bar = progress.add_task("generating", total=n_requests)

        async def one(i: int, prompt: str) -> None:
            ids = chat.render([{"role": "user", "content": prompt}])
            params = SamplingParams(max_tokens=max_tokens, temperature=0.7, top_p=0.95, seed=cfg.run.seed + i)
            c = await engine.generate(ids, params, session_id=f"demo-{i}")
            record = {
                "prompt": prompt,
                "prompt_ids": ids,
                "completion": chat.decode(c.token_ids),
                "token_ids": c.token_ids,
                "logprobs": c.logprobs,
                "finish_reason": c.finish_reason,
                "ttft_s": c.ttft_s,
                "latency_s": c.latency_s,
            }
            results.append(record)
            append_jsonl(run_dir / "completions.jsonl", record)
            progress.advance(bar)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        wall = time.perf_counter() - t0
    await engine.stop()
    tokens = sum(len(r["token_ids"]) for r in results)
    table = Table(title="coderl demo")
    table.add_column("prompt", max_width=40)
    table.add_column("completion", max_width=70)
    for r in results[:4]:
        table.add_row(r["prompt"], r["completion"].strip()[:200])
    console.print(table)
    summary = {
        "requests": n_requests,
        "output_tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "load_s": load_s,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(
        f"{tokens} tokens in {wall:.1f}s = [bold]{tokens / wall:.1f} tok/s[/bold]; run directory: {run_dir}"
    )
    return 0
