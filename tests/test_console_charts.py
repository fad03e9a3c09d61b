"""The overview's numbers and its SVG, without a browser: buckets, percentiles, per-day sums,
and that every label is escaped (a deployment id is operator input)."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from api.console import charts, overview_data
from store.overview_reads import Cell, Percentiles

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _cell(minutes_ago: float, count: int = 1, **over: object) -> Cell:
    """Receipts that started `minutes_ago`, as the store sums them (in the 24h window)."""
    at = NOW - timedelta(minutes=minutes_ago)
    fields: dict[str, object] = {
        "bucket": int((at - (NOW - timedelta(hours=24))) / timedelta(minutes=30)),
        "day": at.date(),
        "outcome": "Completed",
        "usage_status": "Reported",
        "profile_id": "code-agent",
        "deployment_id": "local/sim-chat",
        "in_flight": False,
        "sent_nothing": False,
        "count": count,
        "cost": Decimal("0.001") * count,
    }
    fields.update(over)
    return Cell(**fields)  # type: ignore[arg-type]


def test_rate_is_per_minute_in_half_hour_buckets_by_outcome() -> None:
    cells = [_cell(5, 2), _cell(7, outcome="Failed"), _cell(60 * 25)]  # last: outside
    rate = overview_data.rate_by_outcome(cells, NOW, "24h")
    assert len(rate.labels) == 48
    by_name = {s.name: s.values for s in rate.series}
    assert set(by_name) == {"Completed", "Failed"}
    assert by_name["Completed"][-1] == 2 / 30 and sum(by_name["Completed"][:-1]) == 0
    assert by_name["Failed"][-1] == 1 / 30


def test_latency_rows_count_every_receipt_of_a_deployment() -> None:
    cells = [_cell(1, 60), _cell(90, 40, outcome="Failed"), _cell(1, deployment_id="other")]
    percentiles = {"local/sim-chat": Percentiles(50.0, 95.0, 25.0)}
    rows = {r.deployment_id: r for r in overview_data.latency_per_deployment(cells, percentiles)}
    assert (rows["local/sim-chat"].p50, rows["local/sim-chat"].p95) == (50.0, 95.0)
    assert rows["local/sim-chat"].ttft_p50 == 25.0 and rows["local/sim-chat"].count == 100
    assert rows["other"].p50 is None and rows["other"].count == 1


def test_spend_per_profile_per_day_and_receipts_awaiting_reconciliation() -> None:
    cells = [
        _cell(10, cost=Decimal("0.5")),
        _cell(60 * 13, cost=Decimal("0.25")),  # yesterday (UTC)
        _cell(10, profile_id="embedding", cost=None, usage_status="Unknown"),
        _cell(20, usage_status="Estimated"),
        # A denial: Estimated at zero, no provider saw it; it awaits no statement.
        _cell(30, usage_status="Estimated", outcome="Denied", sent_nothing=True, cost=None),
    ]
    spend = overview_data.spend_per_profile_per_day(cells, NOW, "24h")
    assert spend.days == ["2026-11-30", "2026-12-01"]
    assert {s.name: s.values for s in spend.series} == {"code-agent": [0.25, 0.5 + 0.001]}
    awaiting = overview_data.awaiting_per_day(cells, NOW, "24h")
    assert {s.name: s.values for s in awaiting.series} == {
        "Unknown": [0.0, 1.0],
        "Estimated": [0.0, 1.0],
    }


def test_svg_escapes_every_label_and_describes_itself() -> None:
    svg = charts.grouped_bars(
        "c1", "Latency <b>", {"<script>alert(1)</script>": [10.0, 20.0, None]}, ["p50", "p95"], "ms"
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'role="img"' in svg and '<title id="c1-t">Latency &lt;b&gt;</title>' in svg
    bars = charts.stacked_bars("c2", "Rate", ["a", "b"], [charts.Series("x", [0, 3])], "calls")
    assert bars.count("<rect") == 2  # one bar (a has nothing) and one legend swatch
    assert "total 3 calls" in bars
    # A rate is described by its highest bar: the total of per-minute rates means nothing.
    rates = [charts.Series("x", [2, 3]), charts.Series("y", [1, 0])]
    per_minute = charts.stacked_bars("c4", "Rate", ["a", "b"], rates, "calls/min", rate=True)
    assert "highest 3 calls/min" in per_minute and "total" not in per_minute


def test_small_values_get_an_axis_of_their_own_size() -> None:
    # A fraction of a cent is still a visible bar: the axis tops out near the value, not at 1.
    svg = charts.stacked_bars("c3", "Spend", ["day"], [charts.Series("p", [0.000006])], "USD")
    height = float(re.search(r'<rect [^>]*height="([0-9.]+)"', svg).group(1))  # type: ignore[union-attr]
    assert height > 0.5 * (charts.HEIGHT - charts.TOP - charts.BOTTOM)
    assert ">0.00001<" in svg and ">0.0000025<" in svg


_LEGEND = re.compile(
    r'<rect x="([0-9.]+)" y="([0-9.]+)" width="10" height="10" fill="([^"]+)"/>'
    r'<text x="([0-9.]+)" y="[0-9.]+" font-size="11" fill="#24292f">(?:<title>[^<]*</title>)?'
    r"([^<]*)</text>"
)


def test_a_legend_of_many_long_names_has_a_colour_each_and_stays_within_the_chart() -> None:
    # Ten profiles of twenty characters: the ninth and tenth took the first two's colours,
    # and the legend, on one line, ran past the 720-unit width from the fifth entry on.
    names = [f"profile-{i:02d}-abcdefghi" for i in range(10)]
    assert {len(n) for n in names} == {20}
    series = [charts.Series(n, [float(i + 1), 1.0]) for i, n in enumerate(names)]
    svg = charts.stacked_bars("c5", "Spend", ["d1", "d2"], series, "USD")
    entries = _LEGEND.findall(svg)
    assert entries, svg[-600:]
    fills = [fill for _, _, fill, _, _ in entries]
    assert len(set(fills)) == len(fills), f"two legend entries share a colour: {fills}"
    for _, _, _, text_x, name in entries:
        # The text's width estimated at 7 units a character (font size 11), generously.
        assert float(text_x) + 7 * len(name) <= charts.WIDTH, (text_x, name)
    # Every series is in it, or summed into the last entry with the smallest ones.
    shown = [name for *_, name in entries]
    others = [n for n in shown if n.endswith(" others")]
    assert len(others) == 1 and int(others[0].split()[0]) + len(shown) - 1 == len(names)
    # The smallest went into it; the others kept their order.
    assert shown[:-1] == names[10 - len(shown) + 1 :]
    # The chart is tall enough for the rows the legend took.
    height = float(re.search(r'viewBox="0 0 720 ([0-9.]+)"', svg).group(1))  # type: ignore[union-attr]
    assert max(float(y) for _, y, *_ in entries) + 10 <= height
    # Each bar's colour is its legend entry's.
    bars = re.findall(r'fill="([^"]+)"><title>d1 ([^:]+):', svg)
    assert dict(bars) == {fill: name for _, _, fill, _, name in entries}


def test_latency_labels_fit_their_slots_past_four_deployments() -> None:
    # Ten deployments: labels of 28 characters, 168 units wide, ran into each other's slot.
    groups = {f"provider/model-number-{i:02d}-xyzw": [10.0, 20.0, 5.0] for i in range(10)}
    svg = charts.grouped_bars("c6", "Latency", groups, ["p50", "p95", "TTFT p50"], "ms")
    labels = re.findall(
        r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="middle" font-size="10" '
        r'fill="#24292f">([^<]*)</text>',
        svg,
    )
    assert len(labels) == 10
    slot = (charts.WIDTH - charts.LEFT - charts.RIGHT) / 10
    spans = []
    for x, label in labels:
        # Estimated at 6 units a character (font size 10), generously.
        half = 6 * len(label) / 2
        spans.append((float(x) - half, float(x) + half))
        assert 6 * len(label) <= slot, label
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, (end, start)
    # A label keeps the end of its id (the model), which tells deployments apart.
    assert labels[3][1].endswith("03-xyzw")
