"""``coderl bench agents``: the agent programs coderl packages a recipe for, run as they are through the
recording proxy with the real model, and what their rollouts cost the trainer.

For each agent (the packaged recipe ``remote_<agent>.yaml``): its ``rollout.remote_setup`` (the pinned
install where the program is missing), then one rollout on each of the first N tasks of the recipe's
task source, one at a time, through the ``remote`` loop, with the recipe's sandbox, prompt settings
and ``rollout.max_tokens``. Per agent:

- the endpoints its calls used, and calls per rollout;
- sequences per rollout (the trajectories the calls merged into: 1 when every call extended the
  conversation) and the split reasons of the others;
- token-exact: every sampled token of every sequence is the one the engine sampled, in that context;
- the shared-prefix share: of the tokens the trainer would forward for a rollout's sequences, the share
  that is a prefix one of them shares with an earlier one (forwarded once by the packed actor,
  ``actor.share_prefix``): 1 - packed tokens with sharing / without;
- exit statuses and seconds per rollout (a small model on a CPU: most replies are cut at the cap).
"""

from __future__ import annotations

import importlib.metadata
import re
import time
from collections import Counter
from typing import Any

import torch
from rich.console import Console

from coderl.agents import get_loop
from coderl.agents.baseline import BaselineCache
from coderl.bench.report import machine_info
from coderl.chat import ChatFormat
from coderl.config import Config, load_config
from coderl.config.packaged import packaged_config
from coderl.engine.embedded import EmbeddedEngine
from coderl.rollout.context import ContextFactory
from coderl.tasks import load_tasks
from coderl.train.ledger import SampledLedger
from coderl.train.packing import pack
from coderl.types import Trajectory

AGENTS = ("mini_swe_agent", "codex", "claude_code", "aider", "opencode")
"""Each has a packaged recipe ``coderl/configs/remote_<agent>.yaml``."""


def pinned_version(cfg: Config, agent: str) -> str:
    """The version the recipe installs (its remote_setup's pin), or the installed one."""
    found = re.search(r"(?:@|==)(\d[\w.\-]*)", cfg.rollout.remote_setup)
    if found:
        return found.group(1)
    try:
        return importlib.metadata.version(agent.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "?"


def shared_share(traj: Trajectory) -> tuple[int, int]:
    """(tokens forwarded with prefix sharing, without) for one rollout's sequences."""
    seqs = [s.prompt_ids + s.response_ids for s in traj.sequences() if s.response_ids]
    if not seqs:
        return 0, 0
    starts = [len(s.prompt_ids) for s in traj.sequences() if s.response_ids]
    cpu = torch.device("cpu")
    return pack(seqs, starts, cpu, share_prefix=True).num_tokens, pack(seqs, starts, cpu).num_tokens


async def bench_agent(
    agent: str, overrides: list[str], engine: EmbeddedEngine, chat: ChatFormat, tasks: int, console: Console
) -> dict[str, Any]:
    """One agent's row: its recipe, with the command line's overrides on top."""
    cfg = load_config(str(packaged_config(f"remote_{agent}.yaml")), overrides)
    contexts = ContextFactory(cfg.rollout, cfg.sandbox, chat)
    ledger = SampledLedger(engine)
    row: dict[str, Any] = {"agent": agent, "version": pinned_version(cfg, agent)}
    apis: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    calls = sequences = exact = shared = plain = reached = 0
    seconds: list[float] = []
    baselines = BaselineCache()
    picked = load_tasks(cfg.tasks.source)[:tasks]
    for i, task in enumerate(picked):
        t0 = time.perf_counter()
        traj = await get_loop("remote").run(task, contexts(ledger, f"{agent}-{i}", baselines))
        seconds.append(time.perf_counter() - t0)
        statuses[traj.exit_status] += 1
        if not traj.metrics.get("proxy_calls"):  # the program never reached the model: say why, once
            row.setdefault("error", (traj.error or "")[-400:])
            continue
        reached += 1
        calls += int(traj.metrics["proxy_calls"])
        sequences += len(traj.sequences())
        for key, value in traj.metrics.items():
            if key.startswith("proxy_splits/"):
                reasons[key.split("/", 1)[1]] += int(value)
            if key.startswith("proxy_api/"):
                apis[key.split("/", 1)[1]] += int(value)
        exact += all(ledger.verify(s) is None for s in traj.sequences())
        s, p = shared_share(traj)
        shared, plain = shared + s, plain + p
        console.print(
            f"  {agent} {task.id}: {traj.exit_status}, {int(traj.metrics['proxy_calls'])} calls, "
            f"{len(traj.sequences())} sequences, {seconds[-1]:.0f} s"
        )
    row.update(
        rollouts=len(picked),
        endpoints=dict(apis),
        calls_per_rollout=calls / len(picked) if picked else 0.0,
        sequences_per_rollout=sequences / len(picked) if picked else 0.0,
        split_reasons=dict(reasons),
        token_exact=f"{exact}/{reached}",
        shared_prefix_share=1 - shared / plain if plain else None,
        exit_statuses=dict(statuses),
        seconds_per_rollout=sorted(seconds)[len(seconds) // 2] if seconds else None,
    )
    return row


async def bench_agents(
    cfg: Config, agents: list[str], tasks: int, console: Console, overrides: list[str] | None = None
) -> dict[str, Any]:
    """Every agent's row (see the module doc), one engine shared by all (``cfg``'s engine and model);
    ``overrides`` (the command line's key=value) apply to every recipe."""
    if tasks < 1:
        from coderl.errors import ConfigError

        raise ConfigError(f"--tasks: got {tasks}; give the rollouts per agent, at least 1")
    unknown = [a for a in agents if a not in AGENTS]
    if unknown:
        from coderl.errors import ConfigError

        raise ConfigError(f"--agents: {unknown} have no packaged recipe; choose from {', '.join(AGENTS)}")
    engine = EmbeddedEngine(cfg.engine, cfg.model)
    await engine.start()
    try:
        from coderl.checkpoint import load_tokenizer, resolve_checkpoint

        tokenizer = load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir))
        chat = ChatFormat(tokenizer, tool_format=cfg.model.tool_format)
        rows = []
        for agent in agents:
            console.print(f"[bold]{agent}[/]")
            rows.append(await bench_agent(agent, list(overrides or []), engine, chat, tasks, console))
    finally:
        await engine.stop()
    return {"machine": machine_info(), "tasks_per_agent": tasks, "agents": rows}


def to_markdown(r: dict[str, Any]) -> str:
    lines = [
        "## Agent programs through the proxy (`coderl bench agents`)",
        "",
        f"Each agent's packaged recipe (`coderl/configs/remote_<agent>.yaml`), one rollout on each of "
        f"{r['tasks_per_agent']} bundled warmup tasks with the real default model. *Sequences* are the "
        "trajectories a rollout's calls merged into; the *shared-prefix share* is the part of the tokens "
        "the trainer forwards for them that is a prefix shared with an earlier sequence of the rollout "
        "(forwarded once, `actor.share_prefix`).",
        "",
        f"Command: `{r.get('command', 'coderl bench agents')}` — {r['machine']['cpu']}, {r['machine']['cores']} cores.",
        "",
        "| agent | version | endpoints (calls) | calls / rollout | sequences / rollout | splits | shared-prefix share | token-exact | exit statuses | s / rollout |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in r["agents"]:
        share = a["shared_prefix_share"]
        lines.append(
            f"| {a['agent']} | {a['version']} | {_counts(a['endpoints'])} | {a['calls_per_rollout']:.1f} | "
            f"{a['sequences_per_rollout']:.1f} | {_counts(a['split_reasons']) or 'none'} | "
            f"{'n/a' if share is None else f'{share:.0%}'} | {a['token_exact']} | {_counts(a['exit_statuses'])} | "
            f"{'n/a' if a['seconds_per_rollout'] is None else format(a['seconds_per_rollout'], '.0f')} |"
        )
    errors = [a for a in r["agents"] if a.get("error")]
    for a in errors:
        lines.append(f"\n{a['agent']} did not reach the model: `{a['error'].strip()[-300:]}`")
    return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
