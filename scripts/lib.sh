# Shared by scripts/*.sh: find or install uv, then sync the locked environment.
# shellcheck shell=bash

ensure_uv() {
  if command -v uv >/dev/null 2>&1; then
    UV=(uv)
  elif python3 -m uv --version >/dev/null 2>&1; then
    UV=(python3 -m uv)
  else
    ensure_pip
    echo "installing uv with pip…" >&2
    python3 -m pip install --quiet uv 2>/dev/null \
      || python3 -m pip install --quiet --user --break-system-packages uv
    UV=(python3 -m uv)
  fi
}

ensure_pip() {
  # Debian's python3 comes without pip (and without ensurepip): installed from the
  # distribution, as the suite installs PostgreSQL and Chromium, where we may.
  python3 -m pip --version >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing python3-pip…" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
  else
    echo "neither uv nor pip is installed: install uv, or python3-pip (apt-get install python3-pip)" >&2
    return 1
  fi
}

sync_env() {
  ensure_uv
  # Bytecode written once here, for the locked packages and for ours. Every process the suite
  # and `make dev` start imports both SDKs, FastAPI and Temporal; where the environment sets
  # PYTHONDONTWRITEBYTECODE (this build machine's does), nothing else writes it, and each
  # process compiled every module again: `import api.app` took 16.2 s so on the 2-core build
  # machine (2026-12-02), 8.3 s with this, and the suite ran 999 s without it. A stale file is
  # only skipped: Python checks each source's size and time.
  "${UV[@]}" sync --frozen --quiet --compile-bytecode
  VENV_BIN="$(pwd)/.venv/bin"
  # Our own packages: every top-level directory that is one.
  local packages=(*/__init__.py)
  "$VENV_BIN/python" -m compileall -q -j 0 "${packages[@]%/__init__.py}" >/dev/null
}

free_ports() { # how many: distinct free ports below the ephemeral range (core/local_ports.py)
  "$VENV_BIN/python" -c "from core.local_ports import free_port; print(*(free_port() for _ in range(${1:-1})))"
}

wait_for_port() { # port, what, deadline-seconds
  local port=$1 what=$2 deadline=$(( $(date +%s) + ${3:-60} ))
  until "$VENV_BIN/python" -c "import socket,sys; s=socket.socket(); s.settimeout(0.3); sys.exit(s.connect_ex(('127.0.0.1',$port)))"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then echo "$what did not open port $port in time" >&2; return 1; fi
    sleep 0.2
  done
}
