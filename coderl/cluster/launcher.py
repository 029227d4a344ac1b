"""An engine replica: a Ray actor that launches an inference server on its node (``coderl engine
serve``, ``vllm serve`` or SGLang's ``launch_server``), waits for it to answer ``/health``, and stages
new weights on its node's disk for the trainer to load into it.

A plain class: :mod:`coderl.cluster.engines` makes it a Ray actor. The server command
(:func:`server_command`) carries the flags that make each server's logprobs those of the distribution
it sampled from (docs/wire-formats.md): vLLM's ``--logprobs-mode processed_logprobs``, SGLang's default
(``SGLANG_RETURN_ORIGINAL_LOGPROB`` off); coderl's server always reports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from coderl.checkpoint import resolve_checkpoint
from coderl.cluster.files import write_files
from coderl.config import Config
from coderl.errors import ClusterError
from coderl.ports import free_port


def server_command(
    cfg: Config, folder: Path, host: str, port: int, key: str
) -> tuple[list[str], dict[str, str]]:
    """The command and environment that serve the policy (checkpoint ``folder``) at ``host:port``."""
    c, model, lora = cfg.cluster, cfg.model, cfg.actor.lora_rank > 0
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if c.engine_server == "coderl":
        e = cfg.engine
        cmd = [
            sys.executable, "-m", "coderl", "engine", "serve", f"model.dtype={model.dtype}",
            f"model.device={model.device}", f"engine.max_batch_size={e.max_batch_size}",
            f"engine.prefix_cache_mb={e.prefix_cache_mb}", f"engine.update_mode={e.update_mode}",
            f"engine.decode_attention={e.decode_attention}", f"engine.cuda_graphs={str(e.cuda_graphs).lower()}",
            f"engine.speculate={e.speculate}",
            f"server.host={host}", f"server.port={port}", f"server.api_key={key}", f"run.seed={cfg.run.seed}",
            "run.log_level=warning",
        ]  # fmt: skip
        if model.path is not None:
            cmd.append(f"model.path={folder}")
    elif c.engine_server == "vllm":
        cmd = [
            "vllm", "serve", str(folder), "--host", host, "--port", str(port), "--api-key", key,
            "--logprobs-mode", "processed_logprobs", "--dtype", model.dtype, "--seed", str(cfg.run.seed),
        ]  # fmt: skip
        if lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(cfg.actor.lora_rank)]
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    else:
        cmd = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(folder), "--host", host,
            "--port", str(port), "--api-key", key, "--dtype", model.dtype, "--random-seed", str(cfg.run.seed),
        ]  # fmt: skip
        env["SGLANG_RETURN_ORIGINAL_LOGPROB"] = "0"  # temperature-scaled logprobs, what the trainer scores
        if lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(cfg.actor.lora_rank)]
            cmd += ["--lora-target-modules", *cfg.actor.lora_targets]
    return [*cmd, *c.engine_args], env


class EngineLauncher:
    """Launches one server and stages weights for it (module doc)."""

    def __init__(self, cfg: Config, key: str) -> None:
        self.cfg = cfg
        self.key = key
        self.dir = Path(tempfile.mkdtemp(prefix="coderl-engine-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    async def start(self) -> str:
        """Launch the server; its base URL once it answers ``/health``."""
        if self.proc is not None and self.proc.poll() is None:
            return self.url
        host = _node_ip()
        folder = await asyncio.to_thread(resolve_checkpoint, self.cfg.model.path, self.cfg.model.cache_dir)
        port = free_port(host)
        cmd, env = server_command(self.cfg, folder, host, port, self.key)
        log = (self.dir / "server.log").open("wb")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)  # noqa: ASYNC220 (returns at once)
        self.url = f"http://{host}:{port}"
        deadline = time.monotonic() + self.cfg.cluster.engine_start_timeout_s
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                if self.proc.poll() is not None:
                    raise ClusterError(
                        f"the engine server ({cmd[0]} {' '.join(cmd[1:3])}) exited with {self.proc.returncode} "
                        f"while starting on {host}: {self._log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return self.url
                if time.monotonic() > deadline:
                    self.stop()
                    raise ClusterError(
                        f"the engine server on {host} did not answer /health within "
                        f"cluster.engine_start_timeout_s={self.cfg.cluster.engine_start_timeout_s:g} s: {self._log_tail()}"
                    )
                await asyncio.sleep(0.5)

    def _log_tail(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else "(no log)"

    def stage(self, files: dict[str, bytes], kind: str, version: int) -> str:
        """Write a checkpoint or adapter folder (``files``: relative path -> bytes) on this node; its
        path, for the trainer to load into the server. Older folders of the same kind are removed (the
        server has read them: the trainer loads one version before it stages the next)."""
        folder = self.dir / f"{kind}-v{version}"
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_files(tmp, files)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        for old in self.dir.glob(f"{kind}-v*"):
            if old != folder and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        return str(folder)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _node_ip() -> str:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return str(ray.util.get_node_ip_address())
    return "127.0.0.1"
