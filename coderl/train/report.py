"""``report.html`` of a training run: line plots of the per-step metrics, as inline SVG.

No plotting library: each chart is a few SVG paths, so the report is one self-contained file that
opens anywhere (and costs no dependency).
"""

from __future__ import annotations

import html
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl import allocator
from coderl.train.checkpoints import read_metrics
from coderl.train.metrics import phase_memory, phase_minutes, run_summary
from coderl.train.validation import validation_cells, validation_table

_COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563"]
_W, _H, _PAD = 520, 220, 58

CHARTS: list[tuple[str, list[str]]] = [
    ("Held-out pass@1 (95% interval)", ["val_pass_at_1", "val_sampled_pass_at_1", "val_also_pass_at_1", "val_also2_pass_at_1", "val_also3_pass_at_1"]),
    ("Held-out change F1 against the gold patches (how near the samples came)", ["val_change_f1", "val_sampled_change_f1", "val_also_change_f1", "val_also2_change_f1", "val_also3_change_f1"]),
    ("RL signal: groups that can teach, solved share, reward", ["teaching_groups", "pass_rate", "reward_mean", "shaped_reward_mean"]),
    ("Partial credit (train.patch_credit): mean per unsolved sample, groups teaching by it alone", ["patch_credit_mean", "credit_groups"]),
    ("Truncated samples and turns, tool-call parse failures, samples ending with no change, fix plus breaking edits",
     ["truncated_share", "turn_truncated_share", "parse_failure_rate", "no_change_share", "fix_plus_edits_share"]),
    ("Tool calls and format errors per trajectory", ["tool_calls_mean", "format_errors_mean"]),
    ("Mean |advantage| of trained tokens; share of the |advantage| in groups with no solved sample", ["advantage_abs_mean", "advantage_from_unsolved"]),
    ("Tokens trained on (model tokens in the loss)", ["trained_tokens"]),
    ("Response length (model tokens)", ["response_len_mean", "response_len_max"]),
    ("KL and entropy", ["kl", "entropy"]),
    ("Rollout vs trainer logprob mismatch", ["logprob_mismatch"]),
    ("Gradient norm and clip fraction", ["grad_norm", "clip_fraction"]),
    ("Value head (GAE)", ["value_loss", "explained_variance", "value_clip_fraction"]),
    (
        "Stage times (s)",
        [
            "stage_s/rollout",
            "stage_s/check",
            "stage_s/reference",
            "stage_s/values",
            "stage_s/update",
            "stage_s/sync",
            "stage_s/save",
            "stage_s/validate",
        ],
    ),
]


def _value(row: dict[str, Any], key: str) -> float | None:
    if "/" in key:
        outer, inner = key.split("/", 1)
        nested = row.get(outer)
        value = nested.get(inner) if isinstance(nested, dict) else None
    else:
        value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def line_chart(title: str, rows: list[dict[str, Any]], keys: list[str]) -> str:
    """One SVG chart of ``keys`` against ``step`` (series with no values are left out)."""
    series = []
    bands: dict[
        str, list[tuple[float, float, float]]
    ] = {}  # key -> (step, low, high) where rows carry <key>_ci95
    for key in keys:
        points = [(float(r["step"]), v) for r in rows if (v := _value(r, key)) is not None]
        if points:
            series.append((key, points))
            bands[key] = [
                (float(r["step"]), float(r[f"{key}_ci95"][0]), float(r[f"{key}_ci95"][1]))
                for r in rows
                if _interval(r, key)
            ]
    if not series:
        return ""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts] + [
        v for band in bands.values() for _, lo, hi in band for v in (lo, hi)
    ]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(0.0, min(ys)), max(ys) if max(ys) > min(0.0, min(ys)) else min(0.0, min(ys)) + 1

    def sx(x: float) -> float:
        return _PAD + (x - x0) / (x1 - x0) * (_W - 2 * _PAD)

    def sy(y: float) -> float:
        return _H - _PAD + 10 - (y - y0) / (y1 - y0) * (_H - 2 * _PAD)

    parts = [
        f'<svg viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-weight="600">{html.escape(title)}</text>',
        f'<line x1="{_PAD}" y1="{sy(y0)}" x2="{_W - _PAD}" y2="{sy(y0)}" stroke="#999"/>',
        f'<line x1="{_PAD}" y1="{sy(y0)}" x2="{_PAD}" y2="{sy(y1)}" stroke="#999"/>',
        f'<text x="{_PAD - 4}" y="{sy(y1) + 4}" text-anchor="end" font-size="10">{y1:.3g}</text>',
        f'<text x="{_PAD - 4}" y="{sy(y0) + 4}" text-anchor="end" font-size="10">{y0:.3g}</text>',
        f'<text x="{_PAD}" y="{_H - 12}" font-size="10">step {x0:.0f}</text>',
        f'<text x="{_W - _PAD}" y="{_H - 12}" text-anchor="end" font-size="10">step {x1:.0f}</text>',
    ]
    for i, (key, pts) in enumerate(series):
        colour = _COLOURS[i % len(_COLOURS)]
        for x, lo, hi in bands[key]:  # the 95% interval as an error bar
            parts.append(
                f'<line x1="{sx(x):.1f}" y1="{sy(lo):.1f}" x2="{sx(x):.1f}" y2="{sy(hi):.1f}" stroke="{colour}" '
                'stroke-opacity="0.45" stroke-width="6" stroke-linecap="round"/>'
            )
        path = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(pts))
        parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in pts]
        parts.append(
            f'<text x="{_W - _PAD}" y="{34 + 13 * i}" text-anchor="end" font-size="11" fill="{colour}">'
            f"{html.escape(key)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _interval(row: dict[str, Any], key: str) -> bool:
    ci = row.get(f"{key}_ci95")
    return isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci)


def finish_report(run_dir: Path, console: Console) -> Path:
    """The end of a run: its phases' minutes and peak memory, the validation table and the held-out
    pass@1 printed from ``metrics.jsonl``, and ``report.html`` written; returns the report's path."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    summary = run_summary(rows)
    phases = phase_minutes(rows)
    if phases:
        console.print(
            "phases (minutes): " + " | ".join(f"{name} {minutes:.1f}" for name, minutes in phases)
            + f" | total {sum(m for _, m in phases):.1f}",
            highlight=False,
        )
    peaks = phase_memory(rows)
    if peaks:
        console.print(
            "peak memory of this process (GB): "
            + " | ".join(f"{name} {mb / 1024:.1f}" for name, mb in peaks)
            + f" (C allocator: {allocator.active()})",
            highlight=False,
        )
    for line in validation_table(rows):
        console.print(line, highlight=False, soft_wrap=True)
    if "held-out pass@1" in summary:
        what = "dev" if "validated on" in summary else "held-out"
        console.print(f"{what} pass@1 (start -> end): {summary['held-out pass@1']}")
    return write_report(run_dir, rows, summary)


def write_report(run_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> Path:
    """Write ``report.html`` (plots + summary table) into ``run_dir``; returns its path."""
    charts = [c for title, keys in CHARTS if (c := line_chart(title, rows, keys))]
    table = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in summary.items()
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>coderl training report — {html.escape(run_dir.name)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#111}} .grid{{display:flex;flex-wrap:wrap;gap:16px}}
table{{border-collapse:collapse}} th,td{{text-align:left;padding:3px 10px;border-bottom:1px solid #eee}}</style></head>
<body><h1>Training report: {html.escape(run_dir.name)}</h1>
<p>{sum(1 for r in rows if "pass_rate" in r)} steps; written {time.strftime("%Y-%m-%d %H:%M:%S")}. Per-step metrics are in metrics.jsonl.</p>
{_warnings(rows)}{_validations(rows)}{_phases(rows)}<table>{table}</table>
<div class="grid">{"".join(charts)}</div>
<script type="application/json" id="metrics">{html.escape(json.dumps(rows))}</script>
</body></html>
"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path


def _validations(rows: list[dict[str, Any]]) -> str:
    """The validation points side by side (start, after the warm start, after RL), as in the console."""
    cells = validation_cells(rows)
    if not cells:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cells[0])
    body = "".join(
        "<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(c)}</{'th' if i == 0 else 'td'}>" for i, c in enumerate(r)) + "</tr>"
        for r in cells[1:]
    )
    return f'<h2>Held-out validation</h2><table class="val"><tr>{head}</tr>{body}</table>'


def _phases(rows: list[dict[str, Any]]) -> str:
    phases = phase_minutes(rows)
    if not phases:
        return ""
    parts = " · ".join(f"{html.escape(name)} {minutes:.1f}" for name, minutes in phases)
    return f"<p>Minutes per phase: {parts} · total {sum(m for _, m in phases):.1f}.</p>"


def _warnings(rows: list[dict[str, Any]]) -> str:
    """The run's signal warnings (:mod:`coderl.train.signal`) in a box above everything else."""
    found = [(r["step"], r["signal_warning"]) for r in rows if r.get("signal_warning")]
    if not found:
        return ""
    items = "".join(f"<li>step {step}: {html.escape(str(text))}</li>" for step, text in found)
    return (
        '<div class="warn" style="border:2px solid #ea580c;background:#fff7ed;padding:8px 14px;margin:12px 0">'
        f"<strong>No training signal</strong><ul>{items}</ul></div>"
    )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
