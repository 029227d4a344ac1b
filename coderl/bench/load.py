"""``coderl bench load``: the embedded engine on a shared machine. Its decode rate alone, then beside
CPU hogs (other torch processes computing, the way two other model servers on the machine do), as a
ratio, for each OpenMP wait policy the engine process could run under.

Every figure is measured in a fresh process (``python -m coderl.bench.load rate JSON``), because
OpenMP reads its settings once, when torch loads it; the hogs are processes of their own
(``python -m coderl.bench.load hog``), each a torch matmul loop on all the cores. Alone and loaded
runs of one policy alternate, so drift on a noisy machine hits both.

Owns: the measurement and its report. Must not: change how coderl runs (the policy it chooses is
:mod:`coderl.threads`'s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from rich.console import Console

from coderl import signals
from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.progress import progress_bars
from coderl.threads import SPIN_COUNT

POLICIES: dict[str, dict[str, str]] = {
    "libgomp": {"GOMP_SPINCOUNT": "300000"},
    "coderl": {"GOMP_SPINCOUNT": SPIN_COUNT},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
"""OpenMP settings of the engine process: libgomp's default (threads spin up to 300,000 times between
parallel regions, unless the process holds more threads than cores: its value when neither variable is
set), coderl's (:func:`coderl.threads.spin_briefly`: 1,000 spins) and passive (they sleep at once).
The first is the baseline of ``vs_first_alone``."""


def _rate_in_process(spec: dict[str, Any]) -> dict[str, float]:
    from coderl.bench.engine import _engine_rate, _prompts
    from coderl.engine.embedded import EmbeddedEngine
    from coderl.engine.params import SamplingParams

    async def run() -> dict[str, float]:
        cfg = Config.model_validate(spec["config"])
        engine = EmbeddedEngine(cfg.engine, cfg.model, seed=cfg.run.seed)
        await engine.start()
        try:
            prompts = _prompts(engine.runner.vocab_size, spec["requests"], 48, 400, cfg.run.seed)
            await engine.generate(prompts[0][:16], SamplingParams(max_tokens=4, ignore_eos=True))
            params = SamplingParams(max_tokens=spec["out_len"], temperature=0, ignore_eos=True)
            rate, _ = await _engine_rate(engine, prompts, params, spec["concurrency"])
        finally:
            await engine.stop()
        return {"tok_s": rate}

    return signals.run(run())


def _hog() -> None:
    import torch

    a = torch.randn(768, 768)
    while True:
        a = torch.tanh(a @ a)


def _start_hogs(n: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-m", "coderl.bench.load", "hog"], stdout=subprocess.DEVNULL)
        for _ in range(n)
    ]


def _stop(hogs: list[subprocess.Popen[bytes]]) -> None:
    for h in hogs:
        h.kill()
    for h in hogs:
        h.wait()


def rate_spec(cfg: Config, requests: int, concurrency: int, out_len: int, **model: Any) -> dict[str, Any]:
    """What a fresh process measures (:func:`_measure`): ``cfg``'s engine and model (``model``: keys of
    the model section replaced) decoding ``requests`` greedy requests, ``concurrency`` at once."""
    return {
        "config": {"engine": cfg.engine.model_dump(mode="json"),
                   "model": cfg.model.model_dump(mode="json") | model, "run": {"seed": cfg.run.seed}},
        "requests": requests, "concurrency": concurrency, "out_len": out_len,
    }  # fmt: skip


def _measure(spec: dict[str, Any], env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "coderl.bench.load", "rate", json.dumps(spec)],
        capture_output=True, text=True, env=env, timeout=1800,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"the engine's measurement failed (exit {out.returncode}): {out.stderr[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["tok_s"])


def bench_load(
    cfg: Config, quick: bool = False, hogs: int | None = None, console: Console | None = None
) -> dict[str, Any]:
    """Decode tok/s of the embedded engine (``cfg``'s engine and model) at 8 concurrent requests,
    alone and beside ``hogs`` hog processes (default: one per core), per OpenMP policy."""
    console = console or Console(stderr=True)
    n_hogs = hogs if hogs is not None else (os.cpu_count() or 1)
    spec = rate_spec(cfg, 8 if quick else 16, 8, 16 if quick else 48)
    rounds = 1 if quick else 2
    results: dict[str, dict[str, list[float]]] = {p: {"alone": [], "loaded": []} for p in POLICIES}
    with progress_bars(console, name="bench load") as progress:
        bar = progress.add_task("engine alone / beside hogs", total=rounds * len(POLICIES) * 2, info="")
        for _ in range(rounds):
            for policy, extra in POLICIES.items():
                env = {**os.environ, **extra}
                results[policy]["alone"].append(_measure(spec, env))
                progress.advance(bar)
                started = _start_hogs(n_hogs)
                try:
                    time.sleep(1.0)  # the hogs import torch and start computing
                    results[policy]["loaded"].append(_measure(spec, env))
                finally:
                    _stop(started)
                progress.advance(bar)
    summary: dict[str, dict[str, Any]] = {}
    for policy, r in results.items():
        alone, loaded = sum(r["alone"]) / len(r["alone"]), sum(r["loaded"]) / len(r["loaded"])
        summary[policy] = {"alone_tok_s": alone, "loaded_tok_s": loaded, "loaded_ratio": loaded / alone,
                           "runs": r}  # fmt: skip
    base = float(next(iter(summary.values()))["alone_tok_s"])
    for s in summary.values():
        s["vs_first_alone"] = float(s["alone_tok_s"]) / base
    return {
        "policies": summary,
        "hogs": n_hogs,
        "setup": {"concurrency": spec["concurrency"], "requests": spec["requests"], "out_len": spec["out_len"],
                  "dtype": cfg.model.dtype, "rounds": rounds, "quick": quick},
        "machine": machine_info(),
    }  # fmt: skip


def to_markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r["setup"]
    rows = "\n".join(
        f"| {name} | `{' '.join(f'{k}={v}' for k, v in POLICIES.get(name, {}).items()) or '(libgomp default)'}` "
        f"| {p['alone_tok_s']:.1f} ({p['vs_first_alone']:.2f}×) | {p['loaded_tok_s']:.1f} | **{p['loaded_ratio']:.2f}×** |"
        for name, p in r["policies"].items()
    )
    return f"""## The engine on a shared machine (`coderl bench load`)

Command: `{r.get("command", "coderl bench load")}` — {m["cpu"]}, {m["cores"]} cores, torch {m["torch"]},
{s["dtype"]}, SmolLM2-135M-Instruct. Decode rate at {s["concurrency"]} concurrent requests ({s["requests"]}
requests, {s["out_len"]} output tokens each, greedy), each figure a fresh process; "beside hogs" runs
{r["hogs"]} other torch processes computing matmuls on all cores at the same time (like two other model
servers). Mean of {s["rounds"]} alternating rounds. "alone" in brackets: ÷ the first row's alone rate.
coderl's own processes run with the `coderl` row's setting unless the user sets `GOMP_SPINCOUNT` or
`OMP_WAIT_POLICY` (`coderl.threads.spin_briefly`).

| engine process | OpenMP setting | alone tok/s | beside hogs tok/s | beside hogs ÷ alone |
|---|---|---|---|---|
{rows}
"""


def main(argv: list[str]) -> None:
    if argv[:1] == ["hog"]:
        _hog()
    elif argv[:1] == ["rate"] and len(argv) == 2:
        print(json.dumps(_rate_in_process(json.loads(argv[1]))))
    else:
        raise SystemExit("usage: python -m coderl.bench.load hog | rate SPEC_JSON")


if __name__ == "__main__":
    main(sys.argv[1:])
