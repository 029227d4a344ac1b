"""LoRA adapters from the trainer to engines: peft folders merged exactly, served over HTTP in the
vLLM, SGLang and coderl dialects of the adapter API, stale adapters refused."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.http_client import HTTPEngine
from coderl.engine.lora import merge_adapter
from coderl.engine.server import create_app
from coderl.engine.weights import read_weights
from coderl.errors import EngineError
from coderl.train.actor import Actor
from coderl.train.config import ActorConfig
from tests.conftest import hf_logprobs
from tests.servers import serve

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def lora_actor(tmp_path_factory: pytest.TempPathFactory) -> tuple[Actor, Path]:
    """A LoRA actor whose adapters are far from zero, and its adapter saved in peft's format."""
    actor = Actor(ActorConfig(device="cpu", seed=0, lora_rank=4, lora_alpha=16))
    actor.setup()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in actor.trainable_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    folder = tmp_path_factory.mktemp("lora") / "adapter"
    actor.save_adapter(folder)
    return actor, folder


@pytest.fixture(scope="module")
def server(tokenizer: Any) -> Iterator[str]:
    engine = EmbeddedEngine(EngineConfig(max_batch_size=4), ModelConfig())
    with serve(create_app(engine, MODEL, tokenizer=tokenizer)) as url:
        yield url


def client(url: str, api: str) -> HTTPEngine:
    return HTTPEngine(url, EngineConfig(type="http", urls=[url], api=api))  # type: ignore[arg-type]


def test_merged_adapter_equals_peft_merge(lora_actor: tuple[Actor, Path], checkpoint: Path) -> None:
    actor, folder = lora_actor
    assert sorted(p.name for p in folder.iterdir() if p.suffix in (".json", ".safetensors")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    merged = merge_adapter(read_weights(checkpoint), folder)
    expected = actor.state_dict_for_engine()  # peft's own delta weights, merged by the actor
    changed = 0
    for name, tensor in merged.items():
        assert torch.allclose(tensor, expected[name].float(), atol=1e-6, rtol=0), name
        changed += int("proj" in name and not torch.equal(tensor, read_weights(checkpoint)[name]))
    assert changed == 30 * 7  # every adapted projection of the 30 layers moved


def test_bad_adapter_folders_are_named(
    lora_actor: tuple[Actor, Path], tmp_path: Path, checkpoint: Path
) -> None:
    _, folder = lora_actor
    base = read_weights(checkpoint)
    with pytest.raises(EngineError, match="not a LoRA adapter folder"):
        merge_adapter(base, tmp_path)
    dora = tmp_path / "dora"
    shutil.copytree(folder, dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(EngineError, match="use_dora"):
        merge_adapter(base, dora)
    small = {k: v for k, v in base.items() if "layers.29." not in k}
    with pytest.raises(EngineError, match=r"layers\.29"):
        merge_adapter(small, folder)


@pytest.mark.parametrize("api", ["coderl", "vllm", "sglang"])
async def test_server_serves_the_adapter_policy_then_the_base(
    server: str, api: str, lora_actor: tuple[Actor, Path], hf_model: Any, chat_prompts: list[list[int]]
) -> None:
    actor, folder = lora_actor
    eng = client(server, api)
    await eng.start()
    prompt, params = chat_prompts[1], SamplingParams(max_tokens=12, temperature=1.0, seed=3)
    try:
        version = eng.policy_version
        loaded = await eng.load_lora_adapter(folder)
        tuned = await eng.generate(prompt, params)
        unloaded = await eng.unload_lora_adapter()
        base = await eng.generate(prompt, params)
    finally:
        await eng.stop()
    assert version < loaded == tuned.policy_version < unloaded == base.policy_version
    policy = actor.score([prompt + tuned.token_ids], [len(prompt)], 1.0)[0].logprobs
    assert (policy - torch.tensor(tuned.logprobs)).abs().max() < 1e-4  # served = base + adapter
    without = torch.tensor(hf_logprobs(hf_model, prompt, tuned.token_ids, 1.0))
    assert (without - torch.tensor(tuned.logprobs)).abs().max() > 1e-2  # ... which is not the base
    ref = torch.tensor(hf_logprobs(hf_model, prompt, base.token_ids, 1.0))
    assert (ref - torch.tensor(base.logprobs)).abs().max() < 1e-4  # unloaded: the base again


async def test_replaced_and_base_names_are_refused_while_an_adapter_is_served(
    server: str, lora_actor: tuple[Actor, Path], chat_prompts: list[list[int]]
) -> None:
    _, folder = lora_actor
    first, second = client(server, "vllm"), client(server, "sglang")
    await first.start()
    await second.start()
    try:
        await first.load_lora_adapter(folder)
        await second.load_lora_adapter(folder)  # replaces the first one on this merging server
        params = SamplingParams(max_tokens=2)
        with pytest.raises(EngineError, match="replaced by"):
            await first.generate(chat_prompts[0], params)
        await second.generate(chat_prompts[0], params)
        async with httpx.AsyncClient(base_url=server) as http:
            r = await http.post("/v1/completions", json={"model": MODEL, "prompt": chat_prompts[0]})
            assert r.status_code == 400 and "serves only that" in r.text
            listed = [m["id"] for m in (await http.get("/v1/models")).json()["data"]]
            assert listed == [MODEL, second.adapter]
            r = await http.post(
                "/v1/load_lora_adapter", json={"lora_name": second.adapter, "lora_path": str(folder)}
            )
            assert r.status_code == 400 and "already been loaded" in r.text
    finally:
        await second.unload_lora_adapter()
        await first.stop()
        await second.stop()
