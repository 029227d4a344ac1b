"""What the viewer shows, computed from a run directory (no web code here)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from coderl.rollout.store import read_trajectories
from coderl.yamlio import load_yaml


def find_runs(root: Path) -> list[Path]:
    """``root`` itself if it is a run directory, else the run directories below it (one level)."""
    if (root / "config.yaml").is_file():
        return [root]
    return sorted(
        (p for p in root.iterdir() if (p / "config.yaml").is_file()), key=lambda p: p.name, reverse=True
    )


def run_summary(run: Path) -> dict[str, Any]:
    report = json.loads((run / "report.json").read_text()) if (run / "report.json").is_file() else None
    return {
        "name": run.name,
        "report": report,
        "trajectories": sum(1 for _ in open(run / "trajectories.jsonl"))
        if (run / "trajectories.jsonl").is_file()
        else 0,
    }


def trajectory_rows(run: Path) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "task_id": t["task_id"],
            "reward": t.get("reward", 0.0),
            "resolved": bool(t.get("resolved")),
            "turns": t.get("num_turns", 0),
            "exit_status": t.get("exit_status", ""),
            "tokens": len(t.get("response_ids", [])),
            "error": t.get("error"),
            "lost": bool(t.get("lost")),  # rolled out for a step a resume redid (never trained on)
        }
        for i, t in enumerate(read_trajectories(run))
    ]


@lru_cache(maxsize=4)
def _tokenizer(model_path: str | None, cache_dir: str | None) -> Any:
    from coderl.checkpoint import load_tokenizer, resolve_checkpoint

    return load_tokenizer(resolve_checkpoint(model_path, cache_dir))


def trajectory_detail(run: Path, index: int) -> dict[str, Any]:
    """One trajectory: segments (runs of model / environment tokens as text), the token stream with
    masks and logprobs, the patch and the grade."""
    rows = read_trajectories(run)
    if not 0 <= index < len(rows):
        raise IndexError(f"run {run.name} has {len(rows)} trajectories; no index {index}")
    t = rows[index]
    cfg = load_yaml((run / "config.yaml").read_text()) or {}
    model = cfg.get("model", {})
    tok = _tokenizer(model.get("path"), model.get("cache_dir"))
    ids, mask, lps = t["response_ids"], t["response_mask"], t["logprobs"]
    tokens = [
        {"id": i, "text": tok.decode([i]), "mask": m, "logprob": lp}
        for i, m, lp in zip(ids, mask, lps, strict=True)
    ]
    segments: list[dict[str, Any]] = []
    start = 0
    for k in range(1, len(ids) + 1):
        if k == len(ids) or mask[k] != mask[start]:
            segments.append(
                {"kind": "model" if mask[start] else "environment", "text": tok.decode(ids[start:k])}
            )
            start = k
    return {
        "task_id": t["task_id"],
        "group_id": t.get("group_id"),
        "exit_status": t.get("exit_status"),
        "reward": t.get("reward"),
        "resolved": bool(t.get("resolved")),
        "error": t.get("error"),
        "policy_version": t.get("policy_version"),
        "metrics": t.get("metrics"),
        "prompt": tok.decode(t["prompt_ids"]),
        "segments": segments,
        "tokens": tokens,
        "patch": t.get("patch", ""),
        "grade": t.get("grade"),
    }
