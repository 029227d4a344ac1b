"""Trajectories on disk: an append-only JSONL log (durable at every record) and Parquet shards.

Every finished trajectory is appended to ``trajectories.jsonl`` and flushed at once, so a crash
loses nothing that finished. Every ``shard_size`` records (and at close) the pending ones are also
written as a complete Parquet file ``trajectories/part-NNNNN.parquet``. :func:`read_trajectories`
reads the shards plus any logged records not yet in a shard.

A resumed training run redoes the steps after its checkpoint; what the stopped process had already
rolled out for those steps stays on disk (real samples of that policy), but no update of the run goes
on from it (any it had trained went with the process).
:func:`mark_lost_steps` notes them at the resume in ``trajectories.resumes.jsonl`` (append-only, the
log's row count then and the checkpoint's step), and :func:`read_trajectories` gives those rows
``lost: true``, so each step's trained samples are the rows without it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coderl.types import Trajectory


class TrajectoryStore:
    def __init__(self, run_dir: Path, shard_size: int = 16) -> None:
        self.run_dir = run_dir
        self.shard_dir = run_dir / "trajectories"
        self.log_path = run_dir / "trajectories.jsonl"
        self.shard_size = shard_size
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        self._pending: list[dict[str, Any]] = []
        self._shards = len(list(self.shard_dir.glob("part-*.parquet")))
        self._pending = self._recover()
        self._log = self.log_path.open("a")
        self.count = 0
        self.flush()

    def _recover(self) -> list[dict[str, Any]]:
        """Records a killed writer logged but never put in a shard (they are shard-written first, so
        the log's line order keeps matching the shards'); a line cut by the kill is dropped."""
        if not self.log_path.is_file():
            return []
        import pyarrow.parquet as pq

        in_shards = sum(pq.read_metadata(p).num_rows for p in self.shard_dir.glob("part-*.parquet"))
        lines = self.log_path.read_text().splitlines()
        kept: list[str] = []
        for line in lines:
            try:
                json.loads(line)
            except json.JSONDecodeError:
                continue
            kept.append(line)
        if len(kept) != len(lines):
            tmp = self.log_path.with_name(self.log_path.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(self.log_path)
        return [json.loads(line) for line in kept[in_shards:]]

    def add(self, traj: Trajectory, extra: dict[str, Any] | None = None) -> None:
        """Record a rollout: one row per token sequence (``part`` 0 is the trajectory, 1.. its parts)."""
        for part, seq in enumerate(traj.sequences()):
            row = {**asdict(seq), **(extra or {}), "part": part}
            row.pop("parts")
            self._log.write(json.dumps(row) + "\n")
            self._pending.append(row)
            self.count += 1
        self._log.flush()
        if len(self._pending) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [_flatten(r) for r in self._pending]
        tmp = self.shard_dir / f".part-{self._shards:05d}.parquet.tmp"
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.rename(self.shard_dir / f"part-{self._shards:05d}.parquet")
        self._shards += 1
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        self._log.close()


def _flatten(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["metrics"] = json.dumps(row.get("metrics", {}))
    if "grade" in out:
        out["grade"] = json.dumps(out["grade"])
    return out


RESUMES = "trajectories.resumes.jsonl"


def mark_lost_steps(run_dir: Path, last_step: int) -> int:
    """At a resume from step ``last_step``'s checkpoint: note that the rows logged so far with a later
    ``step`` belong to steps the stop lost (the resumed run rolls them out again). Returns how many
    there are; nothing is written when there are none. Call it after the run's :class:`TrajectoryStore`
    is open (its recovery drops a line the kill cut)."""
    rows = _logged(run_dir / "trajectories.jsonl")
    lost = sum(1 for r in rows if int(r.get("step", 0)) > last_step)
    if lost:
        marks = run_dir / RESUMES
        cut = marks.is_file() and not marks.read_bytes().endswith(b"\n")  # a line a kill cut: not glued to
        with marks.open("a") as fh:
            fh.write(("\n" if cut else "") + json.dumps({"from_step": last_step, "rows": len(rows), "lost": lost}) + "\n")
    return lost


def _logged(log: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if log.is_file():
        for line in log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill (the store drops it when it opens)
                continue
    return out


def _mark_lost(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    marks = run_dir / RESUMES
    if not marks.is_file():
        return
    for line in marks.read_text().splitlines():
        try:
            mark = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: that resume's rows stay unmarked
            continue
        for row in rows[: int(mark["rows"])]:
            if int(row.get("step", 0)) > int(mark["from_step"]):
                row["lost"] = True


def read_trajectories(run_dir: Path) -> list[dict[str, Any]]:
    """All stored trajectories of a run (shards, then logged records newer than the shards), in the
    order they were recorded; rows of steps a resume redid carry ``lost: true`` (:func:`mark_lost_steps`)."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for shard in sorted((run_dir / "trajectories").glob("part-*.parquet")):
        # use_threads=False: Arrow's reader pool, still winding down when a process exits right after a
        # read, can abort the process at exit ("terminate called without an active exception",
        # apache/arrow#34314); a coderl train once exited with SIGABRT after writing its report this way.
        # The shards are small: one thread reads them as fast.
        for row in pq.read_table(shard, use_threads=False).to_pylist():
            row["metrics"] = (
                json.loads(row["metrics"]) if isinstance(row.get("metrics"), str) else row.get("metrics")
            )
            if isinstance(row.get("grade"), str):
                row["grade"] = json.loads(row["grade"])
            rows.append(row)
    log = run_dir / "trajectories.jsonl"
    if log.is_file():
        logged = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        rows.extend(logged[len(rows) :])
    _mark_lost(run_dir, rows)
    return rows
