"""The durable record: sessions and calls in SQLite (WAL).

Durability: every call is one committed transaction *before* its response is sent. In WAL mode
``synchronous=NORMAL`` (the default, ``proxy.db_synchronous``) a committed transaction survives the
proxy being killed (SIGKILL, OOM) because it is in the WAL file the OS already holds; only a power cut
or kernel crash can lose the last ones. ``full`` also fsyncs the WAL at every commit (power-cut safe) at
the price of one fsync per call. Token ids and logprobs are stored as packed arrays (int32 / float64),
which keeps a call's row small and its write and read fast.

One connection, used from the event loop thread under a lock: rows are small, so a write takes tens of
microseconds, less than a hop to a worker thread would.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coderl.errors import ConfigError, ProxyError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  secret_hash TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at REAL NOT NULL,
  last_active REAL NOT NULL,
  metadata TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  api TEXT NOT NULL,
  request_key TEXT NOT NULL,
  request_body TEXT NOT NULL,
  canon TEXT NOT NULL,
  tools_key TEXT NOT NULL,
  base_call_id INTEGER,
  prompt_ids BLOB NOT NULL,
  completion_ids BLOB NOT NULL,
  logprobs BLOB NOT NULL,
  finish_reason TEXT NOT NULL,
  policy_version INTEGER NOT NULL,
  result TEXT NOT NULL,
  timing TEXT NOT NULL,
  created_at REAL NOT NULL,
  UNIQUE (session_id, request_key)
);
CREATE INDEX IF NOT EXISTS calls_by_session ON calls (session_id, id);
"""


@dataclass
class SessionRow:
    id: str
    secret_hash: str
    status: str
    """active | complete | expired"""
    created_at: float
    last_active: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallRow:
    """One recorded call: what was asked, the ids sent to the engine and what it sampled."""

    session_id: str
    api: str
    """chat | completions | messages | responses"""
    request_key: str
    """Idempotency key: 'idem:<Idempotency-Key header>' or 'body:<sha256 of api + body>'."""
    request_body: str
    """The request body as received (text)."""
    canon: list[str]
    """Canonical request messages + the reply (see coderl.proxy.render); for completions: [prompt, text]."""
    tools_key: str
    base_call_id: int | None
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    policy_version: int
    result: dict[str, Any]
    """Dialect-neutral reply: content, tool_calls, finish, stop_sequence, response id, created, model."""
    timing: dict[str, float]
    created_at: float = 0.0
    id: int = 0

    def public(self) -> dict[str, Any]:
        """The row as JSON for GET /sessions/{id}."""
        try:
            body: Any = json.loads(self.request_body)
        except ValueError:
            body = self.request_body
        return {
            "id": self.id,
            "api": self.api,
            "request": body,
            "request_key": self.request_key,
            "base_call_id": self.base_call_id,
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            "policy_version": self.policy_version,
            "result": self.result,
            "timing": self.timing,
            "created_at": self.created_at,
        }


def _ids_blob(ids: list[int]) -> bytes:
    return array("i", ids).tobytes()


def _floats_blob(values: list[float]) -> bytes:
    return array("d", values).tobytes()


def _ids(blob: bytes) -> list[int]:
    out = array("i")
    out.frombytes(blob)
    return out.tolist()


def _floats(blob: bytes) -> list[float]:
    out = array("d")
    out.frombytes(blob)
    return out.tolist()


class Store:
    """SQLite record of sessions and calls. Open with :meth:`open`, close with :meth:`close`."""

    def __init__(self, path: Path, synchronous: str = "normal") -> None:
        self.path = path
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def open(self) -> Store:
        if self._conn is None:
            if self.path.is_dir():
                raise ConfigError(f"proxy.db {str(self.path)!r} is a folder; name the SQLite file of the record")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.executescript(_SCHEMA)
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise ConfigError(
                    f"proxy.db {str(self.path)!r} cannot hold the record ({exc}); name a new file or an earlier record"
                ) from None
            self._conn = conn
        return self

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ProxyError(f"the proxy record {self.path} is closed; call Store.open() first")
        return self._conn

    # ------------------------------------------------------------------ sessions
    def create_session(self, session_id: str, secret_hash: str, metadata: dict[str, Any]) -> SessionRow:
        now = time.time()
        row = SessionRow(session_id, secret_hash, "active", now, now, metadata)
        with self._lock:
            self.conn.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)",
                (row.id, row.secret_hash, row.status, row.created_at, row.last_active, json.dumps(metadata)),
            )
        return row

    def get_session(self, session_id: str) -> SessionRow | None:
        with self._lock:
            r = self.conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if r is None:
            return None
        return SessionRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]))

    def list_sessions(self, status: str | None = None, limit: int = 100) -> list[tuple[SessionRow, int]]:
        """The newest sessions first (with ``status`` only, if given), each with its number of calls."""
        query = (
            "SELECT s.*, (SELECT COUNT(*) FROM calls c WHERE c.session_id = s.id) FROM sessions s"
            + (" WHERE s.status = ?" if status else "")
            + " ORDER BY s.created_at DESC LIMIT ?"
        )
        with self._lock:
            rows = self.conn.execute(query, (*([status] if status else []), limit)).fetchall()
        return [(SessionRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])), int(r[6])) for r in rows]

    def set_status(self, session_id: str, status: str) -> None:
        with self._lock:
            self.conn.execute("UPDATE sessions SET status = ? WHERE id = ?", (status, session_id))

    def touch(self, session_id: str, when: float) -> None:
        with self._lock:
            self.conn.execute(
                "UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ?", (when, session_id)
            )

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            self.conn.execute("DELETE FROM calls WHERE session_id = ?", (session_id,))
            cur = self.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return cur.rowcount > 0

    def expire_idle(self, cutoff: float) -> list[str]:
        """Mark active sessions idle since before ``cutoff`` as expired; returns their ids."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT id FROM sessions WHERE status = 'active' AND last_active < ?", (cutoff,)
            ).fetchall()
            self.conn.execute(
                "UPDATE sessions SET status = 'expired' WHERE status = 'active' AND last_active < ?",
                (cutoff,),
            )
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ calls
    def add_call(self, call: CallRow) -> int:
        """Commit one call (and the session's activity) in one transaction; returns the call id."""
        call.created_at = call.created_at or time.time()
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN")
            try:
                cur = conn.execute(
                    "INSERT INTO calls (session_id, api, request_key, request_body, canon, tools_key, "
                    "base_call_id, prompt_ids, completion_ids, logprobs, finish_reason, policy_version, "
                    "result, timing, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        call.session_id,
                        call.api,
                        call.request_key,
                        call.request_body,
                        json.dumps(call.canon, ensure_ascii=False),
                        call.tools_key,
                        call.base_call_id,
                        _ids_blob(call.prompt_ids),
                        _ids_blob(call.completion_ids),
                        _floats_blob(call.logprobs),
                        call.finish_reason,
                        call.policy_version,
                        json.dumps(call.result, ensure_ascii=False),
                        json.dumps(call.timing),
                        call.created_at,
                    ),
                )
                conn.execute(
                    "UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ?",
                    (call.created_at, call.session_id),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        call.id = int(cur.lastrowid or 0)
        return call.id

    def find_call(self, session_id: str, request_key: str) -> CallRow | None:
        with self._lock:
            r = self.conn.execute(
                "SELECT * FROM calls WHERE session_id = ? AND request_key = ?", (session_id, request_key)
            ).fetchone()
        return None if r is None else _call(r)

    def calls(self, session_id: str) -> list[CallRow]:
        with self._lock:
            rows = self.conn.execute(
                "SELECT * FROM calls WHERE session_id = ? ORDER BY id", (session_id,)
            ).fetchall()
        return [_call(r) for r in rows]


def _call(r: tuple[Any, ...]) -> CallRow:
    return CallRow(
        id=r[0],
        session_id=r[1],
        api=r[2],
        request_key=r[3],
        request_body=r[4],
        canon=json.loads(r[5]),
        tools_key=r[6],
        base_call_id=r[7],
        prompt_ids=_ids(r[8]),
        completion_ids=_ids(r[9]),
        logprobs=_floats(r[10]),
        finish_reason=r[11],
        policy_version=r[12],
        result=json.loads(r[13]),
        timing=json.loads(r[14]),
        created_at=r[15],
    )
