"""The docker backend's task image, built on this machine: ``coderl sandbox image build``.

This module owns the image's recipe (a Debian root file system with Python 3, pytest, git and patch
from Debian's own packages), its content tag (``coderl-task:<digest of the recipe>``), the cached
root-file-system tarball under the coderl cache folder, and ``docker import`` of that tarball. It needs
no container registry: debootstrap fetches the packages from a Debian mirror.

It must not start or configure a Docker daemon, run containers, or be imported by the sandbox
backends on their hot path (only :func:`image_tag`, :func:`image_present` and :func:`docker_cli`,
which finds the CLI, are cheap). Building is an explicit, root-only action of the command line and
of ``scripts/test.sh``; nothing builds an image as a side effect of creating a sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from coderl.errors import SandboxError

REPOSITORY = "coderl-task"
MIRROR = "http://deb.debian.org/debian"
BUILD_COMMAND = "coderl sandbox image build"


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the image's content; its digest is the image's tag."""

    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3", "python3-pytest", "git", "patch")
    """Beyond minbase (bash, coreutils with ``timeout``, util-linux, grep, sed, tar): what grading
    runs (``python -m pytest``, ``git apply``, ``patch -p1``)."""
    symlinks: tuple[tuple[str, str], ...] = (("usr/bin/python", "python3"),)
    """(path in the root file system, target): graders and agents call ``python``, Debian ships ``python3``."""
    env: tuple[tuple[str, str], ...] = (("LANG", "C.UTF-8"),)
    """Image environment (``docker import --change ENV``); docker adds the usual PATH itself."""
    removed: tuple[str, ...] = ("var/cache/apt/archives", "var/lib/apt/lists")
    """Folders emptied before packing (download caches, not part of the system)."""
    format: int = 1
    """Bumped whenever the build steps change in a way the fields above do not show."""

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


DEFAULT_RECIPE = Recipe()


def image_tag(recipe: Recipe = DEFAULT_RECIPE) -> str:
    """``coderl-task:<digest>``: the tag of the image this recipe builds."""
    return f"{REPOSITORY}:{recipe.digest()}"


def image_cache_dir() -> Path:
    """Where root-file-system tarballs are kept: ``<coderl cache>/images``."""
    from coderl.checkpoint import cache_root

    return cache_root() / "images"


def docker_cli() -> str:
    for name in (os.environ.get("CODERL_DOCKER", ""), "docker", "podman"):
        if name and shutil.which(name):
            return name
    raise SandboxError(
        "no docker or podman CLI found; install one (as root: apt-get install docker.io) or use sandbox.backend=bwrap"
    )


def rootfs_tarball(recipe: Recipe = DEFAULT_RECIPE) -> Path:
    return image_cache_dir() / f"{REPOSITORY}-{recipe.digest()}.tar"


def image_present(tag: str, cli: str | None = None) -> bool:
    """Whether the daemon behind ``cli`` holds ``tag`` (False too where no daemon answers)."""
    try:
        r = subprocess.run(
            [cli or docker_cli(), "image", "inspect", "--format", "{{.Id}}", tag],
            capture_output=True,
            timeout=30,
        )
    except (SandboxError, OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


BuildStep = Literal["present", "imported", "built"]


@dataclass
class BuildResult:
    tag: str
    step: BuildStep
    """present: the daemon already had it; imported: from the cached tarball; built: debootstrap ran."""
    tarball: Path


def build_image(
    tag: str | None = None,
    *,
    recipe: Recipe = DEFAULT_RECIPE,
    mirror: str = MIRROR,
    rebuild: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> BuildResult:
    """Make sure the daemon holds the recipe's image, tagged ``image_tag(recipe)`` (and ``tag`` too
    where given): nothing to do when it is there; else ``docker import`` of the cached root-file-system
    tarball, built first with debootstrap where missing (minutes; ``rebuild`` forces it)."""
    cli = docker_cli()
    _require_daemon(cli)
    own = image_tag(recipe)
    tarball = rootfs_tarball(recipe)
    step: BuildStep = "present"
    if rebuild or not image_present(own, cli):
        step = "imported"
        if rebuild or not tarball.is_file():
            say(
                f"building the root file system with debootstrap ({recipe.suite}, {mirror}); minutes the first time"
            )
            build_rootfs_tarball(tarball, recipe=recipe, mirror=mirror, say=say)
            step = "built"
        say(f"importing {tarball} as {own}")
        _import(cli, tarball, own, recipe)
    if tag and tag != own:
        _run([cli, "tag", own, tag], "docker tag")
    return BuildResult(tag or own, step, tarball)


def build_rootfs_tarball(
    dest: Path,
    *,
    recipe: Recipe = DEFAULT_RECIPE,
    mirror: str = MIRROR,
    say: Callable[[str], None] = lambda _: None,
) -> None:
    """debootstrap the recipe into a scratch folder beside ``dest``, finish it, pack it into ``dest``."""
    if os.geteuid() != 0:
        raise SandboxError(
            f"building the task image needs root (debootstrap chroots); run `sudo {BUILD_COMMAND}`"
        )
    debootstrap = _ensure_debootstrap(say)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=dest.parent))
    rootfs = scratch / "rootfs"
    log = dest.with_suffix(".debootstrap.log")
    try:
        with open(log, "wb") as out:
            r = subprocess.run(
                [debootstrap, f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}",
                 recipe.suite, str(rootfs), mirror],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        if r.returncode != 0:
            tail = log.read_text(errors="replace")[-1500:]
            raise SandboxError(
                f"debootstrap {recipe.suite} from {mirror} failed (exit {r.returncode}); log {log}:\n{tail}"
            )
        _finish(rootfs, recipe)
        partial = scratch / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "--exclude=./dev/*", "--exclude=./proc/*",
              "--exclude=./sys/*", "-cf", str(partial), "."], "tar")  # fmt: skip
        partial.replace(dest)
    finally:
        _unmount_below(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def _finish(rootfs: Path, recipe: Recipe) -> None:
    for rel, target in recipe.symlinks:
        link = rootfs / rel
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target)
    for rel in recipe.removed:
        folder = rootfs / rel
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    for tool in ("bin/bash", "usr/bin/timeout", "usr/bin/git", "usr/bin/patch", "usr/bin/python3"):
        if not (rootfs / tool).exists():
            raise SandboxError(
                f"the built root file system has no /{tool}; the recipe {recipe} is incomplete"
            )


def _import(cli: str, tarball: Path, tag: str, recipe: Recipe) -> None:
    changes = [a for k, v in recipe.env for a in ("--change", f"ENV {k}={v}")]
    changes += ["--change", f"LABEL org.coderl.recipe={recipe.digest()}"]
    with open(tarball, "rb") as stdin:
        r = subprocess.run([cli, "import", *changes, "-", tag], stdin=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise SandboxError(f"{cli} import {tarball} as {tag} failed: {(r.stderr or r.stdout).strip()[:500]}")


def _ensure_debootstrap(say: Callable[[str], None]) -> str:
    found = shutil.which("debootstrap")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise SandboxError(
            "debootstrap is not installed and there is no apt-get to install it; install debootstrap"
        )
    say("installing debootstrap with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], "apt-get update", env=env)
    _run(["apt-get", "install", "-y", "-qq", "debootstrap"], "apt-get install debootstrap", env=env)
    found = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None
    )
    if found is None:
        raise SandboxError("apt-get installed debootstrap but it is not on PATH; add /usr/sbin to PATH")
    return found


def _require_daemon(cli: str) -> None:
    try:
        r = subprocess.run(
            [cli, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{cli} info did not answer in 30 s; is the Docker daemon stuck?") from None
    if r.returncode != 0:
        raise SandboxError(
            f"no Docker daemon answers ({cli} info: {(r.stderr or r.stdout).strip()[:200]}); start one, e.g. "
            "`dockerd --bridge=none --iptables=false &` as root (apt-get install docker.io provides it)"
        )


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SandboxError(f"{what} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")


def _unmount_below(folder: Path) -> None:
    """Lazily unmount whatever a failed debootstrap left mounted in its target (/proc, /sys), so that
    removing the scratch folder never walks into the host's /proc or /sys."""
    prefix = str(folder.resolve()) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[4] for line in lines if line.split()[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
