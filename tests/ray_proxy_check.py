"""The recording proxy as a named Ray actor, on a local Ray cluster (run by tests/test_verl_loop.py
with a Python that has ray):

    python -m tests.ray_proxy_check WORKDIR

Starts Ray, asks twice for the named actor (one proxy: the second call finds the first), sends one
OpenAI SDK call through it to the real model, reads the record, and prints a JSON summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import ray

from coderl.config import load_config
from coderl.integrations.ray_proxy import proxy_actor


def main(work: Path) -> dict[str, Any]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="coderl-test")
    try:
        cfg = load_config(
            overrides=[f"proxy.db={work / 'proxy.sqlite'}", "proxy.admin_token=ray-admin", "proxy.port=0",
                       "engine.max_batch_size=2"]
        )  # fmt: skip
        handle, url = proxy_actor(cfg, name="proxy-under-test", detached=False)
        again, url_again = proxy_actor(cfg, name="proxy-under-test", detached=False)
        admin = {"Authorization": "Bearer ray-admin"}
        session = httpx.post(f"{url}/sessions", headers=admin, json={"metadata": {"task_id": "t"}}).json()
        client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["secret"], max_retries=0)
        reply = client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, seed=1
        )
        record = httpx.get(f"{url}/sessions/{session['id']}", headers=admin).json()
        token = ray.get(again.admin_token.remote())
        ray.get(handle.stop.remote())
        ray.kill(handle)
        return {
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
