"""A transition's store step retried, or refused, never leaves the lifecycle workflow's copy of
the deployment behind the store, and a transition is never answered with another's row.

An attempt of `apply_transition` that timed out (10 s, waiting on the catalog version's row
lock) can still commit. Its retry read the row at the old version, its guarded UPDATE found the
row gone and it answered a conflict for a change that was made; the workflow kept the old copy,
and the next transition found the row one version on and took it for its own: a Retire after an
Approve answered 200 with the Approved row, nothing retired. A repeated REST Retire is done, as
the console counts it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.dml import Update
from sqlmodel import col
from temporalio.client import Client, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from activities.lifecycle import LifecycleActivities
from activities.lifecycle_types import CONFLICT, TransitionInput, workflow_id
from core.payload_converter import data_converter
from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.enums import DeploymentState
from domain.lifecycle import Transition
from store import lifecycle
from store.db import create_engine, session_factory, transaction
from store.migrate import upgrade
from store.tables import ModelDeploymentRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import deployment_body, record_evidence, register
from tests.helpers.deadline import eventually
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow

HISTORIES = Path(__file__).parent / "histories"


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _candidate(
    sessions: async_sessionmaker[AsyncSession], tenant: str, deployment_id: str
) -> None:
    """A Candidate row (version 1) written straight to the store: no workflow involved."""
    registration = DeploymentRegistration.model_validate(deployment_body(deployment_id))
    async with transaction(sessions) as session:
        await lifecycle.insert_candidate(session, tenant, registration)


async def _row(
    sessions: async_sessionmaker[AsyncSession], tenant: str, deployment_id: str
) -> ModelDeploymentRow:
    async with sessions() as session:
        row = await session.get(ModelDeploymentRow, (tenant, deployment_id))
    assert row is not None
    return row


async def test_a_retry_waits_for_the_attempt_that_holds_the_row_and_answers_its_write(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """The retried attempt starts while the first still holds the row, its write made and not
    yet committed (waiting, as it would on the catalog version's lock): the retry waits for
    it, then answers its row. It read the old version, and answered a conflict."""
    await _candidate(sessions, tenant, "d/held")
    retry = TransitionInput(
        tenant_id=tenant,
        deployment_id="d/held",
        transition=Transition.RETIRE,
        expected_version=1,
        expected_state=DeploymentState.CANDIDATE,
    )
    async with sessions() as first, first.begin():
        pid = await first.scalar(text("SELECT pg_backend_pid()"))
        await lifecycle.apply_transition(first, tenant, "d/held", Transition.RETIRE, 1)
        second = asyncio.create_task(LifecycleActivities(sessions).apply_transition(retry))

        async def waiting_on_the_first() -> bool:
            async with sessions() as session:
                blocked = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE CAST(:pid AS integer) = ANY(pg_blocking_pids(pid))"
                    ),
                    {"pid": pid},
                )
            return bool(blocked)

        await eventually(waiting_on_the_first)
    answered = await second
    assert (answered.state, answered.version) == (DeploymentState.RETIRED, 2)
    row = await _row(sessions, tenant, "d/held")
    assert (row.state, row.version) == (DeploymentState.RETIRED, 2)


class _WrittenMeanwhile(AsyncSession):
    """A session whose first UPDATE of a deployment row is preceded by `meanwhile`: another
    writer's change committed between this attempt's read and its write."""

    meanwhile: Any = None

    async def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        hook = type(self).meanwhile
        if hook is not None and isinstance(statement, Update):
            if getattr(statement.table, "name", None) == ModelDeploymentRow.__tablename__:
                type(self).meanwhile = None
                await hook()
        return await super().execute(statement, *args, **kwargs)


async def test_on_sqlite_a_row_moved_under_the_read_is_retried_not_a_conflict(
    tmp_path: Path, tenant: str
) -> None:
    """SQLite takes no lock as the row is read (no FOR UPDATE): the first attempt's commit
    lands between the retry's read and its write. That retry is retried itself, and the next
    attempt answers the first's row; it was a conflict, answered 409 for a change that was
    made."""
    url = f"sqlite+aiosqlite:///{tmp_path}/moved.db"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url)
    try:
        sessions = session_factory(engine)
        await _candidate(sessions, tenant, "d/moved")

        async def first_attempt() -> None:
            async with transaction(sessions) as session:
                await lifecycle.apply_transition(session, tenant, "d/moved", Transition.RETIRE, 1)

        async def retry() -> ModelDeploymentRow:
            async with transaction(sessions) as session:
                return await lifecycle.apply_transition(
                    session,
                    tenant,
                    "d/moved",
                    Transition.RETIRE,
                    1,
                    expected_state=DeploymentState.CANDIDATE,
                )

        _WrittenMeanwhile.meanwhile = first_attempt
        interleaved = async_sessionmaker(engine, expire_on_commit=False, class_=_WrittenMeanwhile)
        with pytest.raises(lifecycle.RowMoved):
            async with interleaved() as session, session.begin():
                await lifecycle.apply_transition(
                    session,
                    tenant,
                    "d/moved",
                    Transition.RETIRE,
                    1,
                    expected_state=DeploymentState.CANDIDATE,
                )
        assert _WrittenMeanwhile.meanwhile is None, "the first attempt ran in between"
        again = await retry()
        assert (again.state, again.version) == (DeploymentState.RETIRED, 2)
    finally:
        _WrittenMeanwhile.meanwhile = None
        await engine.dispose()


async def test_a_row_one_version_on_in_another_state_is_a_conflict_and_adopted(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The workflow holds Evaluated at version 2; the store holds Approved at 3 (an Approve
    whose attempt committed while the workflow was told of a conflict). A Retire was answered
    200 with the Approved row, nothing retired, and the workflow believed it Approved."""
    await register(http, auth, "d/behind")
    await record_evidence(temporal_client, tenant, "d/behind", {"tool-calling": 0.9})
    async with transaction(sessions) as session:
        await session.execute(
            update(ModelDeploymentRow)
            .where(col(ModelDeploymentRow.tenant_id) == tenant)
            .where(col(ModelDeploymentRow.deployment_id) == "d/behind")
            .values(state=DeploymentState.APPROVED, version=3)
        )
    path = "/factory/model-deployments/d/behind/retire"
    refused = await http.post(path, headers=auth)
    assert refused.status_code == 409, refused.text
    assert "changed while" in refused.json()["detail"]
    row = await _row(sessions, tenant, "d/behind")
    assert (row.state, row.version) == (DeploymentState.APPROVED, 3)
    # The workflow took the store's row for its copy: the Retire asked again is applied.
    handle = temporal_client.get_workflow_handle(workflow_id(tenant, "d/behind"))
    held = await handle.query(DeploymentLifecycleWorkflow.current)
    assert held is not None and (held.state, held.version) == (DeploymentState.APPROVED, 3)
    retired = await http.post(path, headers=auth)
    assert retired.status_code == 200, retired.text
    assert (retired.json()["state"], retired.json()["version"]) == ("Retired", 4)
    row = await _row(sessions, tenant, "d/behind")
    assert (row.state, row.version) == (DeploymentState.RETIRED, 4)


async def test_a_conflict_refused_by_the_activity_carries_the_stored_row(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """What the workflow adopts: the row as the store holds it, in the refusal's details."""
    await _candidate(sessions, tenant, "d/ahead")
    async with transaction(sessions) as session:
        await lifecycle.apply_transition(session, tenant, "d/ahead", Transition.RETIRE, 1)
    stale = TransitionInput(
        tenant_id=tenant,
        deployment_id="d/ahead",
        transition=Transition.RECORD_LICENSE,
        expected_version=1,
        expected_state=DeploymentState.CANDIDATE,
    )
    with pytest.raises(ApplicationError) as refused:
        await LifecycleActivities(sessions).apply_transition(stale)
    assert refused.value.type == CONFLICT and refused.value.non_retryable
    stored = DeploymentRecord.model_validate(refused.value.details[0])
    assert (stored.state, stored.version) == (DeploymentState.RETIRED, 2)


async def test_retiring_a_retired_deployment_again_answers_it(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
) -> None:
    """A retry after a timeout that applied it after all, or two operators at once: the
    console showed the repeat as done, the API answered 409 illegal-transition."""
    await register(http, auth, "d/twice")
    path = "/factory/model-deployments/d/twice/retire"
    first = await http.post(path, headers=auth)
    assert first.status_code == 200, first.text
    handle = temporal_client.get_workflow_handle(workflow_id(tenant, "d/twice"))

    async def completed() -> bool:
        described = await handle.describe()
        return described.status is not None and described.status.name == "COMPLETED"

    await eventually(completed)
    again = await http.post(path, headers=auth)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    stored = (await http.get("/factory/model-deployments/d/twice", headers=auth)).json()
    assert (stored["state"], stored["version"]) == ("Retired", first.json()["version"])


async def test_a_history_from_before_conflicts_were_adopted_replays() -> None:
    """Recorded on 713c7cd with stub activities, from an Approved record: a Degrade refused as
    a conflict carrying the Degraded row (as this activity refuses it now; a worker of that
    commit kept its Approved copy), the Degrade sent again and applied, then a Retire. Adopted
    on replay, the second Degrade was a no-op from Degraded where the history has its
    activity: the patch keeps such a run's copy as it was."""
    name = "deployment_lifecycle_before_conflict_adopted.json"
    history = WorkflowHistory.from_json(name, (HISTORIES / name).read_text())
    replayer = Replayer(workflows=[DeploymentLifecycleWorkflow], data_converter=data_converter)
    await replayer.replay_workflow(history)


async def test_an_attempt_scheduled_before_the_state_was_sent_takes_only_a_row_it_could_write(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # Around the upgrade an activity may carry no expected_state: its retry takes the row one
    # version on only in a state its transition leads to (a Retire's retry, the Retired row),
    # never another change's (a probe verdict's retry, that Retired row).
    await _candidate(sessions, tenant, "d/old")
    async with transaction(sessions) as session:
        await lifecycle.apply_transition(session, tenant, "d/old", Transition.RETIRE, 1)
    async with transaction(sessions) as session:
        again = await lifecycle.apply_transition(session, tenant, "d/old", Transition.RETIRE, 1)
    assert (again.state, again.version) == (DeploymentState.RETIRED, 2)
    with pytest.raises(lifecycle.VersionConflict):
        async with transaction(sessions) as session:
            await lifecycle.apply_transition(session, tenant, "d/old", Transition.PROBE_FAILED, 1)
