"""``coderl bench rollout``: rollout throughput against the latency-bound ideal, framework overhead
per turn, and an honest real-model baseline on the bundled warmup and easy tiers.

Throughput: N rollouts of the ``swe`` loop run at once on real bwrap sandboxes against a scripted
engine that answers every call after a fixed latency. Each rollout makes ``len(SCRIPT)`` calls, so
with nothing else in the way a wave of N takes ``len(SCRIPT) * latency`` seconds: that is the ideal,
and ``efficiency_N`` = ideal / measured wall time, until the last trajectory is back. Sandboxes are
taken down after their results, as the trainer does (:mod:`coderl.rollout.teardown`): that time is
not in the wall time, its CPU is in the machine CPU.

Each level also records the CPU the whole machine spent (every sandbox process included) per rollout,
and the wall time that CPU alone needs on this machine's cores: when that exceeds the ideal, the
machine, not the framework's waiting, bounds the efficiency (``cpu_bound_efficiency_N``).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from coderl.bench.report import machine_busy_cpu_s, machine_info, percentile
from coderl.chat import ChatFormat
from coderl.config import Config
from coderl.engine.scripted import ScriptedEngine
from coderl.progress import progress_bars
from coderl.rollout.config import RolloutConfig
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutSettings, run_rollouts, task_groups
from coderl.rollout.teardown import Teardowns
from coderl.sandbox.cpugroup import sandbox_group
from coderl.tasks import load_tasks
from coderl.types import Task

LEVELS = (1, 64, 256)
SCRIPT = [
    '<tool_call>\n{"name": "view", "arguments": {"path": "calc.py"}}\n</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"text": "def add"}}\n</tool_call>',
    '<tool_call>\n{"name": "str_replace", "arguments": {"path": "calc.py", "old": "a - b", "new": "a + b"}}\n</tool_call>',
    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la && grep -n return calc.py"}}\n</tool_call>',
    '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
]


def _demo_task(root: Path) -> Task:
    task = root / "bench-calc"
    (task / "repo").mkdir(parents=True)
    (task / "repo" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (task / "tests").mkdir()
    (task / "tests" / "test_bench_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    meta = {"id": "bench-calc", "tier": "warmup", "instruction": "add(2, 3) returns -1 instead of 5.",
            "fail_to_pass": ["tests/test_bench_calc.py::test_add"], "pass_to_pass": ["tests/test_bench_calc.py::test_add"]}  # fmt: skip
    (task / "task.yaml").write_text(yaml.safe_dump(meta))
    return load_tasks(f"native:{task}")[0]


async def bench_rollout(
    cfg: Config, latency: float, quick: bool, model_eval: bool, console: Console
) -> dict[str, Any]:
    from coderl.checkpoint import load_tokenizer, resolve_checkpoint

    tokenizer = load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir))
    chat = ChatFormat(tokenizer)
    rollout = RolloutConfig(agent="swe", max_tokens=256, max_turns=len(SCRIPT) + 2)
    contexts = ContextFactory(rollout, cfg.sandbox, chat)
    levels = (1, 16) if quick else LEVELS
    out: dict[str, Any] = {"latency_s": latency, "turns_per_rollout": len(SCRIPT), "levels": {}}
    overheads: list[float] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        progress_bars(console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress,
    ):
        task = _demo_task(Path(tmp))
        bar = progress.add_task("rollouts", total=len(levels) + (1 if model_eval else 0))
        for n in levels:
            progress.update(bar, description=f"{n} concurrent rollouts (scripted engine, bwrap)")
            engine = ScriptedEngine(SCRIPT, tokenizer, latency, per_session=True)
            settings = RolloutSettings(agent="swe", max_engine_requests=n, max_sandboxes=n, grade=False)
            teardowns = Teardowns()  # as the trainer does: sandboxes go down after their results are in
            cpu0, t0 = machine_busy_cpu_s(), time.perf_counter()
            groups = task_groups([task], n)
            results = await run_rollouts(groups, engine, contexts, settings, teardowns=teardowns)
            wall = time.perf_counter() - t0
            await teardowns.drain()  # their CPU is counted, their time is not
            cpu1 = machine_busy_cpu_s()
            ideal = len(SCRIPT) * latency
            cpu_s = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
            cores = os.cpu_count() or 1
            ok = sum(
                r.trajectory.exit_status == "submitted" and "a + b" in r.trajectory.patch for r in results
            )
            overheads += [r.trajectory.metrics.get("framework_s_per_turn", 0.0) for r in results]
            out["levels"][str(n)] = {
                "wall_s": wall,
                "ideal_s": ideal,
                "rollouts_per_s": n / wall,
                "ideal_rollouts_per_s": n / ideal,
                "efficiency": ideal / wall,
                "completed_as_scripted": ok,
                "machine_cpu_s": cpu_s,
                "cpu_ms_per_rollout": None if cpu_s is None else 1000 * cpu_s / n,
                "cpu_bound_efficiency": None if cpu_s is None else min(1.0, ideal / (cpu_s / cores)),
            }
            out[f"efficiency_{n}"] = ideal / wall
            if cpu_s is not None:
                out[f"cpu_bound_efficiency_{n}"] = min(1.0, ideal / (cpu_s / cores))
            progress.advance(bar)
        if model_eval:
            progress.update(bar, description="real model: bundled warmup + easy (swe loop)")
            out["model_eval"] = await _model_eval(cfg, quick)
            progress.advance(bar)
    out["turn_overhead_p50_ms"] = 1000 * percentile(overheads, 50)
    out["sandbox_cpu_group"] = cfg.sandbox.cpu_group and sandbox_group() is not None
    out["burst_gate_ms"] = cfg.sandbox.burst_gate_ms
    out["machine"] = machine_info()
    return out


async def _model_eval(cfg: Config, quick: bool) -> dict[str, Any]:
    from coderl.engine import create_engine
    from coderl.rollout.report import build_report

    tasks = load_tasks("bundled:warmup,easy")
    if quick:
        tasks = tasks[:2]
    r = cfg.rollout
    rollout = r.model_copy(
        update={"agent": "swe", "max_turns": min(r.max_turns, 10), "max_tokens": min(r.max_tokens, 256)}
    )
    engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    await engine.start()
    chat = ChatFormat.for_model(cfg.model)
    settings = RolloutSettings(agent="swe", max_engine_requests=16, max_sandboxes=16, grade=True)
    t0 = time.perf_counter()
    try:
        contexts = ContextFactory(rollout, cfg.sandbox, chat)
        results = await run_rollouts(task_groups(tasks, 1), engine, contexts, settings)
    finally:
        await engine.stop()
    rows = [x.report_row() for x in results]
    report = build_report(rows, {t.id: t.tier for t in tasks}, [1])
    return {
        "tasks": len(tasks),
        "pass@1": report["pass@1"],
        "resolved_ids": report["resolved_ids"],
        "by_tier": report["by_tier"],
        "exit_statuses": report["exit_statuses"],
        "wall_s": time.perf_counter() - t0,
        "settings": {
            "max_turns": rollout.max_turns,
            "max_tokens": rollout.max_tokens,
            "temperature": r.temperature,
        },
    }


def _cpu_cells(level: dict[str, Any]) -> str:
    if level.get("cpu_ms_per_rollout") is None:
        return "n/a | n/a"
    return f"{level['cpu_ms_per_rollout']:.0f} | {level['cpu_bound_efficiency']:.0%}"


def _gate(hold_ms: float | None) -> str:
    if hold_ms is None:
        return "not recorded"
    return f"yes, a turn held at most {hold_ms:g} ms" if hold_ms > 0 else "no (0)"


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    rows = "\n".join(
        f"| {n} | {v['wall_s']:.2f} | {v['ideal_s']:.2f} | {v['rollouts_per_s']:.1f} | {v['ideal_rollouts_per_s']:.1f} | **{v['efficiency']:.0%}** | {v['completed_as_scripted']}/{n} | {_cpu_cells(v)} |"
        for n, v in r["levels"].items()
    )
    model = ""
    if "model_eval" in r:
        e = r["model_eval"]
        model = (
            f"\nReal model (SmolLM2-135M-Instruct, embedded engine, `swe` loop, {e['settings']}), bundled `warmup` + `easy`, "
            f"{e['tasks']} tasks: **pass@1 = {e['pass@1']:.3f}** (resolved: {e['resolved_ids'] or 'none'}); exit statuses "
            f"{e['exit_statuses']}; {e['wall_s']:.0f} s. An honest baseline for a 135M model before any training.\n"
        )
    return f"""## Rollouts (`coderl bench rollout`)

Command: `{r.get("command", "coderl bench rollout")}` — {m["cpu"]}, {m["cores"]} cores. Scripted engine answering every
call after {r["latency_s"]} s; each rollout is the `swe` loop on a real bwrap sandbox making {r["turns_per_rollout"]} calls
(view, search, str_replace, bash `ls`/`grep`, submit), so the latency-bound ideal of one wave is {r["turns_per_rollout"]} × {r["latency_s"]} s.
The wall time ends with the last trajectory; the sandboxes are taken down once the level's last rollout
is done, as in training (their CPU is in the CPU column, their time is not in the wall time).
Sandboxes in the shared CPU-weight group (`sandbox.cpu_group`, root only): {"yes" if r.get("sandbox_cpu_group") else "no"};
commands take turns in bursts (`sandbox.burst_gate_ms`): {_gate(r.get("burst_gate_ms"))}.

| concurrent rollouts | wall (s) | ideal (s) | rollouts/s | ideal rollouts/s | efficiency | finished as scripted | machine CPU per rollout (ms) | CPU-bound ceiling |
|---|---|---|---|---|---|---|---|---|
{rows}

The last two columns: CPU-seconds the whole machine spent during the level (the loop, every sandbox's
bwrap, agent and commands, and anything else running) per rollout, and the efficiency that much CPU
allows on {m["cores"]} cores (ideal ÷ CPU-seconds per core, capped at 100%). Where the ceiling is below
the target, the machine's cores, not the framework's waiting, are the limit.

Target: efficiency ≥ 90% at 256. Framework overhead per turn (chat layer + parsing + bookkeeping, engine and
tools excluded), p50: **{r["turn_overhead_p50_ms"]:.2f} ms** (target under 2 ms).
{model}"""
