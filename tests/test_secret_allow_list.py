"""endpointRefs may name only allowed secrets: `file:` under the configured directories, `env:`
variables with a configured name or prefix, never the gateway's own settings. A registration
naming anything else is a 422 naming endpointRef; an entry already in the catalog that names one
is refused when a broker would resolve it, so the signing key never reaches a provider."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from activities.secret_policy import endpoint_broker, secret_policy
from core.settings import Settings
from providers.secrets import SecretResolutionError
from tests.conftest import TokenFactory
from tests.helpers.catalog import deployment_body

REFUSED = [
    "file:/etc/shadow",
    "file:/proc/self/environ",
    "file:/run/secrets/../../etc/passwd",
    "env:MODEL_ROUTER_AUTH_JWT_SECRET",
    "env:MODEL_ROUTER_DATABASE_URL",
    # Under the provider prefix, but a settings variable all the same.
    "env:MODEL_ROUTER_PROVIDER_CONNECT_TIMEOUT_SECONDS",
    "env:PGPASSWORD",
    "env:HOME",
]


@pytest.mark.parametrize("ref", REFUSED)
async def test_a_registration_naming_a_secret_outside_the_allow_list_is_a_422(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str, ref: str
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    dep = f"secret/{uuid.uuid4().hex[:6]}"
    resp = await http.post(
        "/factory/model-deployments",
        json=deployment_body(dep, endpointRef=ref),
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert [e["field"] for e in resp.json()["errors"]] == ["body.endpointRef"]
    # Nothing was registered.
    assert (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).status_code == 404


@pytest.mark.parametrize(
    "ref", ["env:OPENAI_API_KEY", "env:MODEL_ROUTER_PROVIDER_OPENAI_EU", "file:/run/secrets/openai"]
)
async def test_allowed_references_register(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str, ref: str
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    resp = await http.post(
        "/factory/model-deployments",
        json=deployment_body(f"secret/{uuid.uuid4().hex[:6]}", endpointRef=ref),
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert resp.status_code == 201, resp.text


async def test_the_broker_refuses_what_the_allow_list_refuses_even_for_old_entries(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment registered before the allow-list existed is refused at resolution; what the
    configured lists allow resolves."""
    allowed = tmp_path / "secrets"
    allowed.mkdir()
    (allowed / "openai").write_text("sk-allowed-0123456789")
    (tmp_path / "elsewhere").write_text("sk-elsewhere-0123456789")
    monkeypatch.setenv("MODEL_ROUTER_PROVIDER_EU", "sk-provider-0123456789")
    monkeypatch.setenv("SOMETHING_ELSE", "sk-other-0123456789")
    configured = settings.model_copy(update={"secret_file_dirs": [allowed]})
    broker = endpoint_broker(configured)
    assert (await broker.resolve(f"file:{allowed / 'openai'}")).api_key.get_secret_value()
    assert (await broker.resolve("env:MODEL_ROUTER_PROVIDER_EU")).api_key.get_secret_value()
    secret = configured.auth_jwt_secret
    assert secret is not None
    monkeypatch.setenv("MODEL_ROUTER_AUTH_JWT_SECRET", secret.get_secret_value())
    for ref in (
        f"file:{tmp_path / 'elsewhere'}",
        f"file:{allowed}/../elsewhere",
        "env:SOMETHING_ELSE",
        "env:MODEL_ROUTER_AUTH_JWT_SECRET",
    ):
        with pytest.raises(SecretResolutionError) as caught:
            await broker.resolve(ref)
        assert secret.get_secret_value() not in str(caught.value)
    assert secret_policy(configured).refusal(f"file:{allowed / 'openai'}") is None


async def test_a_file_or_variable_holding_the_gateways_own_secret_is_no_provider_credential(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compose mounts the database password and the signing key under /run/secrets, the
    default file directory: `file:/run/secrets/jwt_secret` resolved, and the signing key went
    to a provider as its API key. Whatever holds one of this process's own secrets is refused,
    whatever its name; a provider's key beside them resolves."""
    allowed = tmp_path / "secrets"
    allowed.mkdir()
    signing, password = "signing-key-0123456789abcdef", "db-password-0123456789"
    (allowed / "jwt_secret").write_text(signing + "\n")
    (allowed / "postgres_password").write_text(password)
    (allowed / "openai").write_text("sk-provider-0123456789")
    monkeypatch.setenv("MODEL_ROUTER_PROVIDER_COPY", signing)
    configured = settings.model_copy(
        update={
            "secret_file_dirs": [allowed],
            "auth_jwt_secret": SecretStr(signing),
            "database_url": f"postgresql+asyncpg://router:{password}@db:5432/router",
        }
    )
    broker = endpoint_broker(configured)
    for ref in (
        f"file:{allowed / 'jwt_secret'}",
        f"file:{allowed / 'postgres_password'}",
        "env:MODEL_ROUTER_PROVIDER_COPY",
    ):
        with pytest.raises(SecretResolutionError, match="gateway's own secret") as refused:
            await broker.resolve(ref)
        assert signing not in str(refused.value) and password not in str(refused.value)
    assert (await broker.resolve(f"file:{allowed / 'openai'}")).api_key.get_secret_value()


async def test_the_usage_statements_admin_keys_are_no_provider_credential(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The organization admin keys the reconciler reads statements with are references, not
    settings secrets: kept under /run/secrets or the provider prefix (where the manifests can
    put them), any operator could name one as a deployment's credential."""
    allowed = tmp_path / "secrets"
    allowed.mkdir()
    openai_admin, anthropic_admin = "sk-admin-openai-0123456789", "sk-ant-admin-0123456789"
    (allowed / "openai_admin").write_text(f'{{"api_key": "{openai_admin}"}}')
    monkeypatch.setenv("MODEL_ROUTER_PROVIDER_ANTHROPIC_ADMIN", anthropic_admin)
    monkeypatch.setenv("MODEL_ROUTER_PROVIDER_COPY", openai_admin)
    configured = settings.model_copy(
        update={
            "secret_file_dirs": [allowed],
            "statements_openai_admin_ref": f"file:{allowed / 'openai_admin'}",
            "statements_anthropic_admin_ref": "env:MODEL_ROUTER_PROVIDER_ANTHROPIC_ADMIN",
        }
    )
    broker = endpoint_broker(configured)
    for ref in (
        f"file:{allowed / 'openai_admin'}",
        "env:MODEL_ROUTER_PROVIDER_ANTHROPIC_ADMIN",
        "env:MODEL_ROUTER_PROVIDER_COPY",
    ):
        with pytest.raises(SecretResolutionError, match="gateway's own secret"):
            await broker.resolve(ref)


async def test_a_tenants_own_secrets_are_named_by_it_alone(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str, settings: Settings
) -> None:
    """The allow-lists were the platform's: any tenant's operator could register another
    tenant's key (or private endpoint) and spend it. A file under `tenants/<tenant>/` of an
    allowed directory is that tenant's; `secret_ref_tenants` keeps any reference for some."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    base = settings.secret_file_dirs[0]

    async def register_with(ref: str) -> httpx.Response:
        return await http.post(
            "/factory/model-deployments",
            json=deployment_body(f"secret/{uuid.uuid4().hex[:6]}", endpointRef=ref),
            headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
        )

    others = await register_with(f"file:{base}/tenants/tenant-other/openai")
    assert others.status_code == 422, others.text
    assert [e["field"] for e in others.json()["errors"]] == ["body.endpointRef"]
    # One answer whatever the reason, whether or not such a secret exists.
    assert "kept for other tenants" in others.json()["errors"][0]["message"]
    assert (await register_with(f"file:{base}/tenants/{tenant}/openai")).status_code == 201

    listed = settings.model_copy(
        update={
            "secret_ref_tenants": {
                "env:MODEL_ROUTER_PROVIDER_A": ["tenant-a"],
                f"file:{base}/acme-openai": ["tenant-a"],
            }
        }
    )
    policy = secret_policy(listed)
    # However the path is spelled.
    for spelled in (f"file:{base}/./acme-openai", f"file:/{base}//acme-openai"):
        assert policy.tenant_refusal(spelled, "tenant-b") is not None, spelled
    # A tenant's folder named in a roundabout way is still that tenant's.
    assert policy.tenant_refusal(f"file:{base}/tenants/tenant-a/../tenant-a/k", "tenant-b")
    assert policy.tenant_refusal("env:MODEL_ROUTER_PROVIDER_A", "tenant-b") is not None
    assert policy.tenant_refusal("env:MODEL_ROUTER_PROVIDER_A", "tenant-a") is None
    assert policy.tenant_refusal("env:MODEL_ROUTER_PROVIDER_SHARED", "tenant-b") is None


async def test_a_path_that_climbs_through_a_mounted_secrets_links_is_refused(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str, settings: Settings
) -> None:
    """A Secret mounted with an item per tenant lays out `tenants/<t>` as links into `..data`.
    Its owner was read from the path as written, `..` cancelled as text, and the file as the
    path resolves: `tenants/<own>/../../<other>/key` read as no tenant's file and resolved to
    the other tenant's key. Refused at registration, and at resolution for an entry from
    before."""
    mount = Path(settings.secret_file_dirs[0]) / "tenants"
    run = uuid.uuid4().hex[:8]
    other = f"other-{run}"
    stamp = mount / f"..{run}"
    for owner in (other, tenant):
        (stamp / owner).mkdir(parents=True)
        (stamp / owner / "key").write_text(f"sk-{owner}-0123456789")
        (mount / owner).symlink_to(f"..data-{run}/{owner}")
    (mount / f"..data-{run}").symlink_to(stamp.name)
    climbing = f"file:{mount}/{tenant}/../../{other}/key"
    # What it reaches on disk: the other tenant's key.
    assert Path(climbing.removeprefix("file:")).resolve().read_text().startswith(f"sk-{other}")

    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    resp = await http.post(
        "/factory/model-deployments",
        json=deployment_body(f"secret/{uuid.uuid4().hex[:6]}", endpointRef=climbing),
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert resp.status_code == 422, resp.text
    assert [e["field"] for e in resp.json()["errors"]] == ["body.endpointRef"]
    with pytest.raises(SecretResolutionError, match="must not hold"):
        await endpoint_broker(settings).resolve(climbing)
    # Its own key, named plainly, is its own.
    own = await endpoint_broker(settings).resolve(f"file:{mount}/{tenant}/key")
    assert own.api_key.get_secret_value() == f"sk-{tenant}-0123456789"


async def test_the_kubelets_own_folders_lead_to_no_other_tenants_key(
    settings: Settings, tmp_path: Path
) -> None:
    """The Secret mounted at the allowed directory itself, as the manifests mount it: the
    kubelet puts `..data -> ..<timestamp>` at its root and `tenants` is a link into `..data`.
    `..data/tenants/A/key` holds no `..` segment, read as outside `tenants/` (no tenant's), and
    resolved to A's key; so did a link of the operator's elsewhere in the mount into A's."""
    mount = tmp_path / "secrets"
    stamp = mount / "..2026_12_07_15_00_00.1"
    (stamp / "tenants" / "tenant-a").mkdir(parents=True)
    (stamp / "tenants" / "tenant-a" / "key").write_text("sk-tenant-a-0123456789")
    (stamp / "shared").mkdir()
    (stamp / "shared" / "a-alias").symlink_to("../tenants/tenant-a/key")
    (mount / "..data").symlink_to(stamp.name)
    (mount / "tenants").symlink_to("..data/tenants")
    (mount / "shared").symlink_to("..data/shared")
    configured = settings.model_copy(update={"secret_file_dirs": [mount]})
    policy = secret_policy(configured)
    broker = endpoint_broker(configured)
    kubelets = f"file:{mount}/..data/tenants/tenant-a/key"
    assert Path(kubelets.removeprefix("file:")).resolve().read_text().startswith("sk-tenant-a")
    assert policy.refusal(kubelets) is not None
    with pytest.raises(SecretResolutionError, match="must not hold"):
        await broker.resolve(kubelets)
    # Named another way that resolves into A's folder: A's alone.
    alias = f"file:{mount}/shared/a-alias"
    assert policy.refusal(alias) is None
    assert policy.tenant_refusal(alias, "tenant-b") is not None
    assert policy.tenant_refusal(alias, "tenant-a") is None
    # A's own key, named plainly, is A's.
    plain = f"file:{mount}/tenants/tenant-a/key"
    assert policy.tenant_refusal(plain, "tenant-b") is not None
    assert policy.tenant_refusal(plain, "tenant-a") is None
    assert (await broker.resolve(plain)).api_key.get_secret_value() == "sk-tenant-a-0123456789"
