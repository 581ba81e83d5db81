"""Small inline SVG plots for the HTML report, drawn in Python: no script, no network.

Each function returns one `<svg>` element as text, with labelled axes and a `<title>` on every
mark (the browser shows it on hover). Labels are escaped; numbers are formatted here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 420, 250
LEFT, RIGHT, TOP, BOTTOM = 48, 16, 30, 58
COLORS = ("#2563eb", "#d97706", "#059669", "#7c3aed")
MARKED_COLORS = (*COLORS, "#dc2626", "#0891b2", "#4b5563", "#db2777")
"""Colors of a plot whose lines also differ by marker and dash (the variants' curves)."""
MARKERS = ("circle", "square", "triangle", "diamond")
DASHES = ("", "7 3", "2 3", "9 3 2 3")
LEGEND_ROW, LEGEND_COLUMN = 18, 180


@dataclass(frozen=True)
class Series:
    """One line of a line plot: a name for the legend, and a value (or None) per x."""

    name: str
    values: Sequence[float | None]


def _text(cls: str, x: float, y: float, content: str, anchor: str = "start") -> str:
    """A text mark; `content` must already be escaped."""
    return f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{content}</text>'


def _open(title: str, width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'aria-label="{escape(title)}">',
        f'<text class="plot-title" x="{LEFT}" y="16">{escape(title)}</text>',
    ]


def _y_axis(label: str, top: float, bottom: float, ticks: Sequence[tuple[float, str]]) -> list[str]:
    """Grid lines and tick labels at the given (position, text) pairs, and the axis label."""
    parts = []
    for y, text in ticks:
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        parts.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>'
        )
    middle = (top + bottom) / 2
    parts.append(
        f'<text class="axis-label" transform="translate(12 {middle:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(label)}</text>'
    )
    return parts


def _rate_ticks(top: float, bottom: float) -> list[tuple[float, str]]:
    return [(bottom - (bottom - top) * v, f"{v:.2g}") for v in (0, 0.25, 0.5, 0.75, 1)]


def line_plot(
    title: str,
    xs: Sequence[int],
    series: Sequence[Series],
    notes: Sequence[str],
    x_label: str,
    y_label: str,
    marked: bool = False,
    remark: str = "",
) -> str:
    """Rates in [0, 1] over integer x; `notes` are a second line under each x tick (such as
    the number of tasks behind that k). `marked`: the lines differ by marker shape and dash
    too, not by color alone, with the legend in rows below the plot (room for many lines).
    `remark`: a line under the title (such as that two lines coincide)."""
    top, bottom = TOP + 8, HEIGHT - BOTTOM
    rows = math.ceil(len(series) / 2) if marked else 0
    parts = _open(title, height=HEIGHT + LEGEND_ROW * rows)
    if remark:
        parts.append(_text("note remark", LEFT, 29, escape(remark)))
    parts += _y_axis(y_label, top, bottom, _rate_ticks(top, bottom))
    span = WIDTH - RIGHT - LEFT - 30
    step = span / max(len(xs) - 1, 1)
    x_of = {x: LEFT + 15 + (i * step if len(xs) > 1 else span / 2) for i, x in enumerate(xs)}
    every = max(1, math.ceil(len(xs) / 12))
    for i, (x, note) in enumerate(zip(xs, notes, strict=True)):
        if i % every == 0 or i == len(xs) - 1:
            px = x_of[x]
            parts.append(
                f'<text class="tick" x="{px:.1f}" y="{bottom + 15}" text-anchor="middle">{x}</text>'
            )
            parts.append(_text("note", px, bottom + 28, escape(note), "middle"))
    parts.append(
        f'<text class="axis-label" x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{HEIGHT - 8}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    marks: list[list[str]] = []
    legend: list[str] = []
    for index, line in enumerate(series):
        style = _style(index) if marked else (COLORS[index % len(COLORS)], "circle", "")
        color, shape, dash = style
        points = [
            (x_of[x], bottom - (bottom - top) * v, x, v)
            for x, v in zip(xs, line.values, strict=True)
            if v is not None
        ]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points)
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline class="series" points="{path}" stroke="{color}"{dashed}/>')
        tip = escape(line.name)
        marks.append(
            [_marker(shape, px, py, color, f"{tip} k={x}: {v:.3f}") for px, py, x, v in points]
        )
        if marked:
            legend += _legend_entry(index, line.name, style)
            continue
        lx = WIDTH - RIGHT - 150 + index * 75
        legend.append(f'<rect x="{lx}" y="8" width="10" height="10" rx="2" fill="{color}"/>')
        legend.append(f'<text class="legend" x="{lx + 14}" y="17">{escape(line.name)}</text>')
    # markers over every line, the first series' last: where lines coincide its smaller
    # circles sit on the others' squares and triangles, so each series still shows
    for drawn in reversed(marks):
        parts += drawn
    return "\n".join([*parts, *legend, "</svg>"])


def _style(index: int) -> tuple[str, str, str]:
    """(color, marker, dash) of a marked plot's line: the first sixteen differ in marker or
    dash, whatever the colors look like."""
    shape = MARKERS[index % len(MARKERS)]
    dash = DASHES[(index + index // len(MARKERS)) % len(DASHES)]
    return MARKED_COLORS[index % len(MARKED_COLORS)], shape, dash


def _marker(shape: str, x: float, y: float, color: str, tip: str) -> str:
    """A point's mark with its hover text (`tip` already escaped)."""
    title = f"<title>{tip}</title>"
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}">{title}</circle>'
    if shape == "square":
        return (
            f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="{color}">'
            f"{title}</rect>"
        )
    corners = {
        "triangle": ((0, -4.5), (4.2, 3.2), (-4.2, 3.2)),
        "diamond": ((0, -4.5), (4.5, 0), (0, 4.5), (-4.5, 0)),
    }[shape]
    points = " ".join(f"{x + dx:.1f},{y + dy:.1f}" for dx, dy in corners)
    return f'<polygon class="marker-{shape}" points="{points}" fill="{color}">{title}</polygon>'


def _legend_entry(index: int, name: str, style: tuple[str, str, str]) -> list[str]:
    """A legend row below the plot, two to a row: a stretch of the line, its marker, the name."""
    color, shape, dash = style
    x = LEFT + (index % 2) * LEGEND_COLUMN
    y = HEIGHT + 4 + (index // 2) * LEGEND_ROW
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    label = name if len(name) <= 24 else name[:23] + "…"
    return [
        f'<line class="series" x1="{x}" x2="{x + 28}" y1="{y:.1f}" y2="{y:.1f}" '
        f'stroke="{color}"{dashed}/>',
        _marker(shape, x + 14, y, color, escape(name)),
        f'<text class="legend" x="{x + 34}" y="{y + 4:.1f}">{escape(label)}'
        f"<title>{escape(name)}</title></text>",
    ]


@dataclass(frozen=True)
class Bar:
    """One bar with its interval: a tag's pass@1 and 95% interval, say."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    note: str


def interval_bars(
    title: str, bars: Sequence[Bar], x_label: str, empty: str = "nothing to show"
) -> str:
    """Horizontal bars of rates in [0, 1] with interval whiskers, one row per bar; `empty` is
    what the plot says when there is no bar."""
    row = 22
    left = min(150, 24 + 7 * max((len(bar.label) for bar in bars), default=4))
    height = TOP + 12 + row * max(len(bars), 1) + 40
    width = WIDTH
    right_edge = width - RIGHT - 70
    parts = _open(title, width, height)
    top, bottom = TOP + 8, height - 40

    def x_of(v: float) -> float:
        return left + (right_edge - left) * v

    for v in (0, 0.25, 0.5, 0.75, 1) if bars else ():
        x = x_of(v)
        parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}"/>')
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{v:.2g}</text>'
        )
    if bars:
        parts.append(
            f'<text class="axis-label" x="{(left + right_edge) / 2:.1f}" y="{height - 8}" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
    else:
        parts.append(
            f'<text class="note" x="{(left + right_edge) / 2:.1f}" y="{top + 16}" '
            f'text-anchor="middle">{escape(empty)}</text>'
        )
    for i, bar in enumerate(bars):
        y = top + 4 + i * row
        label = bar.label if len(bar.label) <= 22 else bar.label[:21] + "…"
        parts.append(
            f'<text class="tick" x="{left - 8}" y="{y + 12}" text-anchor="end">{escape(label)}'
            f"<title>{escape(bar.label)}</title></text>"
        )
        if bar.value is None:
            continue
        tip = f"{bar.label}: {bar.value:.3f} ({bar.note})"
        if bar.low is not None and bar.high is not None:
            tip += f", 95% interval {bar.low:.3f}-{bar.high:.3f}"
        parts.append(
            f'<rect class="bar" x="{left}" y="{y}" width="{x_of(bar.value) - left:.1f}" '
            f'height="{row - 8}" rx="2"><title>{escape(tip)}</title></rect>'
        )
        if bar.low is not None and bar.high is not None:
            mid, x1, x2 = y + (row - 8) / 2, x_of(bar.low), x_of(bar.high)
            parts.append(
                f'<path class="whisker" d="M{x1:.1f} {mid:.1f}H{x2:.1f}M{x1:.1f} {mid - 5:.1f}'
                f'V{mid + 5:.1f}M{x2:.1f} {mid - 5:.1f}V{mid + 5:.1f}"/>'
            )
        parts.append(
            f'<text class="value" x="{right_edge + 8}" y="{y + 12}">{bar.value:.3f} '
            f'<tspan class="note">{escape(bar.note)}</tspan></text>'
        )
    return "\n".join([*parts, "</svg>"])


def histogram(title: str, values: Sequence[float], x_label: str, bins: int = 20) -> str:
    """Counts of `values` in equal-width bins between their minimum and maximum."""
    top, bottom = TOP + 8, HEIGHT - BOTTOM + 14
    counts, low, width = _bin(values, bins)
    peak = max(counts, default=0) or 1
    ticks = [(bottom - (bottom - top) * c / peak, str(c)) for c in sorted({0, peak // 2, peak})]
    parts = _open(title) + _y_axis("attempts", top, bottom, ticks)
    span = WIDTH - RIGHT - LEFT
    bar = span / max(len(counts), 1)
    for i, count in enumerate(counts):
        h = (bottom - top) * count / peak
        start, end = low + i * width, low + (i + 1) * width
        parts.append(
            f'<rect class="bar" x="{LEFT + i * bar + 1:.1f}" y="{bottom - h:.1f}" '
            f'width="{max(bar - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{seconds(start)}-{seconds(end)}: {count} attempts</title></rect>"
        )
    for f, anchor in ((0, "start"), (0.5, "middle"), (1, "end")):
        x = LEFT + span * f
        value = low + width * len(counts) * f
        parts.append(_text("tick", x, bottom + 15, seconds(value), anchor))
    parts.append(
        f'<text class="axis-label" x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{HEIGHT - 14}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    return "\n".join([*parts, "</svg>"])


def _bin(values: Sequence[float], bins: int) -> tuple[list[int], float, float]:
    """(counts per bin, lowest edge, bin width); all-equal values make one bin."""
    if not values:
        return [], 0.0, 1.0
    low, high = min(values), max(values)
    if high <= low:
        return [len(values)], low, max(low, 1e-3)
    width = (high - low) / bins
    counts = [0] * bins
    for v in values:
        counts[min(int((v - low) / width), bins - 1)] += 1
    return counts, low, width


def seconds(value: float) -> str:
    """A duration for people: 2.5s, 340ms, 0.041ms."""
    if value >= 100:
        return f"{value:.0f}s"
    if value >= 1:
        return f"{value:.1f}s"
    if value >= 0.01:
        return f"{value * 1000:.0f}ms"
    return f"{value * 1000:.2g}ms"
