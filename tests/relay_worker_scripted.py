"""A relay worker over a scripted engine, as its own process, for the relay tests:

    python -m tests.relay_worker_scripted URL TOKEN NAME [--latency S] [--capacity N] [--backoff-base S] [--backoff-cap S]

It runs the same worker code as ``coderl proxy worker`` (:func:`coderl.proxy.relay_worker.serve_worker`)
over :class:`coderl.engine.scripted.ScriptedEngine`, which answers every call with "served by NAME"
after a fixed latency: the tests read from each completion which worker served it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from tokenizers import Tokenizer

from coderl.checkpoint import DEFAULT_MODEL_NAME, resolve_checkpoint
from coderl.engine.scripted import ScriptedEngine
from coderl.proxy.config import RelayWorkerConfig
from coderl.proxy.relay_worker import serve_worker


class FastTokenizer:
    """What ScriptedEngine needs of a tokenizer, read from the checkpoint's tokenizer.json directly:
    the same ids as the transformers tokenizer, without its seconds of import (workers start often here)."""

    def __init__(self, folder: Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("name")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--backoff-base", type=float, default=0.1)
    parser.add_argument("--backoff-cap", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = RelayWorkerConfig(
        url=args.url,
        token=args.token,
        name=args.name,
        capacity=args.capacity,
        backoff_base_s=args.backoff_base,
        backoff_cap_s=args.backoff_cap,
        drain_timeout_s=5.0,
    )
    engine = ScriptedEngine([f"served by {args.name}"], FastTokenizer(resolve_checkpoint()), args.latency, per_session=True)
    asyncio.run(serve_worker(engine, cfg, model=DEFAULT_MODEL_NAME))


if __name__ == "__main__":
    main()
