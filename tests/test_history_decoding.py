"""Data recorded in a history still decodes after an edge rule was tightened (`domain/stored.py`).

7b798e6 refused deploymentIds with an empty, '.' or '..' segment. A lifecycle registered as
"team/x/" before then has that id in its start input: decoded with the new rule, every workflow
task failed, the workflow stayed Running, and every transition sent to it (approve, retire, a
probe's verdict) timed out, so the deployment could not even be retired. The data converter
reads payloads as stored data, which edge rules let through; the API's bodies keep the rules
(tests/test_deployments.py: `trailing-slash` and the other path cases are still 422)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.worker import Replayer

from activities.lifecycle_client import LifecycleClient
from activities.lifecycle_types import WORKFLOW_NAME, LifecycleInput, workflow_id
from core import tracing
from core.payload_converter import data_converter
from core.settings import Settings
from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.enums import DeploymentState
from domain.lifecycle import Transition
from domain.suite import CaseResult
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow

# How long the retire may take, against a worker that is up: it answers in well under a second
# here. Before the fix it never answered, and the client's bound (the same) ended it.
RETIRE_BOUND = 20.0


def registration(deployment_id: str = "team/x/", **over: Any) -> dict[str, Any]:
    """A registration as an older API recorded it: a plain dict, no rule of today's applied."""
    return {
        "deploymentId": deployment_id,
        "provider": "openai",
        "model": "m",
        "region": "eu",
        "privacyClass": "Regional",
        "endpointRef": "env:K",
        **over,
    }


def lifecycle_input(tenant: str, reg: dict[str, Any]) -> dict[str, Any]:
    return {
        "tenant_id": tenant,
        "deployment_id": reg["deploymentId"],
        "registration": reg,
        "idempotency_key": "k",
    }


def recorded(value: Any) -> Payload:
    """The payload a history holds for `value`, JSON as the SDK writes it."""
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


def decode(payload: Payload, type_hint: type) -> Any:
    return data_converter.payload_converter.from_payloads([payload], [type_hint])[0]


@pytest.mark.parametrize(
    ("over", "field"),
    [
        # The path rule of 7b798e6.
        ({}, "deploymentId"),
        # A scheme the endpointRef rule no longer lists (as if one were dropped).
        ({"deploymentId": "team/x", "endpointRef": "kms:alias/k"}, "endpointRef"),
    ],
    ids=["deployment-id-path", "endpoint-ref"],
)
def test_a_recorded_registration_decodes_though_todays_rule_refuses_it(
    over: dict[str, Any], field: str
) -> None:
    reg = {**registration(), **over}
    decoded = decode(recorded(lifecycle_input("t", reg)), LifecycleInput)
    assert isinstance(decoded, LifecycleInput) and decoded.registration is not None
    assert decoded.registration.model_dump(by_alias=True, exclude_none=True) == reg
    # The same dict, validated as a caller's: refused.
    with pytest.raises(ValidationError) as refused:
        DeploymentRegistration.model_validate(reg)
    assert [e["loc"] for e in refused.value.errors()] == [(field,)]


def test_a_recorded_case_result_decodes_though_its_template_is_gone() -> None:
    """A reason rendered from a template a later suite reworded: the evaluation's history holds
    it as run_case's result."""
    result = {
        "case_id": "tool-calling/one",
        "capability": "tool-calling",
        "passed": False,
        "reason": "no tool was called",
    }
    assert decode(recorded(result), CaseResult).reason == "no tool was called"
    with pytest.raises(ValidationError, match="rendered template"):
        CaseResult.model_validate(result)


def test_stored_data_still_has_to_be_the_type() -> None:
    """Only edge rules skip stored data: a value that is not the type is refused as before."""
    with pytest.raises(ValidationError) as refused:
        decode(recorded(lifecycle_input("t", registration(privacyClass="Public"))), LifecycleInput)
    assert [e["loc"] for e in refused.value.errors()] == [("registration", "privacyClass")]


async def test_a_lifecycle_recorded_with_an_id_refused_today_runs_and_retires(
    temporal_client: Client, settings: Settings, worker: None
) -> None:
    tenant, dep = f"t-{uuid.uuid4().hex[:8]}", "team/x/"
    # Started by name with a dict, as an API from before 7b798e6 recorded it: the client
    # validates nothing.
    handle = await temporal_client.start_workflow(
        WORKFLOW_NAME,
        lifecycle_input(tenant, registration(dep)),
        id=workflow_id(tenant, dep),
        task_queue=settings.temporal_task_queue,
        result_type=DeploymentRecord,
    )

    retired = await LifecycleClient(temporal_client, timeout=RETIRE_BOUND).transition(
        tenant, dep, Transition.RETIRE
    )
    assert retired.deployment_id == dep and retired.state is DeploymentState.RETIRED
    # Retired, the workflow completes.
    done = await asyncio.wait_for(handle.result(), RETIRE_BOUND)
    assert done.state is DeploymentState.RETIRED

    # A worker restarted (or its cache evicted) replays the whole history from the start input.
    replayer = Replayer(
        workflows=[DeploymentLifecycleWorkflow],
        data_converter=data_converter,
        interceptors=tracing.interceptors(),
    )
    await replayer.replay_workflow(await handle.fetch_history())
