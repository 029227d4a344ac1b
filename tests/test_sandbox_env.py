"""The bwrap sandbox exposes the running Python environment (a virtualenv too), read-only."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

PROBE = textwrap.dedent(
    """
    import asyncio
    from coderl.sandbox import SandboxSpec, create_sandbox

    async def main():
        async with await create_sandbox(SandboxSpec()) as sb:
            r = await sb.exec("venv-tool && touch \\"$(dirname $(command -v python3))/x\\"", timeout=60)
            print(repr(r.stdout), r.exit_code, repr(r.stderr[-300:]), sep="|")

    asyncio.run(main())
    """
)


def test_a_virtualenv_under_tmp_is_the_sandboxes_python(tmp_path: Path) -> None:
    """A virtualenv made with ``mktemp -d`` lives under /tmp, which the sandbox replaces with its own:
    its interpreter, its packages and its console scripts must still be there, at the same paths,
    read-only (a remote agent such as mini-swe-agent is such a console script)."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True
    )
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (site / "venv_marker.py").write_text("import sys\nWHERE = sys.prefix\n")
    tool = venv / "bin" / "venv-tool"
    tool.write_text(f"#!{venv}/bin/python3\nimport venv_marker\nprint(venv_marker.WHERE)\n")
    tool.chmod(0o755)
    # The probe imports coderl: from this test's environment, which the new virtualenv does not see when
    # it is itself a virtualenv (--system-site-packages reaches the base interpreter's packages only).
    # The sandbox clears the environment, so this does not reach the command it runs.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    stdout, code, stderr = out.stdout.strip().split("|")
    assert stdout == repr(f"{venv}\n"), stderr  # the script ran on the virtualenv's interpreter and packages
    assert code != "0" and "Read-only" in stderr  # and the virtualenv cannot be changed from inside
    assert not (venv / "bin" / "x").exists()
