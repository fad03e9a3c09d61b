"""The one place configuration is read from (environment, prefix MODEL_ROUTER_, optional .env)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings_rules import unsafe_settings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MODEL_ROUTER_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        # A validation error's text holds no value read: it printed the client secret.
        hide_input_in_errors=True,
    )

    environment: Literal["development", "test", "production"] = Field(
        default="production",
        description="Production unless said otherwise: unsafe switches refuse to turn on there.",
    )

    # Store
    database_url: str = Field(
        default="sqlite+aiosqlite:///.data/model-router.db",
        description="SQLAlchemy async URL: postgresql+asyncpg://… or sqlite+aiosqlite:///….",
    )
    database_pool_size: int = Field(default=10, ge=1)
    database_echo: bool = False
    database_statement_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Longest wait for any one PostgreSQL statement of the API and the worker "
        "besides the invoke path's own (those: invoke_store_wait_seconds), and for a new "
        "connection; a connection left silent by a failover fails after it, and is replaced, "
        "instead of holding its caller until TCP gives up. Migrations are not bounded.",
    )

    # Temporal
    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    temporal_task_queue: str = Field(
        default="model-router",
        description="Task queue of the shared worker (lifecycle and other durable work).",
    )
    temporal_tls: bool = False
    temporal_tls_server_ca_cert: Path | None = None
    temporal_tls_client_cert: Path | None = None
    temporal_tls_client_key: Path | None = None
    temporal_tls_server_name: str | None = None
    temporal_api_key: SecretStr | None = None
    # How often the TLS files above are read again for a rotated certificate
    # (core/temporal_rotation.py): cert-manager renews a certificate a third of its life early.
    temporal_tls_reload_seconds: float = Field(default=30.0, gt=0)
    temporal_connect_timeout_seconds: float = Field(default=10.0, gt=0)

    # Auth
    auth_issuer: str = "model-router"
    auth_audience: str = "model-router"
    auth_algorithm: Literal["HS256", "RS256"] = Field(
        default="HS256",
        description="HS256: tokens minted by /oauth/token with auth_jwt_secret. "
        "RS256: tokens from an external issuer, verified against auth_jwks_url.",
    )
    auth_jwt_secret: SecretStr | None = Field(
        default=None,
        description="HS256 signing key; required when auth_algorithm is HS256, at least 32 "
        "bytes outside development/test.",
    )
    auth_jwks_url: str | None = None
    # RS256 key set (core/jwks.py): refreshed in the background once this old, kept while the
    # issuer cannot be reached for up to max_stale past the last good fetch.
    auth_jwks_refresh_seconds: float = Field(default=300.0, gt=0)
    auth_jwks_max_stale_seconds: float = Field(default=86400.0, gt=0)
    auth_jwks_timeout_seconds: float = Field(default=5.0, gt=0)
    auth_token_ttl_seconds: int = Field(default=3600, ge=60, le=86400)

    # API
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=0, le=65535)
    # `model-router api` processes (uvicorn workers); `make dev` runs one.
    api_workers: int = Field(default=1, ge=1)
    # Peers whose X-Forwarded-Proto / -For the API believes (uvicorn's forwarded_allow_ips:
    # comma-separated addresses or CIDRs, `*` for any): the TLS-terminating proxy in front.
    forwarded_allow_ips: str = "127.0.0.1"

    # Outbox delivery to webhook subscribers
    webhook_poll_interval_seconds: float = Field(
        default=2.0, gt=0, description="How often an idle subscription looks for new events."
    )
    # At least the delivery retries' first interval (0.5 s, workflows/webhook_delivery.py): a
    # cap below it is a retry policy Temporal refuses, and every subscription's delivery stopped
    # at its next event once such a deploy reached it.
    webhook_retry_max_interval_seconds: float = Field(
        default=60.0, ge=0.5, description="Backoff cap while a receiver is failing."
    )
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, description="Per-delivery timeout.")
    # Every subscription's deliveries run on the worker's shared activity slots, beside probes,
    # closes and sweeps: one tenant's hundreds of slow receivers held them all.
    webhook_end_after_failing_hours: int = Field(
        default=120,
        ge=0,
        description="A subscription whose receiver has failed every delivery this long is ended "
        "(as a 410 ends it); 0: retried for ever.",
    )
    webhook_max_subscriptions_per_tenant: int = Field(
        default=20, ge=1, le=10_000, description="Active webhook subscriptions a tenant may hold."
    )
    webhook_allowed_private_networks: list[IPvAnyNetwork] = Field(
        default=[],
        description="Private networks (CIDR) webhook receivers may be on; every other receiver "
        "must resolve to public addresses only (domain/webhook_targets.py).",
    )

    # The operator CLI talks to a running API with client credentials.
    api_url: str = Field(default="http://127.0.0.1:8000", description="API the CLI talks to.")
    client_id: str | None = Field(default=None, description="OAuth client the CLI acts as.")
    client_secret: SecretStr | None = Field(default=None, description="That client's secret.")

    # Routing (ModelAccess:Routing): the probe statistics its latency and history terms score.
    routing_stats_window_minutes: int = Field(
        default=60,
        ge=1,
        le=10_080,
        description="Probe samples routing scores latency and success rate over (last N min).",
    )
    routing_stats_refresh_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A tenant's routing snapshot is compiled again once its stats are this old.",
    )
    # Invocations (ModelAccess:Invocation)
    temporal_invocation_task_queue: str = Field(
        default="model-router-invocations",
        description="Task queue of InvokeModel workflows; API processes and workers poll it.",
    )
    default_timeout_seconds: float = Field(
        default=120.0, gt=0, description="DefaultTimeoutSeconds: an invocation's overall budget."
    )
    provider_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    provider_read_timeout_seconds: float = Field(
        default=60.0, gt=0, description="Longest silence tolerated from a provider mid-call."
    )
    # The SDKs keep an idle connection 5 s, so calls to one provider more than 5 s apart (an
    # agent's turns, between tool runs) each opened a new one: a TCP and a TLS handshake, two
    # round trips to a hosted provider, and on loopback TLS +0.9 ms and +0.55 CPU ms a call
    # (streamed answers 5.5 s apart, 16 each, 2026-12-05: p50 3.74 against 2.82 ms, CPU 2.45
    # against 1.90). A provider's own, shorter idle timeout costs nothing: a connection it
    # closed is not reused, and one it closes just as a request goes out is sent again
    # (providers/transport.py). LiteLLM's proxy keeps them 120 s too.
    provider_keepalive_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long a connection to a provider left idle is kept for the next call.",
    )
    invoke_first_byte_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="An attempt's longest wait for the response's status and headers.",
    )
    invoke_first_token_timeout_seconds: float = Field(
        default=30.0, gt=0, description="An attempt's longest wait for its first token."
    )
    invoke_stream_idle_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest silence between stream events once streaming (keep-alives count).",
    )
    invoke_attempt_timeout_seconds: float = Field(
        default=120.0, gt=0, description="One attempt's budget (the overall budget still caps it)."
    )
    invoke_timeout_overrides: dict[str, dict[str, float]] = Field(
        default={},
        description='"profile:ID" or "deployment:ID" -> '
        "{connect, first_byte, first_token, idle, attempt} seconds.",
    )
    invoke_retry_max_attempts: int = Field(
        default=3, ge=1, le=10, description="Attempts per deployment on transient failures."
    )
    invoke_retry_base_delay_seconds: float = Field(default=0.2, gt=0)
    invoke_retry_max_delay_seconds: float = Field(default=2.0, gt=0)
    invoke_retry_after_max_seconds: float = Field(
        default=5.0, ge=0, description="A longer Retry-After moves to the next candidate."
    )
    invoke_breaker_threshold: int = Field(
        default=3, ge=1, description="Consecutive transient failures that open a breaker."
    )
    invoke_breaker_cooldown_seconds: float = Field(
        default=5.0, gt=0, description="Open breaker's wait before one trial call."
    )
    invoke_breaker_recovery_seconds: float = Field(
        default=300.0,
        ge=0,
        description="How long a process trials a deployment it reported Degraded (0: never).",
    )
    invoke_unavailable_retry_after_max_seconds: int = Field(
        default=60, ge=1, le=3600, description="Longest Retry-After a 503 tells the caller."
    )
    invoke_start_wait_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="Longest wait for Temporal to accept an invocation's start; a restart "
        "shorter than this is absorbed. Past it the call is a 503 with Retry-After, and later "
        "calls are refused at once until Temporal answers again.",
    )
    invoke_store_wait_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="Longest wait for PostgreSQL on an invocation's own statements (the claim, "
        "the receipt's close, the catalog version) and for a connection to run them on. Past "
        "it the connection is dropped: an unclaimed call is a 503 with Retry-After, a close "
        "goes to the invocation's workflow, which retries it.",
    )
    invoke_start_overlap_seconds: float = Field(
        default=0.25,
        ge=0,
        le=60,
        description="How recently Temporal must have accepted a start for the next call's "
        "provider call to begin alongside its own start rather than after it; a call after a "
        "quieter spell begins once Temporal's health service (asked as the call arrives) "
        "answers, unless its start is in first or another start has waited longer than this "
        "(0: always after). A call inside this window after Temporal went away reaches its "
        "provider: one that ends before its start fails is answered and keeps its receipt, one "
        "still running is cancelled and refused.",
    )
    invoke_answers_ahead: int = Field(
        default=2,
        ge=0,
        le=64,
        description="How many answers an API process may send before Temporal has answered "
        "their workflows' starts (0: every answer waits for its start). Each answer's receipt "
        "is closed first; past this lead, answers wait for their starts again, so a burst "
        "never runs further ahead of Temporal than this.",
    )
    invoke_adapter_ttl_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long a deployment's provider client is reused before its credentials "
        "are resolved again; calls in flight keep the old client until they end.",
    )
    prompt_caching: bool = Field(
        default=True,
        description="PromptCaching: use provider prompt caching where the adapter supports it.",
    )
    secret_file_dirs: list[Path] = Field(
        default=[Path("/run/secrets")],
        description="Directories a file: endpointRef may name (a file anywhere else is refused).",
    )
    secret_env_names: list[str] = Field(
        default=["OPENAI_API_KEY", "ANTHROPIC_API_KEY"],
        description="Variables an env: endpointRef may name, besides secret_env_prefixes.",
    )
    secret_env_prefixes: list[str] = Field(
        default=["MODEL_ROUTER_PROVIDER_"],
        description="Prefixes of the variables an env: endpointRef may name. The gateway's own "
        "settings variables are refused whatever these say.",
    )
    secret_ref_tenants: dict[str, list[str]] = Field(
        default={},
        description="endpointRef -> the tenants that may name it; a reference not listed is "
        "shared, but a file: under an allowed directory's tenants/<tenant>/ is that tenant's.",
    )
    allow_upstream_endpoints: bool = Field(
        default=False,
        description="Accept endpointRef upstream:HOST:PORT (the local simulator): dev and tests.",
    )

    # Capability evaluation
    evaluation_context_token_cap: int = Field(
        default=16_000, ge=1024, description="Largest context reliable-context tests (cost cap)."
    )
    evaluation_concurrency: int = Field(default=4, ge=1, le=64, description="Cases run at once.")

    # Artifacts (outputs by content hash; never in the database)
    artifact_root: Path = Path(".data/artifacts")

    # Schedules: health probes and receipt reconciliation (created or updated at worker start)
    schedules_enabled: bool = Field(
        default=True, description="Create or update the schedules when a worker starts."
    )
    schedule_id_prefix: str = Field(default="model-router", min_length=1, max_length=100)
    health_probe_cron: str = Field(default="*/2 * * * *", description="UTC cron of the probe.")
    health_probe_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    health_probe_concurrency: int = Field(default=8, ge=1, le=256)
    health_probe_attempts: int = Field(
        default=2, ge=1, le=5, description="Probe attempts (fixed interval) before Degraded."
    )
    health_probe_retry_interval_seconds: float = Field(default=5.0, gt=0)
    health_probe_sample_retention_hours: int = Field(default=72, ge=1)
    reconciler_cron: str = Field(default="30 * * * *", description="UTC cron of the reconciler.")
    platform_tenants: list[str] = Field(  # any tenant has a PlatformAdmin; schedules serve all
        default=[], description="Tenants whose PlatformAdmin may run the schedules (console)."
    )
    receipt_sweeper_cron: str = Field(
        default="* * * * *", description="UTC cron of the receipt sweeper."
    )
    receipt_sweeper_grace_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A receipt still open this long past the invocation budget "
        "(default_timeout_seconds) is closed by the sweeper: Failed, usage Unknown.",
    )
    # A run's events (RoutePlanResolved, ModelInvoked, ModelFallbackUsed) past this many days
    # are deleted by the sweeper, but for those an active webhook subscription has not yet
    # delivered; 0 keeps them for ever (store/event_retention.py).
    run_event_retention_days: int = Field(default=30, ge=0)
    # Stored answers (ARTIFACT_ROOT) not written again for this many days are deleted by the
    # receipt sweeper; 0 keeps them for ever (activities/sweeper.py).
    artifact_retention_days: int = Field(default=30, ge=0)
    reconciler_lookback_hours: int = Field(default=72, ge=1, le=24 * 31)
    reconciler_settle_delay_minutes: int = Field(
        default=15, ge=0, description="A statement bucket is used this long after it ended."
    )
    reconciler_bucket_width: Literal["1m", "1h", "1d"] = "1h"
    reconciler_settle_zero_usage: bool = Field(
        default=False, description="Allow a statement to settle a receipt to zero tokens."
    )
    reconciler_retry_max_interval_seconds: float = Field(default=600.0, gt=0)
    statements_openai_admin_ref: str | None = Field(
        default=None, description="Secret reference of an OpenAI admin key (Usage API)."
    )
    statements_openai_key_refs: dict[str, str] = Field(
        default={}, description="OpenAI api_key_id -> the endpointRef that uses that key."
    )
    statements_anthropic_admin_ref: str | None = Field(
        default=None, description="Secret reference of an Anthropic admin key (usage report)."
    )
    statements_anthropic_key_refs: dict[str, str] = Field(
        default={}, description="Anthropic api_key_id -> the endpointRef that uses that key."
    )
    usage_statement_max_bytes: int = Field(default=5_000_000, ge=1024)

    # Observability and limits (issue 9). Content is never logged: log_content is a debugging
    # switch that only development or test environments may turn on.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = Field(default=True, description="One JSON object per log line.")
    log_content: bool = Field(
        default=False, description="LogContent: reserved; refused outside development/test."
    )
    metrics_enabled: bool = Field(default=True, description="Serve GET /metrics (Prometheus).")
    metrics_token: SecretStr | None = Field(
        default=None,
        description="Bearer token every GET /metrics (API and worker) requires; unset: open, "
        "for a port only the scraper reaches; the API warns of it outside development/test "
        "(core/settings_rules.py).",
    )
    # The worker's own GET /metrics: 0 turns it off (OTLP push still works without it).
    worker_metrics_host: str = "127.0.0.1"
    worker_metrics_port: int = Field(default=9464, ge=0, le=65535)
    otlp_metrics_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP metrics URL, e.g. http://collector:4318/v1/metrics."
    )
    otlp_export_interval_seconds: float = Field(default=60.0, gt=0)
    otlp_traces_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces."
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Largest request body.")
    # An invoke body holds a whole agent session, sent again each turn: 200k tokens of history
    # with its JSON is about 1 MiB, a million-token context about 5. A 413 mid-session is not
    # a context overflow to any client, so it ends the session. Each body in flight costs a few
    # times its size while it is parsed, hashed and sent on.
    max_invoke_body_bytes: int = Field(
        default=8 * 1_048_576, ge=1024, description="Largest body of an invoke surface."
    )
    max_json_depth: int = Field(default=64, ge=4, le=1000, description="Deepest JSON nesting.")
    rate_limit_enabled: bool = True
    rate_limit_per_second: float = Field(
        default=200.0, gt=0, description="Sustained requests per second per client (bucket)."
    )
    rate_limit_burst: int = Field(default=400, ge=1, description="Token bucket capacity.")

    @model_validator(mode="after")
    def _auth_is_configured(self) -> Settings:
        if self.auth_algorithm == "RS256" and not self.auth_jwks_url:
            raise ValueError("auth_jwks_url is required when auth_algorithm is RS256")
        return self

    @model_validator(mode="after")
    def _unsafe_switches_are_not_for_production(self) -> Settings:
        # The debugging switches, and a short HS256 key (core/settings_rules.py).
        refused = unsafe_settings(self)
        if refused is not None:
            raise ValueError(refused)
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
