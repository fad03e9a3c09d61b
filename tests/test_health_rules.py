"""The health probe's network rule as each probe lands (domain/health.py): whether the results
still out could make a run's failures the worker's own network, so whether its Degrade verdicts
may land before the rest are in."""

from __future__ import annotations

from itertools import product

from domain.enums import DeploymentState
from domain.health import (
    ProbeOutcome,
    ProbeResult,
    ProbeTarget,
    own_network_possible,
    own_network_suspected,
)

APPROVED, DEGRADED = DeploymentState.APPROVED, DeploymentState.DEGRADED


def _target(name: str, provider: str, state: DeploymentState = APPROVED) -> ProbeTarget:
    return ProbeTarget(
        tenant_id="t", deployment_id=name, provider=provider, model="m", endpoint_ref="env:K",
        state=state,
    )  # fmt: skip


def _landed(target: ProbeTarget, error: str | None) -> tuple[ProbeTarget, ProbeResult]:
    outcome = ProbeOutcome.FAILED if error else ProbeOutcome.OK
    result = ProbeResult(
        tenant_id="t", deployment_id=target.deployment_id, outcome=outcome, error_class=error
    )
    return target, result


def test_one_providers_probes_still_out_cannot_make_it_the_workers_network() -> None:
    bad = _landed(_target("bad", "anthropic"), "server_error")
    hung = [_target(f"hung-{i}", "openai") for i in range(5)]
    assert not own_network_possible([bad], hung)


def test_a_second_provider_still_out_may_and_the_verdict_waits() -> None:
    bad = _landed(_target("bad", "anthropic"), "server_error")
    out = [_target("a-1", "openai"), _target("a-2", "openai"), _target("b-1", "vllm")]
    out.append(_target("b-2", "vllm"))
    # Four of five unreachable on two providers is the rule: it may still hold `bad`.
    assert own_network_possible([bad], out)
    # Once one of them answers, no result still out can reach 80 %.
    answered = _landed(out[0], None)
    assert not own_network_possible([bad, answered], out[1:])


def test_degraded_deployments_still_out_add_their_provider_not_their_share() -> None:
    lost = _landed(_target("lost", "openai"), "connection")
    fine = [_landed(_target(f"fine-{i}", "openai"), None) for i in range(4)]
    # One unreachable of five fresh: only Approved deployments still out could add to it.
    assert not own_network_possible([lost, *fine], [_target("old", "vllm", DEGRADED)])
    assert own_network_possible([lost], [_target("old", "vllm", DEGRADED)])


def test_the_bound_is_whether_some_ending_of_the_probes_still_out_suspects() -> None:
    # Every way the probes still out may end (an answer, another failure, unreachable, cut):
    # the bound says "possible" exactly when one of them makes the run the worker's network.
    endings = [None, "server_error", "timeout", "cut"]
    landed_sets = [
        [],
        [_landed(_target("x", "openai"), "timeout")],
        [_landed(_target("x", "openai"), "timeout"), _landed(_target("y", "vllm"), None)],
        [_landed(_target("x", "openai"), "server_error")],
        [_landed(_target("x", "openai", DEGRADED), "connection")],
    ]
    out = [_target("z", "anthropic"), _target("w", "vllm", DEGRADED), _target("v", "openai")]
    for landed in landed_sets:
        for n in range(len(out) + 1):
            still = out[:n]
            suspects = [
                own_network_suspected(
                    [
                        *landed,
                        *(_landed(t, e) for t, e in zip(still, ends, strict=True) if e != "cut"),
                    ]
                )
                for ends in product(endings, repeat=n)
            ]
            assert own_network_possible(landed, still) == any(suspects), (landed, still)
