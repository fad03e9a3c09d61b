#!/usr/bin/env bash
# The invoke benchmark's comparison: LiteLLM's proxy, installed into a throwaway venv (never into
# the project's), where bench/bench_invoke.py looks for it (/tmp/litellm-venv/bin/litellm).
# Usage: bench/install_litellm.sh [VENV_DIR]   (idempotent: an existing install is kept)
set -euo pipefail
venv="${1:-/tmp/litellm-venv}"
if [ -x "$venv/bin/litellm" ]; then
  echo "litellm already installed in $venv"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet 'litellm[proxy]'
# What the registry served, kept beside it: LiteLLM's speed moves with its dependencies' releases
# as well as the host's, and a run is judged against others only with both known.
"$venv/bin/pip" freeze > "$venv/freeze.txt"
"$venv/bin/litellm" --version || true
echo "installed litellm into $venv"
