#!/usr/bin/env bash
# `make test`: install what is needed, start a throwaway PostgreSQL and a Temporal dev server on
# free ports, run ruff, mypy and pytest against them, and stop what it started whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
sync_env

WORK=$(mktemp -d /tmp/model-router-test.XXXXXX)
chmod 755 "$WORK"
PG_RUN=()
TEMPORAL_PID=""
MYPY_PID=""
PGDATA=""

cleanup() {
  local rc=$?
  set +e
  if [ -n "$MYPY_PID" ]; then kill "$MYPY_PID" 2>/dev/null; wait "$MYPY_PID" 2>/dev/null; fi
  if [ -n "$TEMPORAL_PID" ] && kill -0 "$TEMPORAL_PID" 2>/dev/null; then
    kill "$TEMPORAL_PID"; wait "$TEMPORAL_PID" 2>/dev/null
  fi
  if [ -n "$PGDATA" ] && [ -f "$PGDATA/postmaster.pid" ]; then
    "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

find_pg_bin() {
  local d
  for d in "$(pg_config --bindir 2>/dev/null || true)" /usr/lib/postgresql/*/bin; do
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"
    fi
  done | sort -V | tail -n 1
}

start_postgres() {
  PG_BIN=$(find_pg_bin)
  if [ -z "$PG_BIN" ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "PostgreSQL server binaries not found; install Debian's postgresql package" >&2
      echo "or set MODEL_ROUTER_TEST_DATABASE_URL" >&2
      exit 1
    fi
    echo "installing PostgreSQL (Debian package postgresql)…"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    PG_BIN=$(find_pg_bin)
  fi
  # initdb and postgres refuse to run as root: run them as an unprivileged user.
  if [ "$(id -u)" -eq 0 ]; then
    local pg_user=postgres
    if ! id "$pg_user" >/dev/null 2>&1; then
      pg_user=model-router-test
      id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$pg_user"
    fi
    PG_RUN=(runuser -u "$pg_user" --)
    install -d -o "$pg_user" "$WORK/pg" "$WORK/pgsock"
  else
    mkdir -p "$WORK/pg" "$WORK/pgsock"
  fi
  PGDATA="$WORK/pg/data"
  local port
  port=$(free_ports 1)
  "${PG_RUN[@]}" "$PG_BIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
  "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$WORK/pg/postgres.log" -w -t 60 start \
    -o "-p $port -k $WORK/pgsock -c listen_addresses=127.0.0.1 -c fsync=off \
        -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >/dev/null
  export MODEL_ROUTER_TEST_DATABASE_URL="postgresql+asyncpg://postgres@127.0.0.1:$port/postgres"
  # The canary test reads the database back with this installation's own pg_dump.
  export MODEL_ROUTER_TEST_PG_BIN="$PG_BIN"
  echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on port $port"
}

ensure_chromium() {
  # The console's browser tests drive Debian's Chromium through its chromedriver.
  if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then return; fi
  if [ "$(id -u)" -ne 0 ]; then
    # Not fatal: only tests/test_console.py needs it, and it says so when it runs.
    echo "warning: Chromium not found; install Debian's chromium and chromium-driver" >&2
    return
  fi
  echo "installing Chromium (Debian packages chromium, chromium-driver)…"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
}

start_temporal() {
  local port http_port metrics_port
  read -r port http_port metrics_port < <(free_ports 3)
  # The switches every dev server of the project runs with (core/temporal_dev_server.py).
  local switches
  mapfile -t switches < <("$VENV_BIN/python" -m core.temporal_dev_server)
  "$VENV_BIN/temporal" server start-dev --headless --ip 127.0.0.1 --port "$port" \
    --http-port "$http_port" --metrics-port "$metrics_port" --log-level error "${switches[@]}" \
    >"$WORK/temporal.log" 2>&1 &
  TEMPORAL_PID=$!
  wait_for_port "$port" "Temporal dev server" 60
  export MODEL_ROUTER_TEST_TEMPORAL_ADDRESS="127.0.0.1:$port"
  echo "Temporal dev server on port $port"
}

# mypy runs while the servers are installed and started: it takes 81 s of one core on a fresh
# clone (2026-12-02), and the installs on a clean machine mostly wait on the network.
"$VENV_BIN/mypy" . >"$WORK/mypy.log" 2>&1 &
MYPY_PID=$!

ensure_chromium
if [ -z "${MODEL_ROUTER_TEST_DATABASE_URL:-}" ]; then start_postgres; fi
if [ -z "${MODEL_ROUTER_TEST_TEMPORAL_ADDRESS:-}" ]; then start_temporal; fi

failed=0
echo "== ruff";   "$VENV_BIN/ruff" check . && "$VENV_BIN/ruff" format --check . || failed=1
echo "== mypy";   wait "$MYPY_PID" || failed=1
MYPY_PID=""
cat "$WORK/mypy.log"
echo "== pytest"
set +e
"$VENV_BIN/pytest" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  rc=1
fi
[ "$rc" -ne 0 ] && failed=1
exit $failed
