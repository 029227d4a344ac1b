"""Shared fixtures: the real default model (converted once per machine), its tokenizer, an HF reference."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import torch

from coderl.checkpoint import load_model, load_tokenizer, resolve_checkpoint
from coderl.config import EngineConfig, ModelConfig
from coderl.engine.embedded import EmbeddedEngine


def _defaults_without_pypi() -> None:
    """The main job's packaged recipe also validates two more held-out sets (train.val_also), one
    synthesised from a PyPI library at run time: tests of other features start from a copy of it without
    them (no network, minutes saved), through CODERL_TRAIN_DEFAULTS, which child processes inherit. A
    test that wants held-out sets names them; a run's own config.yaml (benches, --resume) is read as
    written."""
    import atexit
    import shutil
    import tempfile

    import yaml

    from coderl.config.packaged import DEFAULTS_VARIABLE, TRAIN_DEFAULTS, packaged_config

    if os.environ.get(DEFAULTS_VARIABLE):
        return
    recipe = yaml.safe_load(packaged_config(TRAIN_DEFAULTS).read_text())
    recipe["train"]["val_also"] = []
    folder = Path(tempfile.mkdtemp(prefix="coderl-test-defaults-"))
    atexit.register(shutil.rmtree, folder, True)  # pytest's children (workers, runs) have ended by then
    (folder / "train.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    os.environ[DEFAULTS_VARIABLE] = str(folder / "train.yaml")


_defaults_without_pypi()

collect_ignore_glob = ["data/*"]  # fixtures: repositories with suites of their own (e.g. synth_repo)


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    return resolve_checkpoint()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny model (tests/tiny.py): for tests of orchestration, never of what a model computes."""
    from tests.tiny import tiny_checkpoint

    return tiny_checkpoint()


@pytest.fixture(scope="session")
def tokenizer(checkpoint: Path) -> Any:
    return load_tokenizer(checkpoint)


@pytest.fixture(scope="session")
def hf_model(checkpoint: Path) -> Any:
    """An independent Hugging Face model instance (never touched by the engine)."""
    return load_model(checkpoint, torch.float32, "cpu")


@pytest_asyncio.fixture(scope="session")
async def engine() -> AsyncIterator[EmbeddedEngine]:
    """A shared embedded engine; tests that change its weights must restore them."""
    eng = EmbeddedEngine(EngineConfig(max_batch_size=8, prefill_chunk=64, prefix_cache_mb=256), ModelConfig())
    await eng.start()
    yield eng
    await eng.stop()


@pytest.fixture(scope="session")
def chat_prompts(tokenizer: Any) -> list[list[int]]:
    """Chat prompts of different lengths."""
    questions = [
        "Hi",
        "Write a Python function that returns the square of a number.",
        "Explain in detail what a race condition is, give an example in Python with threads, and say how a lock fixes it.",
        "List three git commands.",
    ]
    return [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for q in questions
    ]


def hf_logprobs(
    model: Any, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> list[float]:
    """Independent reference: one plain HF forward over prompt + completion, log_softmax(logits / T)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()  # [n, V]
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None]).squeeze(1).tolist()
