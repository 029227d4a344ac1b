"""The recording proxy as a named Ray actor: one proxy per Ray cluster (or per name), found by every
process that asks for it.

    handle, url = proxy_actor(cfg)                # made on the first call, found by name afterwards
    # agents (anywhere in the cluster) use f"{url}/s/<session>/v1" as their OpenAI base URL

The actor serves the same app as ``coderl proxy serve`` (:func:`coderl.proxy.standalone.build_proxy`)
on the node Ray placed it on, in front of the configured engine: ``engine.type=http`` with the URLs of
vLLM / SGLang / ``coderl engine serve`` servers, the embedded engine, or ``proxy.mode=relay`` for
workers that connect out. Under verl, pass verl's server client instead (``llm_client=``, what
``LLMServerManager.get_client()`` returns, the object verl hands its agent-loop workers): the proxy
then forwards every call through it (token ids in, token ids and logprobs out), each session sticky to
one of verl's rollout servers and balanced by verl's own router, and ``cfg.engine`` is not used. With ``proxy.host=0.0.0.0`` the
URL it reports names the node's IP (or ``proxy.public_url`` when set). Needs ``ray`` installed; coderl
never depends on it.
"""

from __future__ import annotations

from typing import Any

from coderl.config import Config, validate_config

DEFAULT_NAME = "coderl-proxy"
NAMESPACE = "coderl"


class ProxyActor:
    """The proxy inside a Ray actor (an async actor: the app runs on the actor's event loop)."""

    def __init__(self, config: dict[str, Any], llm_client: Any = None) -> None:
        self.cfg: Config = validate_config(config)
        self.llm_client = llm_client
        self.url = ""
        self.admin = ""
        self._serving: Any = None

    async def start(self) -> str:
        """Serve (once; later calls answer the same URL) and return the proxy's base URL."""
        if self.url:
            return self.url
        from coderl.loopback import serve_in_loop
        from coderl.proxy.standalone import build_proxy, settle_heap

        app, _ = build_proxy(self.cfg, None if self.llm_client is None else self._over_verl)
        settle_heap()  # this actor's process serves only the proxy
        proxy = self.cfg.proxy
        service = app.state.service  # stop() ends its calls in flight first: the actor stops in seconds
        self._serving = serve_in_loop(app, host=proxy.host, port=proxy.port, before_stop=service.stop_calls)
        bound = await self._serving.__aenter__()
        if proxy.public_url:
            self.url = proxy.public_url.rstrip("/")
        elif proxy.host in ("0.0.0.0", "::"):
            import ray

            self.url = bound.replace(f"//{proxy.host}:", f"//{ray.util.get_node_ip_address()}:")
        else:
            self.url = bound
        self.admin = str(app.state.admin_token)
        return self.url

    def _over_verl(self, tokenizer: Any) -> Any:
        from coderl.integrations.verl_bridge import ServerClientEngine

        return ServerClientEngine(self.llm_client, None, decode=tokenizer.decode)

    async def address(self) -> str:
        return self.url

    async def admin_token(self) -> str:
        """The admin token (the configured one, or the one generated at start)."""
        return self.admin

    async def stop(self) -> None:
        """Stop serving (the record stays in ``proxy.db``)."""
        if self._serving is not None:
            await self._serving.__aexit__(None, None, None)
            self._serving, self.url = None, ""


def proxy_actor(
    cfg: Config,
    name: str = DEFAULT_NAME,
    namespace: str = NAMESPACE,
    num_cpus: float = 1.0,
    detached: bool = True,
    llm_client: Any = None,
) -> tuple[Any, str]:
    """The named proxy actor and its base URL: created with ``cfg`` on the first call in the cluster,
    the running one (whatever config it was made with) on every later call. ``detached``: it outlives
    the process that made it (remove it with ``ray.kill(handle)``). ``llm_client``: verl's server client
    to forward through instead of ``cfg.engine`` (module doc). Ray must be initialised."""
    import ray

    actor = ray.remote(ProxyActor).options(
        name=name,
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached" if detached else None,
        num_cpus=num_cpus,
        max_concurrency=64,
    )
    handle = actor.remote(cfg.model_dump(mode="json"), llm_client)
    return handle, str(ray.get(handle.start.remote()))
