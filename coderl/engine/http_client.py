"""An :class:`Engine` that talks to an HTTP inference server: coderl's own, vLLM or SGLang.

Dialects (``engine.api``): ``coderl`` and ``vllm`` use ``POST /v1/completions`` with a token-id prompt;
``sglang`` uses ``POST /generate`` with ``input_ids``. Weight updates use ``POST
/update_weights_from_disk`` (coderl, SGLang) with a checkpoint folder the trainer saved; vLLM has no
stable public HTTP weight-reload endpoint, so for vLLM weights must be synced through its
RLHF/collective-RPC route (issue 6) and ``update_weights`` here raises a clear error.

LoRA adapters (``load_lora_adapter``, a peft folder the trainer saved) go through each server's own
runtime-adapter API: vLLM ``POST /v1/load_lora_adapter`` (server started with ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; requests then name the adapter as their ``model``), SGLang
``POST /load_lora_adapter`` (``--enable-lora``; ``/generate`` requests carry ``lora_path``: the
adapter's name), and coderl servers, which answer both. Every load gets a fresh adapter name and the
one before is unloaded, so a retried or resumed run never collides with a name a server still holds.

The client keeps its own ``policy_version`` for upstream servers (bumped on each successful update);
coderl servers report theirs in every answer.

Transport: aiohttp (one pooled session per client). It is on the path of every model call a proxy or a
rollout worker makes, and costs about a third of the CPU per request that httpx did (0.47 against 1.28
ms, the client alone timed on loopback, 2026-11-24). Cancelling a call closes its connection, so the server aborts the generation.
Pooled connections idle for :data:`KEEPALIVE_S` are closed by the client, before a server's own idle
timeout can close them under a request; a request whose connection was closed before any answer came
(a clean close or a reset) is sent once more on a fresh one, and fails as the server's only then — a
weight update excepted, which is never sent twice.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from coderl.engine.base import Engine, TokenSink
from coderl.engine.config import EngineConfig
from coderl.engine.params import SamplingParams
from coderl.errors import EngineError, EngineUnavailableError, PromptTooLongError
from coderl.types import Completion

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

KEEPALIVE_S = 2.0
"""Seconds a pooled connection may sit idle before the client closes it: under the 5 s after which
uvicorn (coderl's server, vLLM's and SGLang's, by default) closes an idle one. A longer client timeout
leaves a window where a request goes out on a connection the server is closing and fails with "Server
disconnected" although the server is healthy (seen in the test suite on a loaded machine)."""


class HTTPEngine(Engine):
    """Client for one server at ``base_url`` (see module docstring for dialects)."""

    def __init__(self, base_url: str, cfg: EngineConfig, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = self.base_url
        self.cfg = cfg
        self.api = cfg.api
        self.api_key = api_key
        self.model: str | None = cfg.served_model
        self._version = 0
        self._client: aiohttp.ClientSession | None = None
        self._in_flight = 0
        self.adapter: str | None = None  # name of the LoRA adapter requests use (None = base weights)
        self._adapter_tag = uuid.uuid4().hex[:8]
        self._adapters_loaded = 0

    async def start(self) -> None:
        if self._client is not None:
            return
        self._client = self._session(self.cfg.request_timeout_s)
        if self.model is None and self.api != "sglang":
            models = await self._request("GET", "/v1/models")
            data = models.get("data") or []
            if not data:
                raise EngineError(f"{self.base_url}/v1/models lists no model; set engine.served_model")
            self.model = str(data[0]["id"])
        if self.api == "coderl":
            info = await self._request("GET", "/get_model_info")
            self._version = int(info.get("policy_version", 0))

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _session(self, read_timeout_s: float) -> aiohttp.ClientSession:
        """A pooled session; the read timeout applies to each read (a streamed answer may take longer)."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return aiohttp.ClientSession(
            base_url=self.base_url + "/",
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=read_timeout_s),
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True, keepalive_timeout=KEEPALIVE_S),
            read_bufsize=2**20,  # a streamed line of many token ids fits
        )

    async def healthy(self) -> bool:
        own = self._client is None
        client = self._session(5.0) if own else self._client
        assert client is not None
        try:
            async with client.get(self._url("/health"), timeout=aiohttp.ClientTimeout(total=5.0)) as r:
                return r.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False
        finally:
            if own:
                await client.close()

    @staticmethod
    def _url(path: str) -> str:
        return path.lstrip("/")  # relative to base_url (which may carry a path prefix)

    @property
    def policy_version(self) -> int:
        return self._version

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "in_flight": self._in_flight,
            "policy_version": self._version,
            "api": self.api,
            "adapter": self.adapter,
        }

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        self._in_flight += 1
        try:
            if self.api == "sglang":
                request = self._sglang_body(prompt_ids, params)
                if self.adapter is not None:
                    request["lora_path"] = self.adapter
                body = await self._request("POST", "/generate", payload=request)
                completion = parse_sglang_generate(body, len(prompt_ids), self._version)
            else:
                body = await self._request(
                    "POST", "/v1/completions", payload=self._completions_body(prompt_ids, params, session_id)
                )
                completion = parse_vllm_completions(body, len(prompt_ids), self._version)
        finally:
            self._in_flight -= 1
        # a coderl server reports its version in every dialect's answer; upstream servers never do,
        # and then the completion carries this client's own count (so this changes nothing)
        self._version = max(self._version, completion.policy_version)
        completion.replica = self.name
        return completion

    async def generate_streaming(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_tokens: TokenSink,
        session_id: str | None = None,
    ) -> Completion:
        """vLLM and coderl servers: ``/v1/completions`` with ``stream: true``, ids handed over chunk by
        chunk (SGLang's native stream is not spoken: its answer comes whole, as from :meth:`generate`)."""
        if self.api == "sglang":
            return await super().generate_streaming(prompt_ids, params, on_tokens, session_id)
        body = {
            **self._completions_body(prompt_ids, params, session_id),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        self._in_flight += 1
        try:
            completion = await self._stream_completions(body, len(prompt_ids), on_tokens)
        finally:
            self._in_flight -= 1
        self._version = max(self._version, completion.policy_version)
        completion.replica = self.name
        return completion

    async def _stream_completions(
        self, body: dict[str, Any], prompt_tokens: int, on_tokens: TokenSink
    ) -> Completion:
        path = "/v1/completions"
        if self._client is None:
            raise EngineUnavailableError(f"{self.name} is not started; call 'await engine.start()' first")
        ids: list[int] = []
        lps: list[float] = []
        final: dict[str, Any] = {}
        usage: dict[str, Any] = {}
        for retry in (False, True):  # a connection the server closed as the request went out: once more
            try:
                async with self._client.post(self._url(path), json=body) as response:
                    if response.status >= 400:
                        text = (await response.read()).decode("utf-8", "replace")[:2000]
                        if response.status == 400 and (too_long := PromptTooLongError.from_wire(text)) is not None:
                            raise too_long
                        kind = EngineUnavailableError if response.status in (502, 503, 504) else EngineError
                        raise kind(f"{self.name}{path}: HTTP {response.status}: {text[:500]}")
                    async for raw in response.content:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        data = json.loads(line[6:])
                        if "error" in data:
                            raise EngineError(f"{self.name}{path}: {str(data['error'])[:500]}")
                        usage = data.get("usage") or usage
                        final["policy_version"] = data.get("policy_version", final.get("policy_version"))
                        for choice in data.get("choices") or []:
                            new = parse_vllm_completions({"choices": [choice]}, prompt_tokens, self._version)
                            if new.token_ids:
                                ids += new.token_ids
                                lps += new.logprobs
                                on_tokens(new.token_ids, new.logprobs)
                            if choice.get("finish_reason"):
                                final["choice"] = choice
                break
            except (TimeoutError, aiohttp.ClientError) as exc:
                # lost once more, or mid-stream, or not a closed connection: the server's failure
                if retry or final or not _connection_closed(exc):
                    raise self._transport_error(path, exc) from exc
                log.info("%s%s: %s; sending it again on a fresh connection", self.name, path, exc)
            except ValueError as exc:
                raise EngineError(f"{self.name}{path}: a stream chunk is not JSON ({exc})") from exc
        if "choice" not in final:
            raise EngineError(f"{self.name}{path}: the stream ended without a finish reason")
        last = {**final["choice"], "token_ids": [], "logprobs": {"tokens": [], "token_logprobs": []}}
        done = parse_vllm_completions(
            {
                "choices": [last],
                "usage": usage,
                **({"policy_version": v} if (v := final["policy_version"]) is not None else {}),
            },
            prompt_tokens,
            self._version,
        )
        done.token_ids, done.logprobs = ids, lps
        return done

    def _completions_body(
        self, prompt_ids: list[int], p: SamplingParams, session_id: str | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.adapter or self.model,
            "prompt": prompt_ids,
            "max_tokens": p.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": p.top_k if p.top_k > 0 else -1,
            "stop_token_ids": p.stop_token_ids,
            "stop": p.stop,
            "ignore_eos": p.ignore_eos,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if p.seed is not None:
            body["seed"] = p.seed
        if self.api == "coderl" and session_id is not None:
            body["session_id"] = session_id
        return body

    @staticmethod
    def _sglang_body(prompt_ids: list[int], p: SamplingParams) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "max_new_tokens": p.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": p.top_k if p.top_k > 0 else -1,
            "stop_token_ids": p.stop_token_ids,
            "stop": p.stop,
            "ignore_eos": p.ignore_eos,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if p.seed is not None:
            sampling["sampling_seed"] = p.seed
        return {
            "input_ids": prompt_ids,
            "sampling_params": sampling,
            "return_logprob": True,
            "logprob_start_len": -1,
        }

    async def end_session(self, session_id: str) -> None:
        """A coderl server drops the session's cached KV (``POST /end_session``); vLLM and SGLang keep no
        per-session state to drop. Best effort: a server that cannot be told only keeps the KV longer."""
        if self.api != "coderl" or self._client is None:
            return
        try:
            await self._request("POST", "/end_session", payload={"session_id": session_id})
        except EngineError as exc:
            log.debug("%s: could not end session %s: %s", self.name, session_id, exc)

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        if not isinstance(weights, (str, Path)):
            raise EngineError(
                f"{self.name}: an HTTP server loads weights from disk; save the state dict as a checkpoint "
                "folder and pass its path"
            )
        if self.api == "vllm":
            raise EngineError(
                "vLLM servers have no stable HTTP endpoint to reload full weights; use engine.api=sglang, a "
                "coderl server, or vLLM's RLHF weight-sync route"
            )
        # never sent twice: a load the server made before the connection dropped would count as two versions
        body = await self._request(
            "POST", "/update_weights_from_disk", payload={"model_path": str(weights)}, resend=False
        )
        if not body.get("success", False):
            raise EngineError(f"{self.name}: weight update failed: {body.get('message')}")
        self._version = int(body.get("policy_version", self._version + 1))
        return self._version

    async def load_lora_adapter(self, path: str | Path) -> int:
        """Load the peft adapter folder ``path`` (a path the server can read) under a fresh name, point
        later requests at it and unload the adapter before it."""
        self._adapters_loaded += 1
        name = f"coderl-{self._adapter_tag}-{self._adapters_loaded}"
        prefix = "" if self.api == "sglang" else "/v1"
        answer = await self._admin(f"{prefix}/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        previous, self.adapter = self.adapter, name
        self._version = int(answer.get("policy_version", self._version + 1))
        if previous is not None:
            await self._unload(previous)
        return self._version

    async def unload_lora_adapter(self) -> int:
        if self.adapter is not None:
            answer = await self._unload(self.adapter)
            self.adapter = None
            self._version = int(answer.get("policy_version", self._version + 1))
        return self._version

    async def _unload(self, name: str) -> dict[str, Any]:
        prefix = "" if self.api == "sglang" else "/v1"
        try:
            return await self._admin(f"{prefix}/unload_lora_adapter", {"lora_name": name})
        except EngineError as exc:  # a stale adapter left on the server costs memory, not correctness
            log.warning("%s: could not unload LoRA adapter %s: %s", self.name, name, exc)
            return {}

    async def _admin(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST to an adapter endpoint: vLLM answers plain text, SGLang and coderl JSON (``success``)."""
        if self._client is None:
            raise EngineUnavailableError(f"{self.name} is not started; call 'await engine.start()' first")
        try:
            async with self._client.post(self._url(path), json=payload) as answer:
                status, text = answer.status, await answer.text()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise EngineUnavailableError(f"{self.name}{path}: {type(exc).__name__}: {exc}") from exc
        if status == 404 and "detail" in text and "Not Found" in text:
            raise EngineError(
                f"{self.name}{path}: the server has no such endpoint; start vLLM with --enable-lora and "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, SGLang with --enable-lora"
            )
        if status >= 400:
            raise EngineError(f"{self.name}{path}: HTTP {status}: {text[:500]}")
        try:
            data = json.loads(text)
        except ValueError:
            return {}  # vLLM: "Success: LoRA adapter ... added successfully."
        if isinstance(data, dict) and data.get("success") is False:
            reason = data.get("error_message") or data.get("message")
            raise EngineError(f"{self.name}{path}: {reason}")
        return data if isinstance(data, dict) else {}

    def _transport_error(self, path: str, exc: BaseException) -> EngineError:
        """A failed exchange: a timeout is this request's error, a lost connection the server's."""
        if isinstance(exc, asyncio.TimeoutError):
            return EngineError(f"{self.name}{path}: timed out after {self.cfg.request_timeout_s}s")
        return EngineUnavailableError(f"{self.name}{path}: {type(exc).__name__}: {exc}")

    async def _request(self, method: str, path: str, payload: Any = None, resend: bool = True) -> dict[str, Any]:
        """One exchange; ``resend``: a request whose connection closed before any answer goes out once
        more (aiohttp itself already does that for GET, so a GET may go out up to four times)."""
        if self._client is None:
            raise EngineUnavailableError(f"{self.name} is not started; call 'await engine.start()' first")
        for retry in (False, True):
            try:
                async with self._client.request(method, self._url(path), json=payload) as response:
                    status, raw = response.status, await response.read()
                break
            except (TimeoutError, aiohttp.ClientError) as exc:
                if retry or not resend or not _connection_closed(exc):
                    raise self._transport_error(path, exc) from exc
                log.info("%s%s: %s; sending it again on a fresh connection", self.name, path, exc)
        if status in (502, 503, 504):
            text = raw.decode("utf-8", "replace")
            raise EngineUnavailableError(f"{self.name}{path}: HTTP {status}: {text[:300]}")
        if status >= 400:
            text = raw.decode("utf-8", "replace")
            if status == 400 and (too_long := PromptTooLongError.from_wire(text)) is not None:
                raise too_long
            raise EngineError(f"{self.name}{path}: HTTP {status}: {text[:500]}")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            text = raw.decode("utf-8", "replace")
            raise EngineError(f"{self.name}{path}: the answer is not JSON: {text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise EngineError(f"{self.name}{path}: expected a JSON object, got {type(data).__name__}")
        return data


def parse_vllm_completions(body: dict[str, Any], prompt_tokens: int, version: int) -> Completion:
    """Token ids, logprobs and finish reason from a vLLM-shaped /v1/completions answer."""
    try:
        choice = body["choices"][0]
        logprobs = choice.get("logprobs") or {}
        ids = choice.get("token_ids")
        if ids is None:  # older vLLM: ids only as "token_id:<id>" strings
            ids = [_token_id(t) for t in logprobs.get("tokens") or []]
        lps = logprobs.get("token_logprobs")
        if lps is None or len(lps) != len(ids):
            raise EngineError(
                f"the server answered {len(ids)} tokens but {0 if lps is None else len(lps)} logprobs; "
                "request logprobs=0 (vLLM) so every token carries its logprob"
            )
        reason = choice.get("finish_reason") or "stop"
        stop = choice.get("stop_reason")
        usage = body.get("usage") or {}
        cached = ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EngineError(f"unexpected /v1/completions answer ({exc}): {str(body)[:300]}") from exc
    return Completion(
        token_ids=[int(t) for t in ids],
        logprobs=[float(x) if x is not None else 0.0 for x in lps],
        finish_reason="length" if reason == "length" else "abort" if reason == "abort" else "stop",
        policy_version=int(body.get("policy_version", version)),
        prompt_tokens=int(usage.get("prompt_tokens", prompt_tokens)),
        cached_tokens=int(cached),
        stop_token_id=stop if isinstance(stop, int) else None,
        stop_str=stop if isinstance(stop, str) else None,
    )


def parse_sglang_generate(body: dict[str, Any], prompt_tokens: int, version: int) -> Completion:
    """Token ids, logprobs and finish reason from an SGLang /generate answer."""
    try:
        meta = body["meta_info"]
        triples = meta.get("output_token_logprobs") or []
        ids = body.get("output_ids")
        if ids is None:
            ids = [int(t[1]) for t in triples]
        if len(triples) != len(ids):
            raise EngineError(
                f"the server answered {len(ids)} tokens but {len(triples)} logprobs; request return_logprob=true"
            )
        finish = meta.get("finish_reason") or {}
        kind = finish.get("type") if isinstance(finish, dict) else str(finish)
        matched = finish.get("matched") if isinstance(finish, dict) else None
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EngineError(f"unexpected /generate answer ({exc}): {str(body)[:300]}") from exc
    return Completion(
        token_ids=[int(t) for t in ids],
        logprobs=[float(t[0]) for t in triples],
        finish_reason="length" if kind == "length" else "abort" if kind == "abort" else "stop",
        policy_version=int(meta.get("policy_version", version)),
        prompt_tokens=int(meta.get("prompt_tokens", prompt_tokens)),
        cached_tokens=int(meta.get("cached_tokens", 0) or 0),
        latency_s=float(meta.get("e2e_latency", 0.0) or 0.0),
        stop_token_id=matched if isinstance(matched, int) else None,
        stop_str=matched if isinstance(matched, str) else None,
    )


def _token_id(token: str) -> int:
    if not token.startswith("token_id:"):
        raise ValueError(
            f"token {token!r} is not of the form 'token_id:<id>'; send return_tokens_as_token_ids=true"
        )
    return int(token.split(":", 1)[1])


def _connection_closed(exc: BaseException) -> bool:
    """The server closed the connection under the request (its idle timeout crossing it): a clean close
    (``ServerDisconnectedError``) or a reset (``ECONNRESET``, ``EPIPE``), not a refusal or a timeout."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and not isinstance(exc, aiohttp.ClientConnectorError) and (
        exc.errno in (errno.ECONNRESET, errno.EPIPE)
    )
