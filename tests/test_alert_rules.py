"""The shipped alerting rules (deploy/prometheus/alerts.yml) name only metrics the processes
export, under the names Prometheus gives them, and only labels the code records on them: a rule
on a misspelt series or label never fires, and nothing says so. The compose stack's Prometheus
loads the file."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from core import metrics

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PREFIX = "connectsoft_factory_model_gateway_"
METRIC = re.compile(PREFIX + r"[a-z_]+")
# Labels Prometheus or the SDK add to every series, whatever the code records.
ALWAYS = {"job", "instance", "__name__", "otel_metric_overflow"}


def _rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _exported_names() -> set[str]:
    """Every instrument recorded once in a process of its own, rendered as `GET /metrics`
    renders it: the series names Prometheus scrapes."""
    script = textwrap.dedent(
        """
        from prometheus_client import generate_latest
        from core import metrics
        registry = metrics.configure_exporters()
        for instrument in metrics.INSTRUMENTS:
            if isinstance(instrument, metrics.Histogram):
                instrument.record(1.0, {})
            else:
                instrument.add(1, {})
        print(generate_latest(registry).decode())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {
        line.split("{")[0].split(" ")[0] for line in out.splitlines() if line.startswith(PREFIX)
    }


def _recorded_labels() -> dict[str, set[str]]:
    """The attribute keys the code passes to each instrument, by its name as Prometheus spells
    it, read from its calls (`metrics.NAME.add(value, {...})`, `.record(...)`,
    `.move_to(...)`), a `**where` resolved to the dict the same function assigned to it."""
    keys: dict[str, set[str]] = {}
    for path in [*ROOT.glob("activities/*.py"), *ROOT.glob("api/*.py"), *ROOT.glob("core/*.py")]:
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assigned = {
                target.id: node.value
                for node in ast.walk(func)
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for call in ast.walk(func):
                name = _instrument_of(call)
                if name is None or not isinstance(call, ast.Call) or len(call.args) < 2:
                    continue
                found = keys.setdefault(_spelt(getattr(metrics, name).name), set())
                for part in _dict_parts(call.args[1], assigned):
                    found |= part
    return keys


def _instrument_of(node: ast.AST) -> str | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in ("add", "record", "move_to"):
        return None
    held = node.func.value
    if isinstance(held, ast.Attribute) and isinstance(held.value, ast.Name):
        return held.attr if held.value.id == "metrics" else None
    # core/metrics.py's own recount names the instrument bare (usage_unknown.move_to).
    if isinstance(held, ast.Name) and isinstance(getattr(metrics, held.id, None), metrics.Counter):
        return held.id
    return None


def _dict_parts(node: ast.AST, assigned: dict[str, ast.Dict]) -> list[set[str]]:
    if isinstance(node, ast.Name) and node.id in assigned:
        return _dict_parts(assigned[node.id], assigned)
    if not isinstance(node, ast.Dict):
        return []
    parts = [
        {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    ]
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:  # **spread
            parts += _dict_parts(value, assigned)
    return parts


def _spelt(name: str) -> str:
    """An instrument's name as Prometheus spells it, less the family's prefix."""
    return name.removeprefix("connectsoft.factory.model_gateway.").replace(".", "_")


def _instrument(series: str) -> str:
    name = series.removeprefix(PREFIX)
    for suffix in ("_total", "_bucket", "_count", "_sum"):
        name = name.removesuffix(suffix)
    return name


def _labels_used(part: str) -> set[str]:
    """The labels a piece of an expression groups by or matches on."""
    used: set[str] = set()
    for grouped in re.findall(r"\bby \(([^)]*)\)", part):
        used |= {label.strip() for label in grouped.split(",") if label.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", part):
        used |= {m.split("=")[0].strip(" !~") for m in matchers.split(",") if "=" in m}
    return used


def test_every_rule_is_complete() -> None:
    rules = _rules()
    assert len({r["alert"] for r in rules}) == len(rules) > 0
    for rule in rules:
        assert rule["expr"].strip(), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_every_metric_a_rule_names_is_exported() -> None:
    exported = _exported_names()
    # The renderer's names: counters end in _total, histograms in _bucket/_count/_sum.
    assert PREFIX + "invocations_total" in exported
    named = {m for rule in _rules() for m in METRIC.findall(rule["expr"])}
    assert named, "no rule names a metric of ours"
    assert named <= exported, f"not exported: {sorted(named - exported)}"


def test_every_label_a_rule_uses_is_one_the_code_records() -> None:
    recorded = _recorded_labels()
    known = {_spelt(i.name) for i in metrics.INSTRUMENTS}
    assert recorded.keys() <= known
    for rule in _rules():
        # Each operand of `or`, `/` on its own: the labels it uses are its metric's.
        for part in re.split(r"\s(?:or|and|unless)\s|\s/\s", rule["expr"]):
            named = {_instrument(m) for m in METRIC.findall(part)}
            if not named:
                continue
            [instrument] = named
            allowed = recorded.get(instrument, set()) | ALWAYS
            assert _labels_used(part) <= allowed, (rule["alert"], instrument, allowed)


def test_the_compose_prometheus_loads_the_rules() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    for loaded in config["rule_files"]:
        assert f"./prometheus/{Path(loaded).name}:{loaded}:ro" in mounts
    assert [Path(f).name for f in config["rule_files"]] == ["alerts.yml"]
