"""The benchmark's "Where the rest goes" reading (bench/invoke_report_reading.py) names what the
dev server's CPU per invocation is mostly spent on besides the product's requests: its in-memory
SQLite's rollback journal, and why the switch that removes it is not used."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.invoke_report_reading import levers


def _levers(with_litellm: bool) -> str:
    res: Any = SimpleNamespace(
        probes={"temporal_start_returned_unsandboxed": [0.0043]},
        paths=["direct", "gateway", "litellm"] if with_litellm else ["direct", "gateway"],
    )
    m = {
        ("gateway", "ns1"): {"cpu_ms": {"api": 11.7, "temporal": 10.6, "bench": 2.0}},
        ("gateway", "ns16"): {"cpu_ms": {"api": 10.7, "temporal": 10.0}},
    }
    (line,) = levers(res, m)
    return line


def test_the_dev_servers_share_names_its_in_memory_journal_and_why_it_stays() -> None:
    text = _levers(with_litellm=True)
    assert "the dev server adds 10.0 ms of its own" in text
    assert "in-memory SQLite's rollback journal" in text
    assert "not adopted because SQLite cannot then undo a transaction" in text


def test_the_reading_without_litellm_still_names_the_journal() -> None:
    text = _levers(with_litellm=False)
    assert "rollback journal" in text
    assert "LiteLLM's proxy records nothing durable" not in text
