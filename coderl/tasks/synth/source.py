"""Where ``coderl tasks synth`` gets the repository it mutates: a local folder, or ``pypi:NAME[==VERSION]``,
a project's source distribution fetched with pip and unpacked.

Owns: parsing the ``pypi:`` form, ``pip download`` of the sdist (no wheel, no dependencies; pip is the
only network access), safe unpacking into ``OUT_DIR/sources/``, and finding the sources a C build would
compile (:func:`native_sources`). It does not run tests or mutate anything (:mod:`coderl.tasks.synth.build`
does; it refuses a project that needs its C build, as its unbuilt suite shows, and runs one whose C
speedups are optional on its pure-Python code).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from coderl.errors import TaskError

PYPI = "pypi:"
_SPEC = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(==[A-Za-z0-9.+!_-]+)?$")
_NATIVE = ("*.c", "*.cc", "*.cpp", "*.cxx", "*.pyx", "*.pxd", "*.rs", "*.f90")
"""Sources a C (or Cython, Rust, Fortran) build compiles."""


def is_pypi(given: str) -> bool:
    return given.startswith(PYPI)


def pypi_spec(given: str) -> str:
    """``NAME[==VERSION]`` of ``pypi:NAME[==VERSION]``; TaskError for anything else."""
    spec = given[len(PYPI) :].strip()
    if not _SPEC.match(spec):
        raise TaskError(
            f"{given!r} is not a PyPI project: write pypi:NAME or pypi:NAME==VERSION (for example pypi:toolz==0.12.1)"
        )
    return spec


def fetch_pypi(given: str, into: Path, timeout_s: float = 600.0) -> Path:
    """The unpacked source distribution of ``pypi:NAME[==VERSION]`` under ``into`` (made once: an
    unpacked folder already there is reused)."""
    spec = pypi_spec(given)
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=into) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
            "-d", tmp, spec,
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TaskError(f"pip download {spec} took over {timeout_s:.0f} s") from exc
        archives = [p for p in Path(tmp).iterdir() if p.name.endswith((".tar.gz", ".tgz", ".zip", ".tar.bz2"))]
        said = done.stdout + done.stderr
        if "No matching distribution found" in said:
            raise TaskError(
                f"pypi:{spec}: the package index has no distribution of that name and version (check the "
                f"spelling, or leave ==VERSION out for the newest); pip said: {_last_error(said)}"
            )
        if done.returncode != 0 or len(archives) != 1:
            raise TaskError(
                f"pip could not download the source distribution of {spec} (a project with no sdist on the "
                f"package index cannot be used):\n{(done.stdout + done.stderr)[-1500:]}"
            )
        archive = archives[0]
        folder = into / _stem(archive.name)
        if not folder.is_dir():
            _unpack(archive, folder)
    return folder


def native_sources(root: Path) -> list[str]:
    """What a C (or Cython, Rust, Fortran) build of the project would compile, relative: its native
    sources, or ``setup.py declares ext_modules``; [] for a pure-Python project. Many projects build
    such code only as optional speedups over a pure-Python fallback (markupsafe, simplejson):
    whether the project needs it is for its unbuilt test suite to show."""
    paths = {str(p.relative_to(root)) for pattern in _NATIVE for p in root.rglob(pattern)}
    found = sorted(paths, key=lambda p: (p.count("/"), p))  # the project's own first, vendored deps after
    setup = root / "setup.py"
    if not found and setup.is_file() and re.search(r"\bExtension\s*\(|ext_modules\s*=", setup.read_text(errors="replace")):
        found = ["setup.py declares ext_modules"]
    return found


def needs_c_build(name: str, found: list[str], passing: int) -> str:
    """Why a project whose unbuilt suite passes too few tests is refused, when it has native sources."""
    shown = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
    return (
        f"{name} needs a C build ({shown}): without it its test suite passes {passing} test"
        f"{'s' if passing != 1 else ''}; coderl tasks synth takes projects whose tests run from the source "
        "tree, unbuilt (pure Python, or C speedups over a pure-Python fallback)"
    )


def _last_error(text: str) -> str:
    """pip's first ``ERROR:`` line (what it could not find, with the versions there are)."""
    errors = [line.strip() for line in text.splitlines() if line.strip().startswith("ERROR:")]
    return errors[0][:600] if errors else text.strip()[-300:]


def _stem(name: str) -> str:
    for suffix in (".tar.gz", ".tar.bz2", ".tgz", ".zip"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _unpack(archive: Path, folder: Path) -> None:
    """Unpack ``archive`` to ``folder`` (its single top-level directory becomes ``folder``), atomically;
    members that would land outside it, links and device files are refused (tarfile's data filter)."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=folder.parent))
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise TaskError(f"{archive.name}: member {member!r} would land outside the folder")
                zf.extractall(staging)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(staging, filter="data")
        tops = list(staging.iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else staging
        root.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
