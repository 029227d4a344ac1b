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
echo "[test] ruff"; "$PY" -m ruff check coderl tests examples
echo "[test] mypy"; "$PY" -m mypy
# --durations: the slowest tests stay visible, so the suite's length does not creep up unnoticed
echo "[test] pytest"; "$PY" -m pytest -q -p no:cacheprovider --durations=25 "$@"
