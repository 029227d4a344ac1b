#!/usr/bin/env bash
# The test command: set-up (idempotent), then ruff, mypy and the whole pytest suite (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
bash scripts/setup.sh
# The viewer's browser test uses Debian's Chromium (skipped, with the reason, where it cannot be had).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test] installing chromium for the viewer test"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || true
fi
# verl, for the verl-bridge test (tests/test_verl_loop.py): a venv that sees this Python's packages
# (torch, transformers, coderl) and adds verl --no-deps (it pins an older transformers; its agent-loop
# path runs with ours) and what that path imports. Idempotent; about 25 s the first time.
if ! .venv-verl/bin/python -c "import verl.experimental.agent_loop.agent_loop" >/dev/null 2>&1; then
  echo "[test] installing verl 0.9.1 into .venv-verl"
  rm -rf .venv-verl && "$PY" -m venv .venv-verl
  outer="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  inner="$(.venv-verl/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "import site; site.addsitedir('$outer')" > "$inner/zz-outer.pth"
  .venv-verl/bin/python -m pip install -q --no-deps verl==0.9.1 2>&1 | grep -v "^WARNING: Location" || true
  .venv-verl/bin/python -m pip install -q ray hydra-core "tensordict>=0.8,<=0.10" pillow cachetools codetiming \
    dill pylatexenc 2>&1 | grep -v -E "^(verl .* requires|WARNING: Location|ERROR: pip's dependency resolver)" || true
fi
echo "[test] ruff"; "$PY" -m ruff check coderl tests examples
echo "[test] mypy"; "$PY" -m mypy
# --durations: the slowest tests stay visible, so the suite's length does not creep up unnoticed
echo "[test] pytest"; "$PY" -m pytest -q -p no:cacheprovider --durations=25 "$@"
