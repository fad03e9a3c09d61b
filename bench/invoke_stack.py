"""The processes `bench_invoke.py` starts and always stops: a throwaway PostgreSQL, a Temporal dev
server, the local upstream simulator, the worker, the API and (when installed) a LiteLLM proxy.

Everything listens on 127.0.0.1 on free ports and writes its log under one temporary directory.
Child processes are stopped by their own pid (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.child_process import Child, http_ok, port_open
from bench.local_postgres import LocalPostgres
from core.local_ports import free_port
from core.settings import Settings
from core.temporal_dev_server import dynamic_config_args

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


@dataclass
class Stack:
    """Owns every process and file the benchmark creates; `close()` undoes all of it."""

    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mr-bench-invoke.")))
    children: list[Child] = field(default_factory=list)
    postgres: LocalPostgres | None = None
    temporal_port: int = 0
    temporal_metrics_port: int = 0
    upstream_port: int = 0
    api_port: int = 0
    litellm_port: int = 0
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def __post_init__(self) -> None:
        self.work.chmod(0o755)  # PostgreSQL runs as another user and needs to reach its dir

    # -- processes ----------------------------------------------------------------------
    def spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
    ) -> Child:
        log = self.work / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C reaches us; we stop them in order
            )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def wait_until(self, check: object, what: str, child: Child | None, timeout: float) -> None:
        assert callable(check)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if child is not None and not child.alive():
                raise RuntimeError(f"{what} exited early:\n{child.tail()}")
            time.sleep(0.1)
        tail = child.tail() if child is not None else ""
        raise RuntimeError(f"{what} was not up within {timeout:.0f}s\n{tail}")

    def stop_child(self, child: Child, grace: float = 15.0) -> None:
        if child.alive():
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        try:
            child.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
            child.proc.wait(timeout=10)

    # -- PostgreSQL -----------------------------------------------------------------------
    def start_postgres(self) -> str:
        """A throwaway server under the work directory; returns its URL."""
        self.postgres = LocalPostgres(self.work)
        return self.postgres.start()

    # -- Temporal, upstream, worker, API, LiteLLM -----------------------------------------
    def start_temporal(self, db_file: Path | None = None) -> Child:
        """The stack's dev server: its store in memory, or in `db_file` so that it outlives a
        restart (as `make dev`'s and a real cluster's does). Started again after `retire`, it
        listens on the same ports."""
        if not self.temporal_port:
            self.temporal_port, self.temporal_metrics_port = free_port(), free_port()
        return self._dev_server(
            "temporal", self.temporal_port, self.temporal_metrics_port, db_file=db_file
        )

    def start_spare_temporal(self) -> tuple[Child, int]:
        """A second, fresh dev server (`temporal-spare`), for a measurement that must neither
        disturb the stack's server nor inherit its history; the caller stops it."""
        port = free_port()
        return self._dev_server("temporal-spare", port, free_port()), port

    def _dev_server(
        self, name: str, port: int, metrics_port: int, db_file: Path | None = None
    ) -> Child:
        store = ["--db-filename", str(db_file)] if db_file is not None else []
        child = self.spawn(
            name,
            [
                str(VENV_BIN / "temporal"),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--http-port",
                str(free_port()),
                "--metrics-port",
                str(metrics_port),
                "--log-level",
                "error",
                *store,
                *dynamic_config_args(),
            ],
        )
        self.wait_until(lambda: port_open(port), f"Temporal dev server ({name})", child, 60)
        return child

    def start_upstream(self) -> Child:
        self.upstream_port = free_port()
        child = self.spawn(
            "upstream",
            [sys.executable, "-m", "providers.upstream", "--port", str(self.upstream_port)],
        )
        self.wait_until(lambda: port_open(self.upstream_port), "upstream simulator", child, 30)
        return child

    def service_env(self, database_url: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")}
        env.update(
            {
                "MODEL_ROUTER_ENVIRONMENT": "development",
                "MODEL_ROUTER_DATABASE_URL": database_url,
                "MODEL_ROUTER_TEMPORAL_ADDRESS": f"127.0.0.1:{self.temporal_port}",
                "MODEL_ROUTER_AUTH_JWT_SECRET": self.jwt_secret,
                "MODEL_ROUTER_ALLOW_UPSTREAM_ENDPOINTS": "true",
                "MODEL_ROUTER_ARTIFACT_ROOT": str(self.work / "artifacts"),
                "MODEL_ROUTER_SCHEDULES_ENABLED": "false",
            }
        )
        return env

    def settings(self, database_url: str) -> Settings:
        """The settings the benchmark's own process uses to reach the stack: the same database,
        Temporal, token secret and artifacts as the services', no `.env` file read."""
        return Settings(
            environment="development",
            database_url=database_url,
            temporal_address=f"127.0.0.1:{self.temporal_port}",
            auth_jwt_secret=self.jwt_secret,
            allow_upstream_endpoints=True,
            artifact_root=self.work / "artifacts",
            schedules_enabled=False,
            _env_file=None,
        )

    def start_worker(self, env: dict[str, str]) -> Child:
        child = self.spawn("worker", [sys.executable, "-c", "import worker; worker.main()"], env)

        def polling() -> bool:
            return "worker polling task queue" in child.log.read_text(errors="replace")

        self.wait_until(polling, "worker", child, 60)
        return child

    def start_api(self, env: dict[str, str]) -> Child:
        child, self.api_port = self.spawn_api("api", env)
        return child

    def spawn_api(
        self, name: str, env: dict[str, str], cwd: Path = ROOT, port: int = 0
    ) -> tuple[Child, int]:
        """One API process from the checkout at `cwd`, ready (/readyz); it and its port (`port`,
        or a free one)."""
        port = port or free_port()
        argv = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
        child = self.spawn(name, [*argv, "--log-level", "warning"], env, cwd=cwd)
        url = f"http://127.0.0.1:{port}/readyz"
        self.wait_until(lambda: http_ok(url), f"API {name} (/readyz)", child, 60)
        return child, port

    def start_litellm(self, litellm: Path, master_key: str, upstream_model: str) -> Child:
        """LiteLLM's proxy with one model on the simulator (an OpenAI-compatible backend), no
        database, no callbacks, the bundled model cost map (no network), access log off."""
        self.litellm_port = free_port()
        config = self.work / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            f"  - model_name: {upstream_model}\n"
            "    litellm_params:\n"
            f"      model: openai/{upstream_model}\n"
            f"      api_base: http://127.0.0.1:{self.upstream_port}/v1\n"
            "      api_key: sk-bench-upstream\n"
            "litellm_settings:\n"
            "  telemetry: false\n"
            "general_settings:\n"
            f"  master_key: {master_key}\n"
        )
        log_config = self.work / "litellm-logging.json"
        log_config.write_text(
            '{"version": 1, "disable_existing_loggers": false,'
            ' "handlers": {"h": {"class": "logging.StreamHandler"}},'
            ' "loggers": {"uvicorn": {"handlers": ["h"], "level": "WARNING"},'
            ' "uvicorn.access": {"handlers": ["h"], "level": "WARNING", "propagate": false}}}'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")}
        env.update(
            {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_TELEMETRY": "False",
                "LITELLM_LOG": "ERROR",
                "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
            }
        )
        child = self.spawn(
            "litellm",
            [
                str(litellm),
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.litellm_port),
                "--num_workers",
                "1",
                "--log_config",
                str(log_config),
            ],
            env,
            cwd=self.work,
        )
        url = f"http://127.0.0.1:{self.litellm_port}/health/liveliness"
        self.wait_until(lambda: http_ok(url), "LiteLLM proxy", child, 120)
        return child

    def retire(self, name: str, kill: bool = False) -> None:
        """Stop `name` (SIGKILL when `kill`: a crash, no shutdown of its own) and take it off
        the stack, its log kept as `<name>.<n>.log`, so that the same name can be started
        again (a restart) and its readiness read from a fresh log."""
        child = self.child(name)
        assert child is not None, name
        if kill:
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
            child.proc.wait(timeout=10)
        else:
            self.stop_child(child)
        self.children.remove(child)
        n = len(list(self.work.glob(f"{name}.*.log"))) + 1
        child.log.rename(self.work / f"{name}.{n}.log")

    def child(self, name: str) -> Child | None:
        return next((c for c in self.children if c.name == name), None)

    def close(self, keep: bool = False) -> None:
        # Clients of Temporal and PostgreSQL first, then the servers.
        for name in ("litellm", "api2", "api", "worker", "upstream", "temporal", "temporal-spare"):
            child = self.child(name)
            if child is not None:
                with contextlib.suppress(Exception):
                    self.stop_child(child)
        if self.postgres is not None:
            with contextlib.suppress(Exception):
                self.postgres.stop()
        if keep:
            print(f"kept {self.work}", flush=True)
        else:
            shutil.rmtree(self.work, ignore_errors=True)
