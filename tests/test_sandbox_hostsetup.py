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


def test_a_host_view_of_a_folder_made_again_shows_the_new_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv deleted and made again at the same path (a reused pytest folder) must not be seen
    through the view made for the old one: that view shows no files, and bwrap cannot bind from it."""
    monkeypatch.setenv("CODERL_SANDBOX_DIR", str(tmp_path / "state"))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    prefix = private / "venv"
    prefix.mkdir()
    (prefix / "marker").write_text("first")
    view = hostsetup.host_view(prefix)
    try:
        assert (view / "marker").read_text() == "first" and hostsetup.host_view(prefix) == view
        for entry in prefix.iterdir():  # the folder goes; the view made for it stays mounted
            entry.unlink()
        prefix.rmdir()
        prefix.mkdir()
        (prefix / "marker").write_text("second")
        assert not (view / "marker").exists()  # the stale view: the old folder, now empty
        assert hostsetup.host_view(prefix) == view
        assert (view / "marker").read_text() == "second"
    finally:
        while is_mount_point(view):
            hostsetup.unmount(view)


def test_host_views_of_deleted_folders_are_swept_and_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view outlives its folder (a deleted virtualenv) until a reboot, and every bwrap start reads
    every host mount once per bind: the once-per-process sweep takes such views down."""
    monkeypatch.setenv("CODERL_SANDBOX_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(hostsetup, "_swept", False)
    private = tmp_path / "private with space"  # mountinfo escapes it as \040
    private.mkdir(mode=0o700)
    gone, kept = private / "gone", private / "kept"
    for prefix in (gone, kept):
        prefix.mkdir()
        (prefix / "marker").write_text(prefix.name)
    stale, live = hostsetup.host_view(gone), hostsetup.host_view(kept)
    try:
        (gone / "marker").unlink()
        gone.rmdir()
        assert is_mount_point(stale)
        assert sweep_stale_workspaces() == 0  # no workspaces; the views are swept on the way
        assert not is_mount_point(stale) and not stale.exists()
        assert is_mount_point(live) and (live / "marker").read_text() == "kept"
        assert hostsetup.sweep_stale_host_views(state_dir() / "host") == 0
    finally:
        for view in (stale, live):
            while is_mount_point(view):
                hostsetup.unmount(view)
