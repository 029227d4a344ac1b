"""``coderl engine serve``: an engine behind the vLLM / SGLang token-in token-out HTTP subset.

Endpoints (shapes in :mod:`coderl.engine.wire`):
  GET  /health, /health_generate        200 when the engine serves (503 otherwise)
  GET  /v1/models                        OpenAI model list (vLLM)
  GET  /get_model_info                   SGLang model info
  POST /v1/completions                   vLLM token-id completions with logprobs
  POST /generate                         SGLang native generate
  POST /update_weights_from_disk         SGLang-style weight reload from a checkpoint folder
  POST /v1/load_lora_adapter, /load_lora_adapter        vLLM / SGLang: serve base + a peft adapter
  POST /v1/unload_lora_adapter, /unload_lora_adapter    ... and forget it
  GET  /stats                            coderl: engine counters and policy version
  POST /end_session                      coderl: {"session_id": ...} sends no more turns (its KV may go)
If an API key is configured, every endpoint but /health needs ``Authorization: Bearer <key>``.

The engine merges an adapter into its weights (no LoRA kernels), so one adapter is served at a time:
while one is loaded, requests must name it (``model`` for /v1/completions, ``lora_path`` for
/generate) and a request naming the base model or a replaced adapter is refused, never silently
answered by other weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse

from coderl.engine.base import Engine
from coderl.engine.wire import (
    CompletionsRequest,
    EndSessionRequest,
    GenerateRequest,
    LoraAdapterRequest,
    UpdateWeightsRequest,
    completions_response,
    generate_response,
)
from coderl.errors import EngineError, EngineUnavailableError, PromptTooLongError
from coderl.types import Completion

T = TypeVar("T")


def create_app(engine: Engine, model_name: str, tokenizer: Any = None, api_key: str | None = None) -> FastAPI:
    """The engine's HTTP app. The engine is started and stopped with the app's lifespan."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(title="coderl engine", lifespan=lifespan)
    adapters = _Adapters(model_name)

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise HTTPException(
                status_code=401, detail="missing or wrong API key (Authorization: Bearer <key>)"
            )

    def decode(ids: list[int], skip_special: bool = True) -> str:
        return "" if tokenizer is None else str(tokenizer.decode(ids, skip_special_tokens=skip_special))

    @app.exception_handler(EngineUnavailableError)
    async def _unavailable(_: Request, exc: EngineUnavailableError) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": str(exc), "type": "ServiceUnavailable", "code": 503}},
            503,
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(EngineError)
    async def _bad_request(_: Request, exc: EngineError) -> JSONResponse:
        error: dict[str, Any] = {"message": str(exc), "type": "BadRequestError", "code": 400}
        if isinstance(exc, PromptTooLongError):  # the client rebuilds it (coderl.engine.http_client)
            error["coderl_prompt_too_long"] = exc.wire()
        return JSONResponse({"error": error}, 400)

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> JSONResponse:
        ok = await engine.healthy()
        return JSONResponse({} if ok else {"error": "engine not serving"}, 200 if ok else 503)

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> dict[str, Any]:
        created = int(time.time())
        entry = {
            "id": model_name,
            "object": "model",
            "created": created,
            "owned_by": "coderl",
            "root": model_name,
        }
        data = [entry]
        if adapters.active is not None:
            data.append({**entry, "id": adapters.active, "root": adapters.path, "parent": model_name})
        return {"object": "list", "data": data}

    @app.get("/get_model_info", dependencies=[Depends(authorize)])
    async def model_info() -> dict[str, Any]:
        return {
            "model_path": model_name,
            "tokenizer_path": model_name,
            "is_generation": True,
            "policy_version": engine.policy_version,
        }

    @app.get("/stats", dependencies=[Depends(authorize)])
    async def stats() -> dict[str, Any]:
        return engine.stats()

    @app.post("/v1/completions", dependencies=[Depends(authorize)], response_model=None)
    async def completions(body: CompletionsRequest, request: Request) -> dict[str, Any] | StreamingResponse:
        adapters.check(body.model, "model")
        if body.stream:
            return _stream_completions(engine, body, body.model or model_name, decode)
        c = await _unless_disconnected(
            request, engine.generate(body.prompt, body.sampling(), body.session_id)
        )
        return completions_response(
            c,
            body.model or model_name,
            f"cmpl-{uuid.uuid4().hex}",
            int(time.time()),
            decode(c.token_ids, body.skip_special_tokens),
            None,
        )

    @app.post("/generate", dependencies=[Depends(authorize)])
    async def generate(body: GenerateRequest, request: Request) -> dict[str, Any]:
        adapters.check(body.lora_path, "lora_path")
        c: Completion = await _unless_disconnected(
            request, engine.generate(body.input_ids, body.sampling(), body.session_id)
        )
        return generate_response(c, body.rid or uuid.uuid4().hex, decode(c.token_ids), body.return_logprob)

    @app.post("/end_session", dependencies=[Depends(authorize)])
    async def end_session(body: EndSessionRequest) -> dict[str, Any]:
        await engine.end_session(body.session_id)
        return {"success": True}

    @app.post("/update_weights_from_disk", dependencies=[Depends(authorize)])
    async def update_weights(body: UpdateWeightsRequest) -> JSONResponse:
        try:
            version = await engine.update_weights(body.model_path)
        except EngineError as exc:
            return JSONResponse({"success": False, "message": str(exc)}, 400)
        return JSONResponse(
            {
                "success": True,
                "message": "weights updated",
                "num_paused_requests": 0,
                "policy_version": version,
            }
        )

    @app.post("/v1/load_lora_adapter", dependencies=[Depends(authorize)])
    @app.post("/load_lora_adapter", dependencies=[Depends(authorize)])
    async def load_lora_adapter(body: LoraAdapterRequest) -> JSONResponse:
        if body.lora_path is None:
            return JSONResponse({"success": False, "error_message": "lora_path is required"}, 400)
        if body.lora_name in adapters.names:
            message = f"the LoRA adapter {body.lora_name!r} has already been loaded; pick a new lora_name"
            return JSONResponse({"success": False, "error_message": message}, 400)
        async with adapters.lock:
            try:
                version = await engine.load_lora_adapter(body.lora_path)
            except EngineError as exc:
                return JSONResponse({"success": False, "error_message": str(exc)}, 400)
            adapters.activate(body.lora_name, body.lora_path)
        return JSONResponse(
            {"success": True, "policy_version": version, "loaded_adapters": {body.lora_name: body.lora_path}}
        )

    @app.post("/v1/unload_lora_adapter", dependencies=[Depends(authorize)])
    @app.post("/unload_lora_adapter", dependencies=[Depends(authorize)])
    async def unload_lora_adapter(body: LoraAdapterRequest) -> JSONResponse:
        if body.lora_name not in adapters.names:
            message = f"no LoRA adapter named {body.lora_name!r} is loaded"
            return JSONResponse({"success": False, "error_message": message}, 404)
        async with adapters.lock:
            version = engine.policy_version
            if body.lora_name == adapters.active:
                version = await engine.unload_lora_adapter()
                adapters.active = adapters.path = None
            adapters.names.discard(body.lora_name)
        return JSONResponse({"success": True, "policy_version": version})

    return app


class _Adapters:
    """The server's adapter names: the one merged in now (``active``) and replaced ones not yet unloaded."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.active: str | None = None
        self.path: str | None = None
        self.names: set[str] = set()
        self.lock = asyncio.Lock()

    def activate(self, name: str, path: str) -> None:
        self.active, self.path = name, path
        self.names.add(name)

    def check(self, requested: str | None, field: str) -> None:
        """Refuse a request whose weights this server does not serve now."""
        if self.active is None:
            if requested is not None and requested in self.names:
                raise HTTPException(404, f"{field}={requested!r}: that LoRA adapter is no longer served")
            if field == "lora_path" and requested is not None:
                raise HTTPException(404, f"{field}={requested!r}: no such LoRA adapter is loaded")
            return
        if requested == self.active:
            return
        if requested in self.names:
            raise HTTPException(
                404,
                f"{field}={requested!r} was replaced by {self.active!r}; this server serves only the newest adapter",
            )
        raise HTTPException(
            400,
            f"{field}={requested!r}: this server has LoRA adapter {self.active!r} merged into its weights and "
            f"serves only that; set {field}={self.active!r} (or unload it to serve {self.model_name!r})",
        )


def _stream_completions(
    engine: Engine, body: CompletionsRequest, model: str, decode: Callable[[list[int], bool], str]
) -> StreamingResponse:
    """vLLM's streamed /v1/completions: one chunk per batch of sampled ids (``token_ids`` and their
    logprobs as ``token_id:N`` tokens), a last chunk with the finish and stop reasons, usage if asked
    (``stream_options.include_usage``), then ``[DONE]``. A client that leaves cancels the generation."""
    queue: asyncio.Queue[tuple[list[int], list[float]]] = asyncio.Queue()
    rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(ids: list[int], lps: list[float], finish: str | None = None, stop: Any = None) -> bytes:
        choice = {
            "index": 0,
            "text": decode(ids, body.skip_special_tokens),
            "logprobs": {
                "tokens": [f"token_id:{t}" for t in ids],
                "token_logprobs": lps,
                "top_logprobs": None,
            },
            "finish_reason": finish,
            "stop_reason": stop,
            "token_ids": ids,
        }
        out = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [choice],
        }
        return f"data: {json.dumps(out)}\n\n".encode()

    async def events() -> AsyncIterator[bytes]:
        work = asyncio.ensure_future(
            engine.generate_streaming(
                body.prompt, body.sampling(), lambda i, lp: queue.put_nowait((i, lp)), body.session_id
            )
        )
        try:
            while not (work.done() and queue.empty()):
                getting = asyncio.ensure_future(queue.get())
                both: list[asyncio.Future[Any]] = [getting, work]
                await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
                if getting.done():
                    yield chunk(*getting.result())
                else:
                    getting.cancel()
            try:
                c = work.result()
            except EngineError as exc:  # the status line is out: the error goes in the stream
                yield f"data: {json.dumps({'error': {'message': str(exc), 'type': type(exc).__name__}})}\n\n".encode()
                return
            stop = c.stop_token_id if c.stop_token_id is not None else c.stop_str
            yield chunk([], [], c.finish_reason, stop)
            if body.stream_options and body.stream_options.get("include_usage"):
                usage = {"prompt_tokens": c.prompt_tokens, "completion_tokens": len(c.token_ids),
                         "total_tokens": c.prompt_tokens + len(c.token_ids),
                         "prompt_tokens_details": {"cached_tokens": c.cached_tokens}}  # fmt: skip
                out = {"id": rid, "object": "text_completion", "created": created, "model": model,
                       "choices": [], "usage": usage, "policy_version": c.policy_version}  # fmt: skip
                yield f"data: {json.dumps(out)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            work.cancel()

    return StreamingResponse(events(), media_type="text/event-stream")


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it if the client goes away (the engine then aborts the request)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.25)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise HTTPException(status_code=499, detail="client disconnected")
