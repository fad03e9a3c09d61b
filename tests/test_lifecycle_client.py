"""The one lifecycle client: its names are the workflow's, and its error policy turns the
workflow's refusals into the three exceptions every caller maps (against a real worker)."""

from __future__ import annotations

import httpx
import pytest
from temporalio.client import Client

from activities.lifecycle_client import LifecycleClient, LifecycleClosed, LifecycleRefused
from activities.lifecycle_types import REGISTER_UPDATE, UPDATE_OF, WORKFLOW_NAME
from domain.lifecycle import Transition
from tests.conftest import TokenFactory
from tests.helpers.catalog import register
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow


def test_every_transition_is_one_of_the_workflows_updates() -> None:
    defn = DeploymentLifecycleWorkflow.__temporal_workflow_definition  # type: ignore[attr-defined]
    assert defn.name == WORKFLOW_NAME
    assert set(UPDATE_OF) == set(Transition)
    assert {REGISTER_UPDATE, *UPDATE_OF.values()} == set(defn.updates)


async def test_the_client_refuses_as_the_workflow_does(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str, temporal_client: Client
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await register(http, auth, "lc/a")
    client = LifecycleClient(temporal_client, timeout=30)

    with pytest.raises(LifecycleRefused) as illegal:
        await client.transition(tenant, "lc/a", Transition.PROBE_FAILED)
    assert illegal.value.illegal and illegal.value.state == "Candidate"

    with pytest.raises(LifecycleClosed):
        await client.transition(tenant, "lc/never", Transition.RETIRE)

    retired = await client.transition(tenant, "lc/a", Transition.RETIRE)
    assert retired.state == "Retired"
