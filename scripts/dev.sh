#!/usr/bin/env bash
# `make dev`: install what is needed, then bring the whole service up (see cli/dev.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
sync_env
exec "$VENV_BIN/model-router" dev "$@"
