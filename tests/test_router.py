"""Router logic with scripted replicas (orchestration only; the real engines have their own tests)."""

from __future__ import annotations

import asyncio

import pytest

from coderl.engine import SamplingParams
from coderl.engine.router import Router
from coderl.engine.scripted import ScriptedEngine
from coderl.engine.sticky import StickySessions
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


def test_sticky_sessions_by_hand() -> None:
    sticky: StickySessions[int] = StickySessions(2)
    sticky.pin("a", 0)
    sticky.pin("b", 1)
    assert sticky.get("a") == 0  # "a" is now the most recently used
    sticky.pin("c", 1)  # evicts "b", the least recently used
    assert "b" not in sticky and len(sticky) == 2
    assert sticky.drop_where(lambda k: k == 1) == 1 and "c" not in sticky
    assert sticky.drop("a") == 0 and sticky.drop("a") is None and sticky.get("zz") is None
    with pytest.raises(ValueError, match="max_sessions"):
        StickySessions(0)


async def test_sticky_entries_are_lru_bounded() -> None:
    router = Router([ScriptedEngine(name="a"), ScriptedEngine(name="b")], max_sessions=2)
    for s in ("x", "y", "z"):
        await router.generate([1], P, session_id=s)
    assert router.stats()["sessions"] == 2
    assert "x" not in router._sticky


async def test_an_ended_session_leaves_the_router_and_its_replica_is_told() -> None:
    reps = [ScriptedEngine(name="a"), ScriptedEngine(name="b")]
    router = Router(reps)
    served = (await router.generate([1], P, session_id="s")).replica
    await router.end_session("s")
    await router.end_session("never-seen")  # nothing to tell anyone
    assert "s" not in router._sticky
    assert [r.ended for r in reps] == ([["s"], []] if served == "a" else [[], ["s"]])


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


async def test_release_weights_reaches_every_live_replica_and_says_whether_one_let_go() -> None:
    released: list[str] = []

    class Releasing(ScriptedEngine):
        async def release_weights(self) -> bool:
            released.append(self.name)
            return True

    assert not await Router([ScriptedEngine(name="a"), ScriptedEngine(name="b")]).release_weights()  # kept
    assert await Router([ScriptedEngine(name="a"), Releasing(name="b"), Releasing(name="c")]).release_weights()
    assert released == ["b", "c"]


async def _until_alive(router: Router, idx: int) -> None:
    for _ in range(100):
        if router.stats()["replicas"][idx]["alive"]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"replica {idx} did not come back: {router.stats()}")


async def test_replica_that_missed_an_update_serves_again_only_after_catching_up() -> None:
    a, b = ScriptedEngine(name="a"), ScriptedEngine(name="b")
    router = Router([a, b], probe_interval_s=0.05)
    await router.start()
    a.dead = True  # a is down while the weights change: it keeps the old ones
    assert await router.update_weights("/ckpt-v1") == 1
    assert router.stats()["replicas"][0]["alive"] is False
    assert (a.version, a.weights) == (0, None)
    assert await router.update_weights("/ckpt-v2") == 2
    # every request goes to b meanwhile, stamped with the router's version
    assert {(c.replica, c.policy_version) for c in [await router.generate([1], P) for _ in range(4)]} == {("b", 2)}
    a.dead = False
    await _until_alive(router, 0)
    # the probe replayed the latest weights before letting it back: one update, not two
    assert (a.version, a.weights) == (1, "/ckpt-v2")
    served = [await router.generate([1], P, session_id=f"s{i}") for i in range(6)]
    assert {c.replica for c in served} == {"a", "b"}
    assert {c.policy_version for c in served} == {2}  # a's own counter says 1; the router's says 2
    assert router.stats()["replicas"][0]["policy_version"] == 2
    await router.stop()


async def test_replica_out_since_a_failed_request_catches_up_with_updates_it_missed() -> None:
    a, b = ScriptedEngine(name="a"), ScriptedEngine(name="b")
    router = Router([a, b], probe_interval_s=0.05)
    await router.start()
    a.dead = True
    await router.generate([1], P)  # a fails and is taken out (or b serves it directly)
    await router.generate([1], P)
    assert router.stats()["replicas"][0]["alive"] is False
    await router.update_weights("/ckpt-v1")  # while a is out
    assert (a.version, b.version) == (0, 1)
    a.dead = False
    await _until_alive(router, 0)
    assert (a.version, a.weights) == (1, "/ckpt-v1")  # replayed on a
    await router.stop()


async def test_update_that_no_replica_takes_names_every_failure() -> None:
    a, b = ScriptedEngine(name="a"), ScriptedEngine(name="b")
    a.dead = b.dead = True
    router = Router([a, b])
    with pytest.raises(EngineUnavailableError, match=r"no engine replica took the update: a: .*; b: "):
        await router.update_weights("/ckpt")
    assert router.policy_version == 0


async def test_versions_are_the_routers_whatever_a_replica_counted_before() -> None:
    a = ScriptedEngine(name="a", version=5)  # a server that took updates before this run
    b = ScriptedEngine(name="b")
    router = Router([a, b])
    await router.start()
    assert {(await router.generate([1], P, session_id=s)).policy_version for s in "wxyz"} == {0}
    assert await router.update_weights("/ckpt") == 1
    assert {(await router.generate([1], P, session_id=s)).policy_version for s in "wxyz"} == {1}
    await router.stop()
