"""The deployment artefacts (Dockerfile, compose file, Kubernetes manifests, worker probe) agree
with each other and with the code: same image, same commands, probes that hit real endpoints,
no secret in any file, and Kubernetes objects that validate against the API schema. The
commands their READMEs give an operator run where they say (namespace, compose files) and do
what they say (scopes, waits, the advice for a migration that gave up on a lock)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import ipaddress
import json
import os
import re
import sys
import tomllib
import typing
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from api.app import create_app
from cli.main import shutdown_grace
from core.settings import Settings
from core.worker_runs import poll_until_stopped
from domain.enums import Scope
from store.db import create_engine
from store.migrate import MigrationLockTimeout, _retrying
from tests.conftest import free_port
from tests.helpers.deadline import UNBOUNDED, eventually
from worker import (
    build_closer_worker,
    build_invocation_worker,
    build_webhook_delivery_worker,
    build_webhook_poll_worker,
    build_worker,
    evaluation_adapters,
)

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE_FILE = DEPLOY / "compose.yaml"
PROBE_SCRIPT = DEPLOY / "probes" / "worker_probe.py"

# What the image's ENTRYPOINT (model-router) may be asked to run.
PROCESS_COMMANDS = [["api"], ["worker"], ["db", "upgrade"]]
IMAGE_NAME = "model-router"
# Kubernetes versions the manifests must validate against: the oldest still commonly run and
# the newest the validator knows.
OLDEST_KUBERNETES = "1.29"

SETTING_ENV_NAMES = {f"MODEL_ROUTER_{name.upper()}" for name in Settings.model_fields}
# Settings that carry a secret may only come from a Secret or a secret file: every SecretStr
# setting, and the database URL, which holds the database password.
SECRET_SETTINGS = {
    f"MODEL_ROUTER_{name.upper()}"
    for name, field in Settings.model_fields.items()
    if SecretStr in typing.get_args(field.annotation) or field.annotation is SecretStr
} | {"MODEL_ROUTER_DATABASE_URL"}


# ---------------------------------------------------------------- loading


def dockerfile_instructions(path: Path = ROOT / "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, rest = full.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    return instructions[last_from:]


def dockerfile_args() -> dict[str, str]:
    values: dict[str, str] = {}
    for keyword, rest in dockerfile_instructions():
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            values.setdefault(name, value)
    return values


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                documents.append((path.name, doc))
    return documents


def k8s_objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in k8s_documents() if doc.get("kind") == kind]


def workloads() -> list[dict[str, Any]]:
    return k8s_objects("Deployment") + k8s_objects("Job")


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def deployment(component: str) -> dict[str, Any]:
    found = [
        d
        for d in k8s_objects("Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        == component
    ]
    assert len(found) == 1, f"expected one {component} Deployment, found {len(found)}"
    return found[0]


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def split_image(reference: str) -> tuple[str, str | None]:
    """'registry/path/name:tag' -> ('name', 'tag')."""
    name, tag = reference, None
    last = reference.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = reference.rsplit(":", 1)
    return name.rsplit("/", 1)[-1], tag


def interpolate_defaults(value: str) -> str:
    """Compose's ${VAR:-default} with the variable unset."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", value)


def model_router_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if split_image(interpolate_defaults(service.get("image", "")))[0] == IMAGE_NAME
    }


def one_shot_services(compose: dict[str, Any]) -> set[str]:
    """Services something waits on to finish: they run to completion instead of staying up."""
    finished = set()
    for service in compose["services"].values():
        for dependency, condition in (service.get("depends_on") or {}).items():
            if condition.get("condition") == "service_completed_successfully":
                finished.add(dependency)
    return finished


def dockerignore_excludes(relative: str) -> bool:
    """Docker's rule: the last matching pattern wins; a directory's pattern covers its files."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.lstrip("!").rstrip("/")
        if any(
            fnmatch.fnmatchcase(candidate, glob)
            or (glob.startswith("**/") and fnmatch.fnmatchcase(candidate, glob[3:]))
            for candidate in candidates
        ):
            excluded = not negated
    return excluded


# ---------------------------------------------------------------- Dockerfile


def test_dockerfile_is_multi_stage_on_slim_python_311() -> None:
    instructions = dockerfile_instructions()
    args = dockerfile_args()
    bases = []
    for keyword, rest in instructions:
        if keyword == "FROM":
            base = rest.split()[0]
            bases.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base))
    assert len(bases) >= 2, "build and runtime stages"
    for base in bases:
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", base), base


def test_dockerfile_installs_only_the_locked_runtime_dependencies() -> None:
    syncs = [rest for kw, rest in dockerfile_instructions() if kw == "RUN" and "uv sync" in rest]
    assert syncs, "dependencies are installed with uv sync"
    for command in syncs:
        assert "--frozen" in command, "the image must install exactly what uv.lock says"
        assert "--no-dev" in command, "test and lint tools stay out of the image"


def image_user() -> str:
    users = [rest for kw, rest in final_stage(dockerfile_instructions()) if kw == "USER"]
    assert users, "the runtime stage must switch away from root"
    return users[-1].split(":")[0]


def test_dockerfile_entrypoint_is_model_router_and_runs_as_non_root() -> None:
    runtime = final_stage(dockerfile_instructions())
    entrypoints = [json.loads(rest) for kw, rest in runtime if kw == "ENTRYPOINT"]
    commands = [json.loads(rest) for kw, rest in runtime if kw == "CMD"]

    assert entrypoints[-1:] == [["model-router"]]
    assert commands[-1] in PROCESS_COMMANDS
    uid = image_user()
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root uid (runAsNonRoot checks it)"


def test_kubernetes_runs_pods_as_the_image_user() -> None:
    image_uid = int(image_user())
    for workload in workloads():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == image_uid
        for container in containers(workload):
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_build_context_holds_what_the_build_needs_and_no_local_state() -> None:
    hatch = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]
    needed = ["pyproject.toml", "uv.lock", "README.md"]
    needed += hatch["build"]["targets"]["wheel"]["only-include"]
    needed += [str(PROBE_SCRIPT.relative_to(ROOT))]
    for path in needed:
        assert not dockerignore_excludes(path), f"{path} is needed by the image build"
    for path in [".env", ".venv/bin/python", ".data/model-router.db", ".git/config"]:
        assert dockerignore_excludes(path), f"{path} must never reach the build context"
    assert dockerignore_excludes("deploy/secrets/postgres_password")


def test_image_contains_the_worker_probe_the_manifests_run() -> None:
    copies = [rest.split() for kw, rest in final_stage(dockerfile_instructions()) if kw == "COPY"]
    probe_copies = [c for c in copies if c[0] == str(PROBE_SCRIPT.relative_to(ROOT))]
    assert probe_copies, "the runtime stage copies deploy/probes/worker_probe.py"
    in_image = probe_copies[0][-1]

    worker = containers(deployment("worker"))[0]
    for probe in ("livenessProbe", "readinessProbe"):
        assert in_image in worker[probe]["exec"]["command"]
    compose_worker = load_compose()["services"]["worker"]
    assert in_image in compose_worker["healthcheck"]["test"]


# ---------------------------------------------------------------- compose


def test_compose_long_running_services_have_health_checks() -> None:
    compose = load_compose()
    one_shots = one_shot_services(compose)
    long_running = set(compose["services"]) - one_shots
    assert {"postgres", "temporal", "temporal-ui", "api", "worker"} <= long_running
    for name in sorted(long_running):
        check = compose["services"][name].get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
    for name in one_shots:
        assert compose["services"][name].get("restart") in ("no", "on-failure"), name


def test_compose_temporal_runs_on_the_compose_postgres_with_its_ui() -> None:
    services = load_compose()["services"]
    temporal = services["temporal"]
    assert temporal["image"].startswith("temporalio/")
    assert temporal["environment"]["DB"].startswith("postgres")
    assert temporal["environment"]["POSTGRES_SEEDS"] == "postgres"
    assert "postgres" in services
    # Temporal starts only on a prepared schema, and the UI points at it.
    assert temporal["depends_on"]["temporal-schema"]["condition"] == (
        "service_completed_successfully"
    )
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_compose_runs_the_dockerfile_image_with_its_commands() -> None:
    compose = load_compose()
    ours = model_router_services(compose)
    assert set(ours) == {"migrate", "api", "worker"}
    for name, service in ours.items():
        assert service["command"] in PROCESS_COMMANDS, name
        build = service["build"]
        assert (COMPOSE_FILE.parent / build["context"] / build["dockerfile"]).resolve() == (
            ROOT / "Dockerfile"
        )
        # The wrapper that loads secret files must end in the image's own entrypoint.
        entrypoint = service["entrypoint"]
        assert entrypoint[-1] == "model-router"
        assert 'exec model-router "$$@"' in entrypoint[2]

    assert ours["migrate"]["command"] == ["db", "upgrade"]
    assert ours["api"]["command"] == ["api"] and ours["worker"]["command"] == ["worker"]
    for name in ("api", "worker"):
        assert ours[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )


def test_a_stopping_api_has_time_for_its_calls_in_flight() -> None:
    # A stream still going when the platform's SIGKILL comes is cut with no final event: the
    # API is given one invocation's budget and its own stop, on both platforms.
    # The invocation budget as each platform configures it (the default where it sets none).
    def grace(configured: dict[str, Any]) -> float:
        budget = configured.get("MODEL_ROUTER_DEFAULT_TIMEOUT_SECONDS")
        return shutdown_grace(Settings(default_timeout_seconds=budget or 120.0))

    assert shutdown_grace(Settings()) > Settings().default_timeout_seconds
    data = next(c["data"] for c in k8s_objects("ConfigMap") if "data" in c)
    [api] = [d for d in k8s_objects("Deployment") if d["metadata"]["name"].endswith("api")]
    pod = api["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 5 + grace(data) + 10  # preStop, calls, stop
    service = load_compose()["services"]["api"]
    stop = int(service["stop_grace_period"].removesuffix("s"))
    assert stop >= grace(service["environment"]) + 10


def test_compose_api_health_check_asks_the_api() -> None:
    check = " ".join(load_compose()["services"]["api"]["healthcheck"]["test"])
    assert re.search(r"http://127\.0\.0\.1:8000/(readyz|healthz)", check)


def test_compose_configures_only_real_settings_and_keeps_state_in_named_volumes() -> None:
    compose = load_compose()
    for name, service in model_router_services(compose).items():
        configured = {k for k in service["environment"] if k.startswith("MODEL_ROUTER_")}
        assert configured <= SETTING_ENV_NAMES, f"{name}: {configured - SETTING_ENV_NAMES}"
        assert not configured & SECRET_SETTINGS, f"{name}: secrets come from secret files"
    declared = set(compose["volumes"])
    for name, service in compose["services"].items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name}: volume {source} is not declared"
    assert any(m.startswith("postgres-data:") for m in compose["services"]["postgres"]["volumes"])


def test_compose_postgres_takes_the_connections_the_stack_opens() -> None:
    """Each API process's pools open up to 8 x the pool size, the worker's 2 x, and Temporal's
    services their own on the same server: PostgreSQL's default 100 was less."""
    command = load_compose()["services"]["postgres"]["command"]
    limit = int(next(a for a in command if a.startswith("max_connections=")).split("=")[1])
    pool = Settings.model_fields["database_pool_size"].default
    assert limit >= 8 * pool + 2 * pool + 100  # Temporal's share at most 100


def test_compose_api_believes_forwarded_headers_from_its_networks_gateway_only() -> None:
    """A proxy on the host reaches the published port through Docker's proxy: the API's peer is
    the network's gateway, not 127.0.0.1 (the setting's default), so its X-Forwarded-* were
    ignored (the console cookie lost Secure, every anonymous caller shared one rate bucket)."""
    compose = load_compose()
    [network] = compose["networks"]["default"]["ipam"]["config"]
    gateway = interpolate_defaults(network["gateway"])
    assert ipaddress.ip_address(gateway) in ipaddress.ip_network(
        interpolate_defaults(network["subnet"])
    )
    api = compose["services"]["api"]["environment"]
    assert interpolate_defaults(api["MODEL_ROUTER_FORWARDED_ALLOW_IPS"]) == gateway
    # The rest of the shared environment is still the API's.
    assert api["MODEL_ROUTER_ENVIRONMENT"] == "production"


def test_compose_secrets_are_files_kept_out_of_git() -> None:
    compose = load_compose()
    assert compose["secrets"], "secrets come from files"
    for name, secret in compose["secrets"].items():
        path = (COMPOSE_FILE.parent / secret["file"]).resolve()
        assert path.parent == DEPLOY / "secrets", name
    ignored = (DEPLOY / "secrets" / ".gitignore").read_text().split()
    assert "*" in ignored


# ---------------------------------------------------------------- Kubernetes


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_api_probes_hit_healthz_and_readyz() -> None:
    api = containers(deployment("api"))[0]
    ports = {p["name"]: p["containerPort"] for p in api["ports"]}
    assert ports == {"http": 8000}, "the port the image's MODEL_ROUTER_API_PORT sets"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["startupProbe"]["httpGet"]["path"] == "/healthz"
    # The pod's own fitness: a shared dependency's outage must not empty the Service.
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz/process"
    # Each a GET the API serves: a path it does not (a typo, a route renamed) is a 404 the
    # kubelet takes for a dead pod, restarted over and over or never ready.
    paths = create_app(Settings(auth_jwt_secret="s" * 32)).openapi()["paths"]
    served = {path for path, operations in paths.items() if "get" in operations}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert api[probe]["httpGet"]["path"] in served, probe
        assert api[probe]["httpGet"]["port"] in (8000, "http")


def test_every_deployment_container_has_liveness_and_readiness() -> None:
    deployments = k8s_objects("Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {
        "model-router-api",
        "model-router-worker",
    }
    for d in deployments:
        for container in containers(d):
            assert "livenessProbe" in container and "readinessProbe" in container, (
                f"{d['metadata']['name']}/{container['name']}"
            )


def test_worker_probes_run_the_probe_script() -> None:
    worker = containers(deployment("worker"))[0]
    assert worker["readinessProbe"]["exec"]["command"][-1] == "ready"
    assert worker["livenessProbe"]["exec"]["command"][-1] == "live"
    # Its one port serves metrics: health is whether Temporal sees it poll, not HTTP.
    assert [p["name"] for p in worker.get("ports", [])] == ["metrics"]


def test_a_worker_process_that_exits_is_started_again_on_both_platforms() -> None:
    """A worker whose run ends stops the process with exit 1
    (core/worker_runs.poll_until_stopped): the platform's restart is what brings its queue's
    poller back."""
    assert load_compose()["services"]["worker"]["restart"] in ("always", "unless-stopped")
    pod = deployment("worker")["spec"]["template"]["spec"]
    assert pod.get("restartPolicy", "Always") == "Always"


def test_every_container_has_resource_requests_and_limits() -> None:
    for workload in workloads():
        for container in containers(workload):
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[bound]), (
                    f"{workload['metadata']['name']}/{container['name']} {bound}"
                )


def test_each_deployment_has_a_disruption_budget() -> None:
    budgets = k8s_objects("PodDisruptionBudget")
    for d in k8s_objects("Deployment"):
        labels = d["spec"]["template"]["metadata"]["labels"]
        covering = [
            b
            for b in budgets
            if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
            and ("maxUnavailable" in b["spec"] or "minAvailable" in b["spec"])
        ]
        assert covering, f"no PodDisruptionBudget selects {d['metadata']['name']}"


def test_api_service_reaches_api_pods() -> None:
    (service,) = k8s_objects("Service")
    api = deployment("api")
    assert service["spec"]["selector"].items() <= (
        api["spec"]["template"]["metadata"]["labels"].items()
    )
    port_names = {p["name"] for p in containers(api)[0]["ports"]}
    assert all(p["targetPort"] in port_names | {8000} for p in service["spec"]["ports"])


def test_migration_job_runs_db_upgrade() -> None:
    (job,) = k8s_objects("Job")
    (container,) = containers(job)
    assert container["args"] == ["db", "upgrade"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")


def test_manifests_run_one_image_with_the_entrypoint_and_known_commands() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    images = set()
    for workload in workloads():
        for container in containers(workload):
            assert "command" not in container, "keep the image's ENTRYPOINT (model-router)"
            assert container["args"] in PROCESS_COMMANDS
            images.add(container["image"])
    assert len(images) == 1, images
    name, tag = split_image(images.pop())
    assert name == IMAGE_NAME
    assert tag == project_version(), "tag the image with the project version being deployed"
    assert [i["name"] for i in kustomization["images"]] == [IMAGE_NAME]
    assert kustomization["images"][0]["newTag"] == project_version()


def unknown_variables(manifests: list[dict[str, Any]], wrappers: list[str]) -> set[str]:
    """The variables the manifests' containers set (`env[].name`) and the compose wrappers
    export that no setting reads: the settings ignore a name they do not know, so a misspelt
    one (MODEL_ROUTER_METRIC_TOKEN) left its setting at its default without a word."""
    names = {env["name"] for w in manifests for c in containers(w) for env in c.get("env", [])}
    for script in wrappers:
        names |= set(re.findall(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)", script, re.M))
    return names - SETTING_ENV_NAMES


def test_every_variable_the_manifests_and_the_compose_wrapper_set_is_a_setting() -> None:
    wrappers = [s["entrypoint"][2] for s in model_router_services(load_compose()).values()]
    assert all("export MODEL_ROUTER_DATABASE_URL" in w for w in wrappers)
    assert unknown_variables(workloads(), wrappers) == set()
    # A misspelt name is caught.
    typo = deployment("worker")
    containers(typo)[0]["env"].append({"name": "MODEL_ROUTER_METRIC_TOKEN", "value": "$(X)"})
    assert unknown_variables([typo], ["export MODEL_ROUTER_AUTH_JWT_SECRETS"]) == {
        "MODEL_ROUTER_METRIC_TOKEN",
        "MODEL_ROUTER_AUTH_JWT_SECRETS",
    }


def test_config_comes_from_the_configmap_and_secrets_from_secrets_by_name() -> None:
    (config,) = k8s_objects("ConfigMap")
    keys = set(config["data"])
    assert keys <= SETTING_ENV_NAMES, f"not settings: {keys - SETTING_ENV_NAMES}"
    assert not keys & SECRET_SETTINGS
    assert not k8s_objects("Secret"), "Secrets are referenced by name, never committed"

    readme = (K8S / "README.md").read_text()
    for workload in workloads():
        for container in containers(workload):
            assert {"configMapRef": {"name": config["metadata"]["name"]}} in container["envFrom"]
            for env in container.get("env", []):
                if env["name"] in SECRET_SETTINGS:
                    ref = env["valueFrom"]["secretKeyRef"]
                    assert f"`{ref['name']}`" in readme, f"{ref['name']} is not documented"
                    assert f"`{ref['key']}`" in readme
    api_env = {e["name"] for e in containers(deployment("api"))[0]["env"]}
    assert {"MODEL_ROUTER_DATABASE_URL", "MODEL_ROUTER_AUTH_JWT_SECRET"} <= api_env


# ---------------------------------------------------------------- no secret literals

SECRETISH_KEY = re.compile(
    r"password|passwd|pwd|secret|token|api[_-]?key|private[_-]?key|credential", re.I
)
# Keys that name where a secret is, not what it is (secretName, secretKeyRef, *_FILE, ...).
LOCATOR_KEY = re.compile(r"(name|ref|file|path|dir|key_?ref)$", re.I)
URL_WITH_PASSWORD = re.compile(r"://[^/\s:@]+:([^@\s]+)@")
KNOWN_TOKEN_SHAPES = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\bsk-[A-Za-z0-9_-]{16,}")


def is_reference(value: object) -> bool:
    """Interpolation (${VAR}), command substitution, or a path to a mounted secret file."""
    if value is None:
        return True
    text = str(value).strip().strip("\"'")
    return text == "" or text.startswith(("$", "/run/secrets/", "/etc/model-router/"))


def secret_literals(node: object, where: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and "value" in node:
            if SECRETISH_KEY.search(node["name"]) and not is_reference(node["value"]):
                yield f"{where}.{node['name']}"
        for key, value in node.items():
            key_text = str(key)
            if (
                SECRETISH_KEY.search(key_text)
                and not LOCATOR_KEY.search(key_text)
                and not isinstance(value, dict | list | bool)
                and not is_reference(value)
            ):
                yield f"{where}.{key_text}"
            yield from secret_literals(value, f"{where}.{key_text}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from secret_literals(item, f"{where}[{index}]")
    elif isinstance(node, str):
        # KEY=VALUE items and shell assignments inside scripts.
        for line in node.splitlines():
            key, sep, value = line.strip().removeprefix("export ").partition("=")
            if sep and SECRETISH_KEY.search(key) and " " not in key and not is_reference(value):
                yield f"{where}: {key}=…"
        for match in URL_WITH_PASSWORD.finditer(node):
            if not match.group(1).startswith("$"):
                yield f"{where}: URL with a literal password"
        if KNOWN_TOKEN_SHAPES.search(node):
            yield f"{where}: key material"


def test_the_secret_scanner_catches_literals() -> None:
    leaky = yaml.safe_load(
        """
        services:
          db:
            environment:
              POSTGRES_PASSWORD: hunter2
              DATABASE_URL: postgresql://app:hunter2@db/app
            command: ["API_KEY=abc123"]
        containers:
          - env:
              - name: MODEL_ROUTER_AUTH_JWT_SECRET
                value: not-a-reference
        """
    )
    safe = yaml.safe_load(
        """
        environment:
          POSTGRES_PASSWORD_FILE: /run/secrets/postgres_password
          POSTGRES_PWD: ${POSTGRES_PWD:?set it}
          OPENAI_API_KEY:
        env:
          - name: MODEL_ROUTER_AUTH_JWT_SECRET
            valueFrom: {secretKeyRef: {name: model-router-secrets, key: auth-jwt-secret}}
        volumes: [{secret: {secretName: model-router-temporal}}]
        """
    )
    assert len(list(secret_literals(leaky))) == 4
    assert list(secret_literals(safe)) == []


def test_no_secret_literal_in_any_deployment_file() -> None:
    findings = [f"compose{f}" for f in secret_literals(load_compose())]
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            findings += [f"{path.name}{f}" for f in secret_literals(doc)]
    for keyword, rest in dockerfile_instructions():
        if keyword in ("ENV", "ARG"):
            findings += [f"Dockerfile {keyword}{f}" for f in secret_literals(rest.split())]
    findings += [
        f"{path.name}: key material"
        for path in [*DEPLOY.rglob("*"), ROOT / "Dockerfile"]
        # deploy/secrets/ is where an operator's real secret files live, untracked.
        if path.is_file()
        and DEPLOY / "secrets" not in path.parents
        and KNOWN_TOKEN_SHAPES.search(path.read_text(errors="replace"))
    ]
    assert findings == []


# ---------------------------------------------------------------- schema validation


@pytest.mark.parametrize("kubernetes_version", [OLDEST_KUBERNETES, "latest"])
def test_manifests_validate_against_the_kubernetes_schema(kubernetes_version: str) -> None:
    validator = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate (a dev dependency) is not installed: run `uv sync`",
    )
    version = validator.latest_version() if kubernetes_version == "latest" else kubernetes_version
    checked = 0
    for name, doc in k8s_documents():
        if doc["kind"] == "Kustomization":
            continue
        try:
            validator.validate(doc, version, strict=True)
        except validator.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{name}: {doc['kind']} invalid for Kubernetes {version} at {path}: {exc}")
        checked += 1
    assert checked == len(k8s_documents()) - 1


def test_schema_validation_rejects_a_broken_manifest() -> None:
    validator = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate (a dev dependency) is not installed: run `uv sync`",
    )
    broken = deployment("api")
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = "/"
    with pytest.raises(validator.ValidationError):
        validator.validate(broken, OLDEST_KUBERNETES, strict=True)


# ---------------------------------------------------------------- the worker probe, for real


@activity.defn(name="probe_test_noop")
async def _noop_activity() -> None:
    return None


@workflow.defn(name="ProbeTestNoop", sandboxed=False)
class _NoopWorkflow:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            _noop_activity, start_to_close_timeout=timedelta(seconds=30)
        )


def _temporal_address() -> str:
    address = os.environ.get("MODEL_ROUTER_TEST_TEMPORAL_ADDRESS")
    if not address:
        pytest.fail(
            "MODEL_ROUTER_TEST_TEMPORAL_ADDRESS is not set: run the suite with `make test`, "
            "which starts a Temporal dev server for it",
            pytrace=False,
        )
    return address


async def _run_probe(mode: str, address: str, task_queue: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")}
    env |= {
        "MODEL_ROUTER_TEMPORAL_ADDRESS": address,
        "MODEL_ROUTER_TEMPORAL_TASK_QUEUE": task_queue,
        "MODEL_ROUTER_TEMPORAL_CONNECT_TIMEOUT_SECONDS": "3",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PROBE_SCRIPT),
        mode,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_worker_probe_follows_this_hosts_pollers() -> None:
    address = _temporal_address()
    client = await Client.connect(address)
    polled = f"probe-test-{uuid.uuid4().hex[:8]}"
    idle = f"probe-test-idle-{uuid.uuid4().hex[:8]}"
    unreachable = f"127.0.0.1:{free_port()}"

    async with Worker(
        client, task_queue=polled, workflows=[_NoopWorkflow], activities=[_noop_activity]
    ):
        # A workflow that ran an activity here proves both queues were polled from this host.
        await client.execute_workflow(
            _NoopWorkflow.run, id=f"probe-test-{uuid.uuid4().hex}", task_queue=polled
        )
        # Each probe is a Python start-up (~2 s of CPU): run the four cases that matter at once.
        ready, idle_ready, idle_live, outage_live = await asyncio.gather(
            _run_probe("ready", address, polled),
            _run_probe("ready", address, idle),
            _run_probe("live", address, idle),
            _run_probe("live", unreachable, polled),
        )

    assert ready[0] == 0, ready
    assert "polls" in ready[1]
    # Temporal answers and nobody here polls: not ready, and not alive either.
    assert idle_ready[0] == 1 and idle_live[0] == 1, (idle_ready, idle_live)
    assert "no poller" in idle_live[1]
    # Temporal down: no restart, since restarting the worker cannot fix Temporal.
    assert outage_live[0] == 0, outage_live
    assert "unreachable" in outage_live[1]


def test_the_worker_metrics_port_is_served_and_scraped_everywhere() -> None:
    """The image, the ConfigMap, the worker pod (port + scrape annotations) and the compose
    Prometheus all name the same worker metrics port, and the API is scraped too."""
    env = dict(
        pair.split("=", 1)
        for keyword, rest in final_stage(dockerfile_instructions())
        if keyword == "ENV"
        for pair in rest.split()
        if "=" in pair
    )
    port = env["MODEL_ROUTER_WORKER_METRICS_PORT"]
    assert env["MODEL_ROUTER_WORKER_METRICS_HOST"] == "0.0.0.0"
    assert Settings.model_fields["worker_metrics_port"].default == int(port)
    [config] = k8s_objects("ConfigMap")
    assert config["data"]["MODEL_ROUTER_WORKER_METRICS_PORT"] == port
    for component, scraped in (("worker", port), ("api", "8000")):
        pod = deployment(component)["spec"]["template"]
        annotations = pod["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == (
            scraped,
            "/metrics",
        )
        ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert int(scraped) in ports
    compose = load_compose()
    prometheus = compose["services"]["prometheus"]
    mounted = next(m for m in prometheus["volumes"] if m.endswith("prometheus.yml:ro"))
    scrape = yaml.safe_load((COMPOSE_FILE.parent / mounted.split(":")[0]).read_text())
    targets = {
        t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    assert targets == {"api:8000", f"worker:{port}"}


async def test_worker_probe_passes_on_the_workers_worker_py_builds(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The probe against the worker process's own workers (worker.py's builders, run as `run`
    runs them), not a stand-in: it asks about the queue and the queue types the main worker
    polls. The process's other four queues are not the probe's: a worker that stops on any of
    them stops the process (tests/test_worker.py)."""
    address = _temporal_address()
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"probe-real-{run}",
            "temporal_invocation_task_queue": f"probe-real-inv-{run}",
        }
    )
    adapters = evaluation_adapters(own)
    main = build_worker(temporal_client, own, sessions, adapters=adapters)
    others = [
        build(temporal_client, own, sessions)
        for build in (
            build_invocation_worker,
            build_closer_worker,
            build_webhook_poll_worker,
            build_webhook_delivery_worker,
        )
    ]
    # The queue the probe reads is the main worker's, which runs both workflows and activities.
    assert main.task_queue == own.temporal_task_queue
    assert main.config()["workflows"] and main.config()["activities"]
    assert own.temporal_task_queue not in {w.task_queue for w in others}
    stop = asyncio.Event()
    polling = asyncio.create_task(poll_until_stopped([main, *others], stop))
    try:

        async def passes(mode: str) -> bool:
            code, _ = await _run_probe(mode, address, own.temporal_task_queue)
            return code == 0

        await eventually(lambda: passes("ready"), timeout=UNBOUNDED, interval=0.5)
        assert await passes("live")
    finally:
        stop.set()
        await asyncio.wait_for(polling, UNBOUNDED)
        await adapters.aclose()


# ---------------------------------------------------------------- the READMEs' commands


def shell_commands(markdown: str) -> list[str]:
    """The commands of a README: its fenced blocks' lines (continuations joined, comments
    dropped) and its inline code spans."""
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", markdown, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [
            line.strip()
            for line in joined.splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    commands += re.findall(r"`([^`\n]+)`", prose)
    return commands


# The kubectl verbs that act in a namespace: without `-n` they act in the context's own (most
# often `default`), where the Deployments look for none of it.
NAMESPACED_VERBS = {"apply", "create", "delete", "exec", "get", "logs", "rollout", "scale", "wait"}


def without_namespace(commands: list[str]) -> list[str]:
    found = []
    for command in commands:
        for call in re.findall(r"\bkubectl\b[^|;&]*", command):
            words = call.split()[1:]
            flags = {w.split("=")[0] for w in words if w.startswith("-")}
            verbs = [w for w in words if not w.startswith("-") and w != "model-router"]
            if not verbs or verbs[0] not in NAMESPACED_VERBS:
                continue  # a mention of kubectl, not a command
            if verbs[:2] == ["create", "namespace"]:
                continue
            if not flags & {"-n", "--namespace"}:
                found.append(call.strip())
    return found


def test_every_kubectl_command_of_the_kubernetes_readme_names_the_namespace() -> None:
    readme = (K8S / "README.md").read_text()
    assert len([c for c in shell_commands(readme) if "kubectl" in c]) > 10
    assert without_namespace(shell_commands(readme)) == []
    assert without_namespace(
        [
            "kubectl create secret generic model-router-temporal --from-literal=api-key=k",
            "kubectl create namespace model-router",
            "kubectl -n model-router wait --for=condition=complete job/model-router-migrate",
        ]
    ) == ["kubectl create secret generic model-router-temporal --from-literal=api-key=k"]


def test_the_upgrade_waits_for_the_migrate_job_to_complete_or_to_fail() -> None:
    """`kubectl wait --for=condition=complete` takes one condition: on a Job that failed it sat
    out its whole timeout (15 min) before the operator learned of it."""
    readme = (K8S / "README.md").read_text()
    [sequence] = [
        b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "model-router-migrate" in b
    ]
    commands = shell_commands(f"```sh\n{sequence}```")
    waits = [c for c in commands if re.search(r"kubectl .*\bwait\b", c)]
    assert waits
    for wait in waits:
        # Either it asks once, after the Job ended, or it ends on the failure too.
        assert "--timeout=0" in wait or "condition=failed" in wait, wait
    [loop] = [c for c in commands if "job/model-router-migrate" in c and "jsonpath" in c]
    assert "Complete" in loop and "Failed" in loop


def test_the_example_clients_can_read_runs_receipts() -> None:
    """`model-router receipts list` (and the console's receipts) read GET
    /factory/runs/{id}/model-receipts, which takes factory.runs.read (api/routers/receipts.py):
    the examples' first clients were refused there."""
    for readme in (DEPLOY / "README.md", K8S / "README.md"):
        creates = [c for c in shell_commands(readme.read_text()) if "clients create" in c]
        assert creates, readme
        for command in creates:
            assert Scope.RUNS_READ.value in re.findall(r"--scope\s+(\S+)", command), command


def test_the_compose_override_is_named_in_the_commands_that_need_it() -> None:
    """Compose reads compose.override.yaml by itself only when no `-f` is given, and every
    command of the README gives one: the override's secrets were never mounted."""
    readme = (DEPLOY / "README.md").read_text()
    assert "compose.override.yaml" in readme
    assert "-f deploy/compose.yaml -f deploy/compose.override.yaml" in readme
    assert "COMPOSE_FILE=deploy/compose.yaml:deploy/compose.override.yaml" in readme


async def test_the_advice_of_a_migration_given_up_on_a_lock_ends_an_idle_transaction(
    settings: Settings,
) -> None:
    """A migration that gave up on a table lock (exit 3) says how to end the transaction that
    holds it, and so do the runbook and the Kubernetes README. The holder is most often a
    session idle in transaction, which pg_cancel_backend (what they named) leaves holding
    the lock; followed, the advice now frees the table."""
    table = f"advice_{uuid.uuid4().hex[:8]}"
    engine = create_engine(settings.database_url)
    async with engine.begin() as conn:
        await conn.execute(text(f"CREATE TABLE {table} (id int)"))
    holder = await engine.connect()
    try:
        await holder.execute(text(f"LOCK TABLE {table} IN ACCESS SHARE MODE"))
        pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()

        def alter() -> None:
            async def once() -> None:
                own = create_engine(settings.database_url)
                try:
                    async with own.begin() as conn:
                        await conn.execute(text("SET LOCAL lock_timeout = '200ms'"))
                        await conn.execute(text(f"ALTER TABLE {table} ADD COLUMN n int"))
                finally:
                    await own.dispose()

            asyncio.run(once())

        async def migrated() -> bool:
            try:
                await asyncio.to_thread(_retrying, alter, "head", "db upgrade", 0.2, 1)
            except MigrationLockTimeout:
                return False
            return True

        with pytest.raises(MigrationLockTimeout) as given_up:
            await asyncio.to_thread(_retrying, alter, "head", "db upgrade", 0.2, 1)
        advice = re.findall(r"pg_\w+_backend", str(given_up.value))[0]
        async with engine.connect() as admin:
            await admin.execute(text(f"SELECT {advice}(:pid)"), {"pid": pid})
        await eventually(migrated, timeout=10, interval=0.2)
    finally:
        with contextlib.suppress(Exception):  # its server session is gone when followed
            await holder.close()
        async with engine.begin() as conn:
            await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        await engine.dispose()
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    section = runbook.split("## A migration waits for a table lock")[1].split("\n## ")[0]
    assert re.findall(r"SELECT (pg_\w+_backend)\(", section) == [advice]
    k8s_readme = (K8S / "README.md").read_text()
    assert re.findall(r"end it \(`(pg_\w+_backend)`", k8s_readme) == [advice]
