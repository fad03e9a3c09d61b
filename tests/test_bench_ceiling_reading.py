"""The benchmark's reading of the Temporal ceiling (bench/invoke_report_reading.py) says what
bounds the gateway's c=16 rate only when the gateway is under LiteLLM's: a run where it is at or
above LiteLLM's rate must not be explained as a miss."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.invoke_ceiling import Ceiling
from bench.invoke_report_reading import _ceiling


def _reading(gateway_rps: float, litellm_rps: float, ceiling_rps: float) -> str:
    res: Any = SimpleNamespace(ceiling=Ceiling([ceiling_rps], 3.0, 6.0))
    m = {
        ("gateway", "ns16"): {"rps": gateway_rps, "cpu_ms": {"api": 6.0, "litellm": 0.01}},
        ("litellm", "ns16"): {"rps": litellm_rps, "cpu_ms": {"api": 0.01, "litellm": 7.0}},
    }
    return _ceiling(res, m)


def test_a_gateway_at_or_above_litellm_is_not_explained_as_under_it() -> None:
    text = _reading(gateway_rps=258, litellm_rps=108, ceiling_rps=190)
    assert "the gateway at or above LiteLLM's rate in this run" in text
    assert "keeps the gateway under" not in text


def test_a_gateway_under_litellm_below_the_ceiling_names_both_costs() -> None:
    text = _reading(gateway_rps=131, litellm_rps=149, ceiling_rps=184)
    assert "keeps the gateway under LiteLLM's rate" in text
    assert "added to the workflow's" in text and "6.0 CPU ms a call" in text


def test_litellm_over_the_ceiling_is_out_of_reach_of_any_code_around_the_workflow() -> None:
    text = _reading(gateway_rps=131, litellm_rps=200, ceiling_rps=184)
    assert "no code around the workflow could reach LiteLLM's rate" in text
