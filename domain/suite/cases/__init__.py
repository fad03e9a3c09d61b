"""The suite's cases, by capability. Case texts live here, in code, never in stored data."""

from __future__ import annotations

from domain.suite.cases.agent_tasks import agent_task_cases
from domain.suite.cases.base import ANCHOR_MARK, Case, SingleTurnCase, anchor
from domain.suite.cases.context import reliable_context_cases
from domain.suite.cases.drivers import ConversationCase, ToolTaskCase
from domain.suite.cases.error_recovery import error_recovery_cases
from domain.suite.cases.file_editing import file_editing_cases
from domain.suite.cases.instructions import instruction_following_cases
from domain.suite.cases.json_output import json_schema_cases, strict_json_cases
from domain.suite.cases.multi_turn import multi_turn_cases
from domain.suite.cases.patches import patch_success_cases
from domain.suite.cases.planning import planning_cases
from domain.suite.cases.shell_tasks import shell_tool_usage_cases
from domain.suite.cases.tool_calling import parallel_tool_calling_cases, tool_calling_cases


def all_cases(context_tokens: int) -> list[Case]:
    return [
        *tool_calling_cases(),
        *parallel_tool_calling_cases(),
        *strict_json_cases(),
        *json_schema_cases(),
        *instruction_following_cases(),
        *multi_turn_cases(),
        *reliable_context_cases(context_tokens),
        *patch_success_cases(),
        *file_editing_cases(),
        *shell_tool_usage_cases(),
        *planning_cases(),
        *error_recovery_cases(),
        *agent_task_cases(),
    ]


__all__ = [
    "ANCHOR_MARK",
    "Case",
    "ConversationCase",
    "SingleTurnCase",
    "ToolTaskCase",
    "all_cases",
    "anchor",
]
