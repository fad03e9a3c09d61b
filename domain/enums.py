"""The spec's enumerations, defined once."""

from __future__ import annotations

from enum import StrEnum


class Modality(StrEnum):
    CHAT = "Chat"
    EMBEDDING = "Embedding"
    RERANK = "Rerank"


class PrivacyClass(StrEnum):
    """Ordered from least to most strict: a stricter class may stand in for a weaker one."""

    EXTERNAL = "External"
    REGIONAL = "Regional"
    CONFIDENTIAL = "Confidential"
    LOCAL = "Local"

    @property
    def strictness(self) -> int:
        return _PRIVACY_ORDER.index(self)

    def at_least_as_strict_as(self, other: PrivacyClass) -> bool:
        return self.strictness >= other.strictness


_PRIVACY_ORDER = list(PrivacyClass)


class LatencyClass(StrEnum):
    INTERACTIVE = "Interactive"
    STANDARD = "Standard"
    BATCH = "Batch"


class DeploymentState(StrEnum):
    CANDIDATE = "Candidate"
    EVALUATED = "Evaluated"
    APPROVED = "Approved"
    DEGRADED = "Degraded"
    RETIRED = "Retired"


class InvocationOutcome(StrEnum):
    COMPLETED = "Completed"
    PARTIAL = "Partial"
    FAILED = "Failed"
    DENIED = "Denied"
    CANCELLED = "Cancelled"


class UsageStatus(StrEnum):
    REPORTED = "Reported"
    ESTIMATED = "Estimated"
    UNKNOWN = "Unknown"
    RECONCILED = "Reconciled"


class ProfileStatus(StrEnum):
    ACTIVE = "Active"
    RETIRED = "Retired"


class Capability(StrEnum):
    TOOL_CALLING = "tool-calling"
    PARALLEL_TOOL_CALLING = "parallel-tool-calling"
    STRICT_JSON = "strict-json"
    JSON_SCHEMA = "json-schema"
    INSTRUCTION_FOLLOWING = "instruction-following"
    AGENT_TASK_SUCCESS = "agent-task-success"
    PATCH_SUCCESS = "patch-success"
    RELIABLE_CONTEXT = "reliable-context"
    FILE_EDITING = "file-editing"
    SHELL_TOOL_USAGE = "shell-tool-usage"
    MULTI_TURN = "multi-turn"
    PLANNING = "planning"
    ERROR_RECOVERY = "error-recovery"


class Role(StrEnum):
    REQUESTER = "Requester"
    OPERATOR = "Operator"
    PLATFORM_ADMIN = "PlatformAdmin"
    OBSERVER = "Observer"


class Scope(StrEnum):
    MODELS_READ = "factory.models.read"
    MODELS_ADMIN = "factory.models.admin"
    RUNS_READ = "factory.runs.read"
    MODELS_INVOKE = "factory.models.invoke"
