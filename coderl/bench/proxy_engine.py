"""The scripted engine server of ``coderl bench proxy`` (run as ``python -m coderl.bench.proxy_engine``).

One process, one uvicorn worker: coderl's engine HTTP app (the token-id ``/v1/completions`` a coderl
proxy calls with ``engine.type=http``) over a :class:`~coderl.engine.scripted.ScriptedEngine` that
answers every call after a fixed latency, plus an OpenAI ``/v1/chat/completions`` route over the same
engine (streaming too) - what a client, or LiteLLM, calls when it talks to the engine directly.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from coderl.chat import ChatFormat
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.engine.server import create_app

REPLY = "The tests pass now."


def build_app(latency_s: float) -> FastAPI:
    from coderl.checkpoint import load_tokenizer, resolve_checkpoint

    tokenizer = load_tokenizer(resolve_checkpoint())
    chat = ChatFormat(tokenizer)
    engine = ScriptedEngine([REPLY], tokenizer, latency_s, per_session=True)
    app = create_app(engine, "coderl", tokenizer)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Any:
        body = await request.json()
        prompt = chat.render(body["messages"], body.get("tools"))
        params = SamplingParams(max_tokens=int(body.get("max_tokens") or 64))
        done = await engine.generate(prompt, params, session_id=str(uuid.uuid4()))
        text = chat.decode(done.token_ids)
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:16]}", int(time.time())
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(done.token_ids),
                 "total_tokens": len(prompt) + len(done.token_ids)}  # fmt: skip
        if not body.get("stream"):
            return {
                "id": rid, "object": "chat.completion", "created": created, "model": "coderl",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage,
            }  # fmt: skip

        async def events() -> AsyncIterator[str]:
            base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": "coderl"}
            for delta, finish in (({"role": "assistant", "content": text}, None), ({}, "stop")):
                chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    uvicorn.run(build_app(args.latency), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
