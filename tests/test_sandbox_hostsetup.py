"""Host-side sandbox state: workspaces left by a killed process are swept, live ones never."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from coderl.sandbox import hostsetup
from coderl.sandbox.hostsetup import UID_BASE, is_mount_point, mount_tmpfs, state_dir, sweep_stale_workspaces

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids and tmpfs workspaces need root")


def _workspace(root: Path, name: str, uid: int) -> Path:
    path = root / "ws" / name
    path.mkdir(mode=0o700)
    assert mount_tmpfs(path, 4, uid), "mounting a tmpfs failed (is this a container without CAP_SYS_ADMIN?)"
    (path / "file").write_text("x")
    return path


def test_stale_workspaces_are_swept_and_live_ones_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODERL_SANDBOX_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(hostsetup, "_swept", False)
    root = state_dir()
    stale = _workspace(root, "stale", UID_BASE + 7)
    live = _workspace(root, "live", UID_BASE + 8)
    making = root / "ws" / "making"  # created, not yet mounted: still root's
    making.mkdir()
    holder = os.open(root / "uids" / f"{UID_BASE + 8}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the live sandbox's lease
    try:
        assert sweep_stale_workspaces() == 1
        assert not stale.exists() and not is_mount_point(stale)
        assert (live / "file").read_text() == "x" and is_mount_point(live)
        assert making.is_dir()
        assert sweep_stale_workspaces() == 0  # once per process
    finally:
        os.close(holder)
        hostsetup.remove_tree(live)
    # the sweep's own lock is gone: the stale uid can be leased again
    fd = os.open(root / "uids" / f"{UID_BASE + 7}.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)
