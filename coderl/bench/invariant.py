"""``coderl bench invariant``: what batch invariance (``engine.batch_invariant``) costs the embedded
engine on agent sessions, and what running a step's rows in one call (packed float32) saves.

The workload is sessions of greedy turns, all at once, as a validation sends them: with
``--trajectories FILE`` the model turns of a run's recorded trajectories (each trajectory one session,
its turns one after the other, each sent with the context it had and as many tokens as it wrote, to
the model that wrote them, ``model.path``); without it, one-turn sessions asking the model to copy a
bundled function. Modes, each in an engine of its own, alternating over the rounds:

- ``off``: no request invariant (batched decode attention where the engine has it, shared prompts);
- ``greedy``: the config's engine as it is (the main job's setting), greedy requests the same bits
  whatever shares their steps;
- ``greedy, 32-row blocks`` (only where the linear layers are packed, float32 on the CPU): the same,
  with the step's rows projected in blocks of at most 32 as before packing made every row count give
  a row the same bits;
- ``greedy, unshared pieces`` (where ``engine.invariant_chunk`` is below ``prefill_chunk`` and
  ``share_prompts`` is on): greedy requests prefill in ``prefill_chunk`` pieces and take no other
  session's, as before invariant sessions shared their system prompt's pieces.

Every mode should write the same tokens (greedy, and the modes change only the arithmetic's order):
``same_tokens`` counts the sessions that agree with ``greedy``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from coderl.bench.report import machine_info
from coderl.bench.speculate import Session, copy_requests, trajectory_sessions
from coderl.config import Config
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.engine.runner import ROW_BLOCK
from coderl.progress import progress_bars

BLOCKS = "greedy, 32-row blocks"
UNSHARED = "greedy, unshared pieces"


async def _run(
    cfg: Config, mode: str, sessions: list[Session]
) -> tuple[dict[str, Any], list[list[list[int]]], bool]:
    """One mode's run: its figures, the sessions' tokens, and whether the engine's linear layers were
    packed (its rows projected in blocks of more than 32)."""
    setting = "off" if mode == "off" else cfg.engine.batch_invariant
    if setting == "off" and mode != "off":
        setting = "greedy"
    update: dict[str, Any] = {"batch_invariant": setting}
    if mode == UNSHARED:
        update |= {"share_prompts": False, "invariant_chunk": cfg.engine.prefill_chunk}
    engine = EmbeddedEngine(cfg.engine.model_copy(update=update), cfg.model, seed=cfg.run.seed)
    await engine.start()
    packed = engine.runner.row_block != ROW_BLOCK
    try:
        if mode == BLOCKS:
            engine.runner.row_block = ROW_BLOCK
        await engine.generate(
            sessions[0][0][0][:16], SamplingParams(max_tokens=4, ignore_eos=True)
        )  # warm-up
        before = engine.stats()

        async def one(i: int, turns: Session) -> list[list[int]]:
            out = []
            for prompt, n in turns:
                params = SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)
                out.append((await engine.generate(prompt, params, session_id=f"bench-{i}")).token_ids)
            return out

        t0 = time.perf_counter()
        outputs = await asyncio.gather(*(one(i, s) for i, s in enumerate(sessions)))
        seconds = time.perf_counter() - t0
        after = engine.stats()
    finally:
        await engine.stop()  # one engine thread (and its OpenMP team) at a time
    tokens = sum(len(turn) for session in outputs for turn in session)
    counts = {k: after[k] - before[k] for k in ("steps", "prefill_tokens", "shared_prompt_tokens")}
    return {"tok_s": tokens / seconds, "tokens": tokens, "seconds": seconds, **counts}, outputs, packed


async def bench_invariant(
    cfg: Config, trajectories: Path | None = None, quick: bool = False, console: Console | None = None
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    if trajectories is not None:
        sessions = trajectory_sessions(trajectories, 4 if quick else 24)
    else:
        from coderl.checkpoint import load_tokenizer, resolve_checkpoint

        tokenizer = load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir))
        sessions = [[r] for r in copy_requests(tokenizer, 4 if quick else 24, 32 if quick else 128)]
    modes = ["greedy", "off"]  # and 32-row blocks where the first run finds the weights packed
    if cfg.engine.share_prompts and cfg.engine.invariant_chunk < cfg.engine.prefill_chunk:
        modes.append(UNSHARED)
    rounds = 1 if quick else 2
    runs: dict[str, list[dict[str, Any]]] = {}
    outs: dict[str, list[list[list[int]]]] = {}
    packed = False
    with progress_bars(
        console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()
    ) as progress:
        bar = progress.add_task("invariant", total=rounds * (len(modes) + 1))
        for r in range(rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                progress.update(bar, description=f"round {r + 1}: {mode}")
                run, out, engine_packed = await _run(cfg, mode, sessions)
                runs.setdefault(mode, []).append(run)
                outs.setdefault(mode, out)
                progress.advance(bar)
                if r == 0 and mode == "greedy":  # the first run: the list this loop walks grows by one
                    packed = engine_packed
                    if packed:
                        modes.append(BLOCKS)
                    else:
                        progress.update(bar, total=rounds * len(modes))
    tok_s = {m: sum(x["tok_s"] for x in runs[m]) / rounds for m in modes}
    return {
        "modes": modes,
        "tok_s": tok_s,
        "runs": runs,
        "greedy_vs_off": tok_s["greedy"] / tok_s["off"],
        **({"whole_step_vs_blocks": tok_s["greedy"] / tok_s[BLOCKS]} if packed else {}),
        **({"shared_vs_unshared": tok_s["greedy"] / tok_s[UNSHARED]} if UNSHARED in modes else {}),
        "same_tokens": {m: sum(a == b for a, b in zip(outs[m], outs["greedy"], strict=True)) for m in modes},
        "setup": {
            "sessions": len(sessions),
            "turns": sum(map(len, sessions)),
            "workload": str(trajectories) if trajectories is not None else "copy a bundled function",
            "model": str(cfg.model.path or "SmolLM2-135M-Instruct"),
            "dtype": cfg.model.dtype,
            "packed": packed,
            "speculate": cfg.engine.speculate,
            "invariant_chunk": cfg.engine.invariant_chunk,
            "prefill_chunk": cfg.engine.prefill_chunk,
            "max_batch_size": cfg.engine.max_batch_size,
            "rounds": rounds,
            "quick": quick,
        },
        "machine": machine_info(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r["setup"]
    rows = []
    for mode in r["modes"]:
        per = " / ".join(f"{x['tok_s']:.1f}" for x in r["runs"][mode])
        steps = " / ".join(str(x["steps"]) for x in r["runs"][mode])
        first = r["runs"][mode][0]
        rows.append(
            f"| {mode} | **{r['tok_s'][mode]:.1f}** | {per} | {steps} | {first['prefill_tokens']:,} | "
            f"{first['shared_prompt_tokens']:,} | {r['same_tokens'][mode]} of {s['sessions']} |"
        )
    table = "\n".join(rows)
    ratios = f"greedy ÷ off: **{r['greedy_vs_off']:.2f}×**"
    if "whole_step_vs_blocks" in r:
        ratios += (
            f"; greedy (a step's rows in one call) ÷ 32-row blocks: **{r['whole_step_vs_blocks']:.2f}×**"
        )
    if "shared_vs_unshared" in r:
        ratios += f"; greedy (shared {s['invariant_chunk']}-token pieces) ÷ unshared pieces: **{r['shared_vs_unshared']:.2f}×**"
    return f"""## What batch invariance costs (`coderl bench invariant`)

Command: `{r.get("command", "coderl bench invariant")}` — {m["cpu"]}, {m["cores"]} cores, torch {m["torch"]},
dtype {s["dtype"]}{" (linear layers packed)" if s["packed"] else ""}, model {s["model"]}, `engine.speculate={s["speculate"]}`,
`max_batch_size={s["max_batch_size"]}`, `prefill_chunk={s["prefill_chunk"]}`, `invariant_chunk={s["invariant_chunk"]}`. {s["sessions"]} greedy sessions at once ({s["turns"]} turns; {s["workload"]}),
each mode an engine of its own, {s["rounds"]} alternating round(s).

| mode | tok/s (mean) | per round | engine steps | prompt tokens prefilled | taken from another session | same tokens as greedy |
|---|---|---|---|---|---|---|
{table}

{ratios}
"""
