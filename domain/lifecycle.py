"""The ModelOps state machine: Candidate → Evaluated → Approved ⇄ Degraded → Retired."""

from __future__ import annotations

from enum import StrEnum

from domain.enums import DeploymentState as S


class Transition(StrEnum):
    RECORD_EVIDENCE = "record-evidence"
    APPROVE = "approve"
    PROBE_FAILED = "probe-failed"
    PROBE_RECOVERED = "probe-recovered"
    RETIRE = "retire"
    RECORD_LICENSE = "record-license"


_NEXT: dict[tuple[S, Transition], S] = {
    (S.CANDIDATE, Transition.RECORD_EVIDENCE): S.EVALUATED,
    # New evidence never silently drops an approval: the state stays, the scores change, and
    # the router stops choosing the deployment for any profile whose threshold it now misses.
    (S.EVALUATED, Transition.RECORD_EVIDENCE): S.EVALUATED,
    (S.APPROVED, Transition.RECORD_EVIDENCE): S.APPROVED,
    (S.DEGRADED, Transition.RECORD_EVIDENCE): S.DEGRADED,
    (S.EVALUATED, Transition.APPROVE): S.APPROVED,
    (S.APPROVED, Transition.PROBE_FAILED): S.DEGRADED,
    (S.DEGRADED, Transition.PROBE_RECOVERED): S.APPROVED,
    (S.CANDIDATE, Transition.RETIRE): S.RETIRED,
    (S.EVALUATED, Transition.RETIRE): S.RETIRED,
    (S.APPROVED, Transition.RETIRE): S.RETIRED,
    (S.DEGRADED, Transition.RETIRE): S.RETIRED,
    # License metadata is recorded before approval, never after.
    (S.CANDIDATE, Transition.RECORD_LICENSE): S.CANDIDATE,
    (S.EVALUATED, Transition.RECORD_LICENSE): S.EVALUATED,
}

# Probes repeat: a failure seen while already Degraded (or a success while Approved) is not a
# transition but it is not an error either. So does an approval (the spec's ApproveDeployment
# is naturally idempotent): a retry after a timeout that applied it after all, or two operators
# approving at once, is answered with the approved deployment, its checks passed again.
_IDEMPOTENT: frozenset[tuple[S, Transition]] = frozenset(
    {
        (S.DEGRADED, Transition.PROBE_FAILED),
        (S.APPROVED, Transition.PROBE_RECOVERED),
        (S.APPROVED, Transition.APPROVE),
    }
)


class IllegalTransition(Exception):
    def __init__(self, state: S, transition: Transition) -> None:
        super().__init__(f"cannot {transition.value} a deployment in state {state.value}")
        self.state = state
        self.transition = transition


def transitions_from(state: S) -> frozenset[Transition]:
    """The transitions that change something from `state`; a repeat (`_IDEMPOTENT`) is none."""
    return frozenset(t for (s, t) in _NEXT if s is state)


def next_state(state: S, transition: Transition) -> S:
    """The state after the transition; raises IllegalTransition naming the current state."""
    if (state, transition) in _IDEMPOTENT:
        return state
    try:
        return _NEXT[(state, transition)]
    except KeyError:
        raise IllegalTransition(state, transition) from None


def is_noop(state: S, transition: Transition) -> bool:
    return (state, transition) in _IDEMPOTENT


def healthy_in(state: S, transition: Transition, healthy: bool) -> bool:
    if transition is Transition.PROBE_FAILED:
        return False
    if transition is Transition.PROBE_RECOVERED:
        return True
    return healthy


def can_evaluate(state: S) -> bool:
    """An evaluation only makes sense where its evidence can be recorded: running the suite
    against a Retired deployment would spend on the provider for evidence nobody can import."""
    return (state, Transition.RECORD_EVIDENCE) in _NEXT


def is_routable(state: S, healthy: bool) -> bool:
    return state is S.APPROVED and healthy


def target_of(transition: Transition) -> S | None:
    """The one state the transition leads to from wherever it is legal (Retire: Retired), or
    None when that depends on where it starts (a license recorded keeps the state). A refusal
    that finds the deployment there already is a repeat, not a failure (a double-clicked
    Retire, a retry after a timeout that applied it after all)."""
    targets = {next_state(s, transition) for s in S if transition in transitions_from(s)}
    return targets.pop() if len(targets) == 1 else None
