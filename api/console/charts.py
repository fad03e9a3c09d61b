"""Server-side SVG charts for the console's overview: no chart library, no script, nothing to
download. Each chart is an `<svg role="img">` with a title and a description, followed on the
page by the same numbers as a table for screen readers and for reading exact values.

Colours are presentation attributes (the console's Content-Security-Policy allows no inline
styles), picked from a colour-blind-safe palette (Okabe-Ito). Past its eight colours, the
smallest series are drawn as one, "N others" (the table under the chart keeps each): the ninth
took the first one's colour, two profiles that the legend could not tell apart. The legend wraps
into rows within the chart's width; text widths are estimated, per character, on the generous
side (an entry ran past the 720-unit width and was cut off)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 28, 44
MAX_BAR = 48.0
# Estimated widths of a character at the legend's font size (11) and the axis labels' (10).
LEGEND_CHAR, LABEL_CHAR = 7.0, 6.0
LEGEND_SWATCH, LEGEND_GAP, LEGEND_ROW = 14, 10, 16
# A longer name is cut in the legend (its whole text in the entry's tooltip and the table).
LEGEND_NAME_MAX = 40


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.3g}"
    digits = 2 - math.floor(math.log10(abs(value)))
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above the value: an axis top
    that keeps small values (a fraction of a cent, a call every few minutes) visible."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value * (1 - 1e-9):
            return step * magnitude
    return 10 * magnitude


def _frame(
    chart_id: str, title: str, description: str, body: list[str], legend: list[str], height: float
) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:g}" '
        f'role="img" aria-labelledby="{chart_id}-t {chart_id}-d" class="chart" id="{chart_id}">'
        f'<title id="{chart_id}-t">{escape(title)}</title>'
        f'<desc id="{chart_id}-d">{escape(description)}</desc>' + "".join(body + legend) + "</svg>"
    )


def _axes(top: float, unit: str) -> list[str]:
    out = []
    plot_h = HEIGHT - TOP - BOTTOM
    for i in range(5):
        value = top * i / 4
        y = HEIGHT - BOTTOM - plot_h * i / 4
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#d0d7de" stroke-width="1"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#24292f">{escape(_fmt(value))}</text>'
        )
    out.append(f'<text x="4" y="{TOP - 12}" font-size="11" fill="#24292f">{escape(unit)}</text>')
    return out


def _legend(names: Sequence[str]) -> tuple[list[str], float]:
    """The legend's entries, in rows within the width, and the chart's height that holds them."""
    out: list[str] = []
    x, y = float(LEFT), float(HEIGHT + 8)
    for i, name in enumerate(names):
        shown = name if len(name) <= LEGEND_NAME_MAX else name[: LEGEND_NAME_MAX - 1] + "…"
        width = LEGEND_SWATCH + LEGEND_CHAR * len(shown)
        if x > LEFT and x + width > WIDTH - RIGHT:
            x, y = float(LEFT), y + LEGEND_ROW
        tip = f"<title>{escape(name)}</title>" if shown != name else ""
        out.append(
            f'<rect x="{x:g}" y="{y:g}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{x + LEGEND_SWATCH:g}" y="{y + 9:g}" font-size="11" fill="#24292f">'
            f"{tip}{escape(shown)}</text>"
        )
        x += width + LEGEND_GAP
    return out, y + 16


def _within_palette(series: Sequence[Series]) -> list[Series]:
    """At most one series per colour: the largest in their order, the rest summed into one."""
    if len(series) <= len(PALETTE):
        return list(series)
    ranked = sorted(range(len(series)), key=lambda k: -sum(series[k].values))
    kept = sorted(ranked[: len(PALETTE) - 1])
    rest = [series[k] for k in ranked[len(PALETTE) - 1 :]]
    others = Series(
        f"{len(rest)} others", [sum(v) for v in zip(*(s.values for s in rest), strict=True)]
    )
    return [series[k] for k in kept] + [others]


def _label(text: str, room: float) -> str:
    """An axis label cut to the room it has, keeping its end (a deployment id's model)."""
    fits = max(2, int(room / LABEL_CHAR))
    return text if len(text) <= fits else "…" + text[-(fits - 1) :]


def stacked_bars(
    chart_id: str,
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    unit: str,
    every_nth_label: int = 1,
    *,
    rate: bool = False,
) -> Markup:
    """One bar per label, the series stacked in it. A `rate` (per minute, say) is described
    by its highest bar: a total of rates means nothing."""
    series = _within_palette(series)
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    top = _nice_max(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(labels))
    bar = min(MAX_BAR, max(1.0, slot * 0.8))
    body = _axes(top, unit)
    for i, label in enumerate(labels):
        x = LEFT + i * slot + (slot - bar) / 2
        base = float(HEIGHT - BOTTOM)
        for k, s in enumerate(series):
            value = s.values[i]
            if value <= 0:
                continue
            h = plot_h * value / top
            base -= h
            body.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(label)} '
                f"{escape(s.name)}: {escape(_fmt(value))}</title></rect>"
            )
        if i % max(1, every_nth_label) == 0:
            body.append(
                f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" '
                f'font-size="10" fill="#24292f">{escape(label)}</text>'
            )
    summary = f"highest {_fmt(max(totals, default=0))}" if rate else f"total {_fmt(sum(totals))}"
    description = (
        f"{len(labels)} bars, {', '.join(s.name for s in series) or 'no series'}; {summary} {unit}."
    )
    legend, height = _legend([s.name for s in series])
    # Every text that went into the markup passed through html.escape above.
    return Markup(_frame(chart_id, title, description, body, legend, height))  # noqa: S704


def grouped_bars(
    chart_id: str,
    title: str,
    groups: Mapping[str, Sequence[float | None]],
    names: Sequence[str],
    unit: str,
) -> Markup:
    """One group per key (e.g. a deployment), one bar per name (e.g. p50, p95, TTFT)."""
    values = [v for vs in groups.values() for v in vs if v is not None]
    top = _nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(groups))
    bar = min(MAX_BAR, max(1.0, slot * 0.8 / max(1, len(names))))
    body = _axes(top, unit)
    for i, (group, vs) in enumerate(groups.items()):
        x0 = LEFT + i * slot + (slot - bar * len(names)) / 2
        for k, value in enumerate(vs):
            if value is None or value <= 0:
                continue
            h = plot_h * value / top
            body.append(
                f'<rect x="{x0 + k * bar:.1f}" y="{HEIGHT - BOTTOM - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(group)} '
                f"{escape(names[k])}: {escape(_fmt(value))} {escape(unit)}</title></rect>"
            )
        # Cut to its slot: past four deployments, 28 characters ran into the next one's.
        body.append(
            f'<text x="{LEFT + i * slot + slot / 2:.1f}" y="{HEIGHT - BOTTOM + 14}" '
            f'text-anchor="middle" font-size="10" fill="#24292f">'
            f"{escape(_label(group, slot - 4))}</text>"
        )
    description = f"{len(groups)} groups of {', '.join(names)} in {unit}."
    legend, height = _legend(names)
    # Every text that went into the markup passed through html.escape above.
    return Markup(_frame(chart_id, title, description, body, legend, height))  # noqa: S704
