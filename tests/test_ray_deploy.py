"""The Ray cluster's deployment files: the KubeRay manifest (deploy/k8s/raycluster.yaml) and the node
image (deploy/ray/Dockerfile) must agree with each other and with our CLI and config: the job's
commands parse, its settings resolve to a valid config, the cluster can hold the rollout workers that
config asks for, and the run directory is on the volume. The image is built only where a Docker daemon
answers (tests/test_proxy_deploy.py builds the proxy's the same way)."""

from __future__ import annotations

import json
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from coderl.cli.main import _split_config, build_parser
from coderl.config import Config, load_config
from coderl.config.packaged import default_train_config
from tests.test_proxy_deploy import docker_daemon, need_base_image
from tests.test_proxy_deploy import dockerfile as proxy_dockerfile

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "deploy" / "k8s" / "raycluster.yaml"
DOCKERFILE = ROOT / "deploy" / "ray" / "Dockerfile"


def manifest() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def job_env() -> dict[str, str]:
    env = yaml.safe_load(manifest()["RayJob"]["spec"]["runtimeEnvYAML"])["env_vars"]
    assert all(isinstance(v, str) for v in env.values()), env  # Ray's env_vars are strings
    return dict(env)


def job_commands() -> list[list[str]]:
    """The coderl command lines of the job's entrypoint (a `bash -c` choosing fresh run or resume)."""
    shell, flag, script = shlex.split(manifest()["RayJob"]["spec"]["entrypoint"])
    assert (shell, flag) == ("bash", "-c")
    return [shlex.split(part.split("exec", 1)[1]) for part in script.split(";") if "exec coderl" in part]


def resolve(args: list[str]) -> tuple[Any, Config]:
    """What the job's `coderl ARGS` would run with (the packaged main job's defaults for a fresh run)."""
    assert args[0] == "coderl"
    ns = build_parser().parse_args(args[1:])
    assert ns.command == "train"
    path, overrides = _split_config(ns)
    return ns, load_config(path, overrides, env=job_env(), defaults=None if path else default_train_config())


def group_resources(group: dict[str, Any]) -> dict[str, float]:
    """What one pod of a group offers Ray: num-cpus and the custom resources of its rayStartParams."""
    params = group["rayStartParams"]
    offered = {"CPU": float(params["num-cpus"])}
    if "resources" in params:  # KubeRay's form: a JSON object inside a quoted string
        offered.update(json.loads(params["resources"].strip("'\"").replace('\\"', '"')))
    return offered


def test_the_job_runs_the_main_job_on_the_ray_cluster_and_resumes_it() -> None:
    kinds = manifest()
    assert {"Namespace", "PersistentVolumeClaim", "RayCluster", "RayJob"} <= set(kinds)
    namespaces = {d["metadata"].get("namespace") for k, d in kinds.items() if k != "Namespace"}
    assert namespaces == {kinds["Namespace"]["metadata"]["name"]}
    cluster = kinds["RayCluster"]
    assert kinds["RayJob"]["spec"]["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}

    resume, fresh = job_commands()  # if a run is there: resume it; else: a fresh run
    _, cfg = resolve(fresh)
    assert cfg.cluster.backend == "ray" and cfg.cluster.address == "auto"
    assert cfg.sft.before_rl and cfg.train.val_size > 0  # the packaged recipe, not the built-in defaults
    ns_resume, _ = resolve(resume)
    assert ns_resume.resume == str(cfg.run.dir)  # a resubmitted job resumes this run
    assert f"[ -f {cfg.run.dir}/config.yaml ]" in manifest()["RayJob"]["spec"]["entrypoint"]

    # the run directory is on the head's volume, the volume is the claim
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    (container,) = head["containers"]
    (mount,) = container["volumeMounts"]
    assert cfg.run.dir is not None and cfg.run.dir.is_relative_to(mount["mountPath"])
    (volume,) = head["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["persistentVolumeClaim"]["claimName"] == kinds["PersistentVolumeClaim"]["metadata"]["name"]

    # the rollout pods can hold every worker's bundle; the head (the trainer's node) holds none
    bundle = {"CPU": cfg.cluster.worker_cpus, **cfg.cluster.worker_resources}
    assert group_resources(cluster["spec"]["headGroupSpec"])["CPU"] == 0
    assert not set(cfg.cluster.worker_resources) & set(group_resources(cluster["spec"]["headGroupSpec"]))
    (rollout,) = cluster["spec"]["workerGroupSpecs"]
    per_pod = group_resources(rollout)
    fits = min(int(per_pod.get(k, 0) // v) for k, v in bundle.items() if v > 0)
    assert fits * rollout["replicas"] >= cfg.cluster.rollout_workers, (per_pod, bundle)
    assert rollout["minReplicas"] <= rollout["replicas"] <= rollout["maxReplicas"]
    (worker,) = rollout["template"]["spec"]["containers"]
    assert float(worker["resources"]["limits"]["cpu"]) >= per_pod["CPU"]  # Ray's CPUs are the pod's


def test_every_pod_runs_the_image_unprivileged_with_sandboxes_allowed() -> None:
    kinds = manifest()
    spec = kinds["RayCluster"]["spec"]
    pods = [
        spec["headGroupSpec"]["template"]["spec"],
        *[g["template"]["spec"] for g in spec["workerGroupSpecs"]],
    ]
    user = [args for ins, args in dockerfile() if ins == "USER"][-1].split(":")[0]
    images = set()
    for pod in [*pods, kinds["RayJob"]["spec"]["submitterPodTemplate"]["spec"]]:
        assert (
            pod["securityContext"]["runAsNonRoot"] is True
            and str(pod["securityContext"]["runAsUser"]) == user
        )
        images |= {c["image"] for c in pod["containers"]}
    assert len(images) == 1  # one image for every node
    for pod in pods:  # bubblewrap needs user namespaces, which default seccomp profiles refuse
        (container,) = pod["containers"]
        assert container["securityContext"]["seccompProfile"] == {"type": "Unconfined"}


def dockerfile() -> list[tuple[str, str]]:
    return proxy_dockerfile(DOCKERFILE)


def test_the_image_installs_coderl_with_the_ray_the_cluster_declares() -> None:
    runs = [args for ins, args in dockerfile() if ins == "RUN"]
    torch_at = next(i for i, r in enumerate(runs) if "torch==" in r)
    package_at = next(i for i, r in enumerate(runs) if '"/src[ray]"' in r)
    assert torch_at < package_at and "whl/cpu" in DOCKERFILE.read_text()  # CPU torch first, pinned
    assert any("bubblewrap" in r for r in runs)  # the default sandbox
    pyproject = (ROOT / "pyproject.toml").read_text()
    (extra,) = [ln for ln in pyproject.splitlines() if ln.startswith("ray = ")]
    low, high = extra.split(">=")[1].split('"')[0].split(",<")
    version = manifest()["RayCluster"]["spec"]["rayVersion"]
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(low) <= as_tuple(version) < as_tuple(high)  # the cluster's Ray is one the extra allows


@pytest.mark.slow
@pytest.mark.skipif(not docker_daemon(), reason="no Docker daemon answers here (docker version fails)")
def test_the_image_builds_with_ray_coderl_and_the_default_model() -> None:
    need_base_image(DOCKERFILE)
    tag = f"coderl-ray-test:{uuid.uuid4().hex[:8]}"
    build = ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)]
    assert subprocess.run(build, timeout=3600).returncode == 0, shlex.join(build)
    try:
        check = "import ray, coderl; from coderl.checkpoint import resolve_checkpoint; print(resolve_checkpoint())"
        done = subprocess.run(
            ["docker", "run", "--rm", tag, "python", "-c", check], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert (
            subprocess.run(
                ["docker", "run", "--rm", tag, "coderl", "train", "--help"], timeout=600
            ).returncode
            == 0
        )
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)
