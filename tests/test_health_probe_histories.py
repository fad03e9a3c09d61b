"""A DeploymentHealthProbe recorded before its verdicts landed as they settled (patch
probe-verdicts-as-settled) replays on the workflow as it is (see tests/test_workflow_histories.py
for why histories are kept).

Recorded on 136f52a with stub activities: four targets (an Approved deployment failing at once
as `server_error`, an Approved one whose credential did not resolve, a Degraded one answering and
an Approved one answering once the first failure was in), the deadline's timer, every verdict
judged together after the last probe: two Degrades, the credential's among them, and a Recover."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from core.payload_converter import data_converter
from workflows.health_probe import HealthProbeWorkflow

RECORDED = Path(__file__).parent / "histories" / "health_probe_before_verdicts_as_settled.json"


async def test_a_run_judged_together_replays() -> None:
    history = WorkflowHistory.from_json("recorded/verdicts-together", RECORDED.read_text())
    replayer = Replayer(workflows=[HealthProbeWorkflow], data_converter=data_converter)
    await replayer.replay_workflow(history)
