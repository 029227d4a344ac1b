"""Router logic with scripted replicas (orchestration only; the real engines have their own tests)."""

from __future__ import annotations

import asyncio

import pytest

from coderl.engine import SamplingParams
from coderl.engine.router import Router
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import EngineUnavailableError

P = SamplingParams(max_tokens=2)


async def test_new_requests_go_to_least_in_flight() -> None:
    reps = [ScriptedEngine(name="a", latency_s=0.2), ScriptedEngine(name="b", latency_s=0.2), ScriptedEngine(name="c", latency_s=0.2)]
    router = Router(reps)
    await router.start()
    results = await asyncio.gather(*(router.generate([1, 2], P) for _ in range(6)))
    assert sorted(len(r.calls) for r in reps) == [2, 2, 2]
    assert {c.replica for c in results} == {"a", "b", "c"}
    await router.stop()


async def test_sessions_stick_to_their_replica() -> None:
    reps = [ScriptedEngine(name="a", latency_s=0.01), ScriptedEngine(name="b", latency_s=0.01)]
    router = Router(reps)
    first = {s: (await router.generate([1], P, session_id=s)).replica for s in ("s1", "s2", "s3", "s4")}
    for _ in range(3):
        for s, rep in first.items():
            assert (await router.generate([1, 2, 3], P, session_id=s)).replica == rep
    assert len(set(first.values())) == 2  # sessions spread over both replicas


async def test_sticky_entries_are_lru_bounded() -> None:
    router = Router([ScriptedEngine(name="a"), ScriptedEngine(name="b")], max_sessions=2)
    for s in ("x", "y", "z"):
        await router.generate([1], P, session_id=s)
    assert router.stats()["sessions"] == 2
    assert "x" not in router._sticky


async def test_dead_replica_is_taken_out_and_sessions_move() -> None:
    a, b = ScriptedEngine(name="a"), ScriptedEngine(name="b")
    router = Router([a, b], probe_interval_s=0.05)
    await router.start()
    on_a = [
        s for s in (f"s{i}" for i in range(6)) if (await router.generate([1], P, session_id=s)).replica == "a"
    ]
    assert on_a
    a.dead = True
    for s in on_a:  # the request is retried on b, transparently
        assert (await router.generate([1], P, session_id=s)).replica == "b"
    assert router.stats()["replicas"][0]["alive"] is False
    assert router.stats()["moved_sessions"] >= len(on_a)
    # sessions now live on b and stay there
    assert (await router.generate([1], P, session_id=on_a[0])).replica == "b"
    a.dead = False  # the probe brings it back
    for _ in range(50):
        if router.stats()["replicas"][0]["alive"]:
            break
        await asyncio.sleep(0.02)
    assert router.stats()["replicas"][0]["alive"] is True
    await router.stop()


async def test_all_dead_raises_unavailable() -> None:
    a = ScriptedEngine(name="a")
    a.dead = True
    router = Router([a])
    with pytest.raises(EngineUnavailableError):
        await router.generate([1], P)


async def test_update_weights_reaches_every_live_replica() -> None:
    reps = [ScriptedEngine(name="a"), ScriptedEngine(name="b")]
    router = Router(reps)
    assert await router.update_weights("/ckpt") == 1
    assert [r.policy_version for r in reps] == [1, 1] and router.policy_version == 1
