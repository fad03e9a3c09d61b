"""Workflows must replay the histories recorded before a change to them. A WebhookDelivery runs
as long as its subscription (continue-as-new keeps the history short, not the run): a deploy
that changed its commands without `workflow.patched` would fail every running subscription's
next workflow task as non-deterministic. A DeploymentHealthProbe runs every two minutes, so a
deploy catches runs under way. A DeploymentLifecycle runs as long as its deployment. An
InvokeModel runs for its call, and a deploy catches those under way; so does a ReceiptSweeper,
started every minute.

The histories in tests/histories/ were recorded with the workflow as it was before the change
named in the file's name (stub activities: a replay runs the workflow's code alone). Add one
whenever such a workflow changes shape, and keep the old ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.invoke_setup import INVOKE_WORKFLOW_RUNNER
from core.payload_converter import data_converter
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow
from workflows.health_probe import HealthProbeWorkflow
from workflows.invoke import InvokeModelWorkflow
from workflows.receipt_sweeper import ReceiptSweeperWorkflow
from workflows.webhook_delivery import WebhookDeliveryWorkflow

HISTORIES = Path(__file__).parent / "histories"


@pytest.mark.parametrize(
    ("recorded", "name", "workflow"),
    [
        # Before `webhook_pending` reported the worker's delivery settings (its result has none).
        ("webhook_delivery_before_settings.json", "WebhookDelivery", WebhookDeliveryWorkflow),
        # Before an idle subscription waited inside `webhook_pending` (patch pending-long-poll),
        # recorded on 89805b4: two idle looks, each followed by its timer, then a page of one
        # event delivered and the cursor moved, an idle look, and the subscription gone.
        (
            "webhook_delivery_before_long_poll.json",
            "WebhookDelivery",
            WebhookDeliveryWorkflow,
        ),
        # Before a page's activity heartbeat (patch page-heartbeat), recorded on 136f52a: a long
        # poll finding a page of two events, the page delivered in one activity with no
        # heartbeat timeout, the cursor moved, then the subscription gone.
        (
            "webhook_delivery_before_page_heartbeat.json",
            "WebhookDelivery",
            WebhookDeliveryWorkflow,
        ),
        # Before a refused close was retried on the closers queue (patch
        # finalize-on-standalone-queue), recorded on 89805b4: the call's own close refused
        # (FINALIZE), then `finalize_receipt` on the workflow's own queue. (An activity's queue
        # and timeouts are not matched on replay: this one replays without the patch too; it
        # keeps the FINALIZE path's commands for the changes to come.)
        ("invoke_model_before_closers_queue.json", "InvokeModel", InvokeModelWorkflow),
        # Before the verdicts were judged together (each probe's verdict applied as it came),
        # recorded on 5909f8a: two targets, one failing at once (its Degrade applied while the
        # other probe ran) and one answering 2 s later (recovered).
        (
            "health_probe_before_verdicts_together.json",
            "DeploymentHealthProbe",
            HealthProbeWorkflow,
        ),
        # Before at most 8 verdicts were applied at once (patch probe-verdicts-bounded),
        # recorded on c95754d with stub activities: nine Approved deployments of one provider
        # failing unreachable at once, a Degraded one of another provider answering (its Recover
        # applied at once) and an Approved one of that provider answering 2 s later; the nine
        # Degrades, held by the network rule until then, scheduled together in one task.
        (
            "health_probe_before_verdicts_bounded.json",
            "DeploymentHealthProbe",
            HealthProbeWorkflow,
        ),
        # Before approving an Approved deployment again was answered (refused then), recorded
        # on e92acf2: two approvals at once, the second refused in its handler once the first
        # applied, then a retire.
        (
            "deployment_lifecycle_before_approve_again.json",
            "DeploymentLifecycle",
            DeploymentLifecycleWorkflow,
        ),
        # Before a prune had a few attempts and its failure was reported (patch
        # prune-failures-reported), recorded on 764d2c5 with stub activities: the sweep, then
        # both prunes, each with the unbounded retry.
        (
            "receipt_sweeper_before_prune_failures.json",
            "ReceiptSweeper",
            ReceiptSweeperWorkflow,
        ),
    ],
)
async def test_recorded_histories_replay(recorded: str, name: str, workflow: type) -> None:
    text = (HISTORIES / recorded).read_text()
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    assert started["workflowType"]["name"] == name
    history = WorkflowHistory.from_json(f"recorded/{recorded}", text)
    # InvokeModel runs as it runs in every worker (activities/invoke_setup.py).
    runner: WorkflowRunner = (
        INVOKE_WORKFLOW_RUNNER if workflow is InvokeModelWorkflow else SandboxedWorkflowRunner()
    )
    replayer = Replayer(workflows=[workflow], data_converter=data_converter, workflow_runner=runner)
    await replayer.replay_workflow(history)
