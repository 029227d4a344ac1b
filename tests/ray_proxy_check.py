"""The recording proxy as a named Ray actor, on a local Ray cluster (run by tests/test_verl_loop.py
with a Python that has ray):

    python -m tests.ray_proxy_check WORKDIR

Starts Ray, asks twice for the named actor (one proxy: the second call finds the first), sends one
OpenAI SDK call through it to the real model, reads the record. Then a second proxy actor forwards
through verl's own server client (``LLMServerClient`` and its sticky least-in-flight router) to two
"rollout servers": Ray actors answering verl's ``generate`` with coderl's embedded engine serving the
real model; two sessions, two calls each. Prints a JSON summary.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import ray

from coderl.config import load_config
from coderl.integrations.ray_proxy import proxy_actor

# httpx's default 5 s read timeout is shorter than a loaded 2-core machine can take to answer while
# a rollout server loads the model beside the proxy: every call here waits up to two minutes.
http = httpx.Client(timeout=120.0)


class EngineServer:
    """A verl rollout server's ``generate`` (token ids in, ``TokenOutput`` out) over coderl's embedded
    engine; it keeps what it sampled."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.engine: Any = None
        self.sampled: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        from coderl.config import load_config as load
        from coderl.engine import create_engine
        from coderl.engine.params import SamplingParams

        if self.engine is None:
            cfg = load(overrides=["engine.max_batch_size=2"])
            self.engine = create_engine(cfg.engine, cfg.model, seed=0)
            await self.engine.start()
        p = sampling_params
        c = await self.engine.generate(
            list(prompt_ids),
            SamplingParams(max_tokens=p["max_tokens"], temperature=p.get("temperature", 1.0),
                           top_p=p.get("top_p", 1.0), stop_token_ids=p.get("stop_token_ids", [])),
        )  # fmt: skip
        self.sampled.append(
            {"prompt_ids": list(prompt_ids), "token_ids": c.token_ids, "log_probs": c.logprobs}
        )
        return TokenOutput(token_ids=c.token_ids, log_probs=c.logprobs, stop_reason="completed",
                           extra_fields={"global_steps": 3})  # fmt: skip

    async def calls(self) -> list[dict[str, Any]]:
        return self.sampled


def through_verls_client(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import get_router_handle

    servers = {
        f"server-{k}": ray.remote(EngineServer).options(num_cpus=0).remote(f"server-{k}") for k in (0, 1)
    }
    verl_cfg = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"name": "vllm", "full_determinism": False}}}
    )
    client = LLMServerClient(verl_cfg, get_router_handle(servers=servers))
    handle, url = proxy_actor(cfg, name="proxy-over-verl", detached=False, llm_client=client)
    admin = {"Authorization": "Bearer ray-admin"}

    def agent(who: str) -> list[dict[str, Any]]:  # two turns of one unmodified OpenAI SDK agent
        session = http.post(f"{url}/sessions", headers=admin, json={"metadata": {"task_id": who}}).json()
        sdk = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["secret"], max_retries=0)
        messages: list[Any] = [{"role": "user", "content": f"Say hi to {who}."}]
        for _ in range(2):
            reply = sdk.chat.completions.create(model="smol", messages=messages, max_tokens=4)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "Again."}]  # fmt: skip
        calls: list[dict[str, Any]] = http.get(f"{url}/sessions/{session['id']}", headers=admin).json()[
            "calls"
        ]
        return calls

    with ThreadPoolExecutor(2) as pool:  # the two sessions at once: verl's router spreads them
        records = dict(zip(("a", "b"), pool.map(agent, ("a", "b")), strict=True))
    recorded = {who: [c["completion_ids"] for c in calls] for who, calls in records.items()}
    recorded_pairs = sorted(
        (tuple(c["completion_ids"]), tuple(c["logprobs"])) for v in records.values() for c in v
    )
    versions = {c.get("policy_version") for calls in records.values() for c in calls}
    served = {name: ray.get(h.calls.remote()) for name, h in servers.items()}
    ray.kill(handle)
    where = {who: sorted({name for name, calls in served.items() for c in calls if c["token_ids"] in ids})
             for who, ids in recorded.items()}  # fmt: skip
    sampled = sorted(
        (tuple(c["token_ids"]), tuple(c["log_probs"])) for calls in served.values() for c in calls
    )
    return {
        "verl_calls": {name: len(calls) for name, calls in served.items()},
        "verl_servers_by_session": where,
        "verl_recorded_is_sampled": recorded_pairs == sampled,  # ids and logprobs, exactly
        "verl_policy_versions": sorted(v for v in versions if v is not None),
    }


def main(work: Path) -> dict[str, Any]:
    # a cluster of its own: with no address Ray joins the machine's latest one (another test's two-node
    # cluster, running on the other pytest worker, writes itself there) and then refuses num_cpus
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, namespace="coderl-test")
    try:
        cfg = load_config(
            overrides=[f"proxy.db={work / 'proxy.sqlite'}", "proxy.admin_token=ray-admin", "proxy.port=0",
                       "engine.max_batch_size=2"]
        )  # fmt: skip
        handle, url = proxy_actor(cfg, name="proxy-under-test", detached=False)
        again, url_again = proxy_actor(cfg, name="proxy-under-test", detached=False)
        admin = {"Authorization": "Bearer ray-admin"}
        session = http.post(f"{url}/sessions", headers=admin, json={"metadata": {"task_id": "t"}}).json()
        client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["secret"], max_retries=0)
        reply = client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, seed=1
        )
        record = http.get(f"{url}/sessions/{session['id']}", headers=admin).json()
        token = ray.get(again.admin_token.remote())
        ray.get(handle.stop.remote())
        ray.kill(handle)
        over_verl = through_verls_client(cfg)
        return {
            **over_verl,
            "url": url,
            "same_url": url_again == url,
            "same_actor": again._actor_id == handle._actor_id,
            "reply": reply.choices[0].message.content,
            "calls": len(record["calls"]),
            "completion_tokens": len(record["calls"][0]["completion_ids"]),
            "admin_token": token,
        }
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
