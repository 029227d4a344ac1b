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
# The docker sandbox tests (contract, hostile programs, eval) need a Docker daemon and the task image
# (`coderl sandbox image build`: Debian + Python 3 + pytest + git, root file system cached under the
# coderl cache folder); each is had here where it can be, best-effort, and the tests skip with the reason
# where not. A daemon this script starts is stopped when it ends.
DOCKERD_PID=""
stop_dockerd() {
  if [ -n "$DOCKERD_PID" ]; then
    echo "[test] stopping the dockerd this script started"
    kill "$DOCKERD_PID" 2>/dev/null || true
    wait "$DOCKERD_PID" 2>/dev/null || true
  fi
}
trap stop_dockerd EXIT
if [ "$(id -u)" = "0" ]; then
  if ! command -v dockerd >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "[test] installing docker.io for the docker sandbox tests"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null || true
  fi
  if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
    # no bridge and no iptables: sandboxes run with --network none; overlay2 where the kernel allows it, else vfs
    for driver in "" "--storage-driver=vfs"; do
      echo "[test] starting dockerd --bridge=none --iptables=false $driver (log: /tmp/coderl-test-dockerd.log)"
      # shellcheck disable=SC2086
      dockerd --bridge=none --iptables=false $driver >/tmp/coderl-test-dockerd.log 2>&1 &
      DOCKERD_PID=$!
      for _ in $(seq 60); do
        if docker info >/dev/null 2>&1 || ! kill -0 "$DOCKERD_PID" 2>/dev/null; then break; fi
        sleep 0.5
      done
      if docker info >/dev/null 2>&1; then break; fi
      stop_dockerd; DOCKERD_PID=""
    done
  fi
fi
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  echo "[test] docker task image (coderl sandbox image build)"
  "$PY" -m coderl sandbox image build >/dev/null || echo "[test] no task image: the docker tests will be skipped"
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
# Two pytest workers (pytest-xdist), each test file whole on one worker: much of the suite waits on
# processes, servers and sandboxes, so two at once finish it in about two thirds of the time on 2 cores
# (pytest 15.9 min against 24.1 in one process, fresh virtualenv, 2026-11-27). PYTEST_WORKERS=1 runs
# it in one process. OpenMP threads spin briefly (coderl.threads.spin_briefly; the pytest process
# imports torch before coderl could set it): with libgomp's default, a worker's torch threads spin on
# the cores the other worker's need.
export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}"
WORKERS="${PYTEST_WORKERS:-2}"
PARALLEL=()
if [ "$WORKERS" != "1" ]; then PARALLEL=(-n "$WORKERS" --dist loadfile); fi
# --durations: the slowest tests stay visible, so the suite's length does not creep up unnoticed
echo "[test] pytest"; "$PY" -m pytest -q -p no:cacheprovider "${PARALLEL[@]}" --durations=25 "$@"
