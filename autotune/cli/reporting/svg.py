"""Figures as inline SVG text, drawn by hand: a heatmap, a grid of categories, a roofline, curves over M
and horizontal bars.

Every figure is one ``<svg class="figure" data-figure=KIND>`` element with its size in its viewBox, its
title as a ``<title>`` child and every mark a child element: a page that inlines them needs no script,
font or file beside it. Each mark of data carries ``data-*`` attributes with its values, and a
``<title>`` (the browser's tooltip). Axes over sizes and times are logarithmic (base 2 for M, 10 for the
rest). Functions take plain numbers and strings; none reads the database.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape

__all__ = [
    "PALETTE",
    "backend_colors",
    "bars",
    "category_grid",
    "curves",
    "heatmap",
    "roofline",
    "speedup_color",
]

#: Colours of categories (backends, curves), in order of first use.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
#: A cell with no value.
EMPTY = "#d9d9d9"
_FONT = 'font-family="sans-serif" font-size="11"'


def speedup_color(x: float | None) -> str:
    """The heatmap colour of speed-up `x`: white at 1, greener up to 4x, redder down to 1/4x; grey for
    None."""
    if x is None or x <= 0 or not math.isfinite(x):
        return EMPTY
    t = max(-1.0, min(1.0, math.log2(x) / 2.0))
    if t >= 0:
        r, g, b = 255 - 190 * t, 255 - 80 * t, 255 - 190 * t
    else:
        r, g, b = 255 + 40 * t, 255 + 190 * t, 255 + 190 * t
    return f"#{round(r):02x}{round(g):02x}{round(b):02x}"


def backend_colors(backends: Sequence[str]) -> dict[str, str]:
    """A colour per backend, in order, repeating after the palette's end."""
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(dict.fromkeys(backends))}


def heatmap(
    title: str,
    rows: Sequence[str],
    cols: Sequence[int],
    values: Mapping[tuple[str, int], float | None],
    tips: Mapping[tuple[str, int], str],
) -> str:
    """Rows × columns (M) of speed-ups: each cell coloured by `speedup_color` and labelled with its value
    ("-" for a cell with no vendor time); cells not in `values` are left out."""

    def mark(row: str, m: int) -> tuple[str, str, dict[str, str]]:
        x = values[(row, m)]
        return (
            speedup_color(x),
            "-" if x is None else f"{x:.2f}",
            {"speedup": "" if x is None else f"{x:.4g}"},
        )

    legend = [(f"{v:g}x", speedup_color(v)) for v in _SCALE]
    return _grid("heatmap", title, rows, cols, values.keys(), mark, tips, legend)


def category_grid(
    title: str,
    rows: Sequence[str],
    cols: Sequence[int],
    cats: Mapping[tuple[str, int], str],
    tips: Mapping[tuple[str, int], str],
) -> str:
    """Rows × columns (M) of categories (the backend of each cell), coloured by category with a legend."""
    colors = backend_colors(sorted(set(cats.values())))

    def mark(row: str, m: int) -> tuple[str, str, dict[str, str]]:
        c = cats[(row, m)]
        return colors[c], c.removeprefix("triton_")[:7], {"backend": c}  # triton_gemv: "gemv"

    return _grid("backends", title, rows, cols, cats.keys(), mark, tips, list(colors.items()))


def _grid(
    kind: str,
    title: str,
    rows: Sequence[str],
    cols: Sequence[int],
    keys: Iterable[tuple[str, int]],
    mark: Callable[[str, int], tuple[str, str, dict[str, str]]],
    tips: Mapping[tuple[str, int], str],
    legend: Sequence[tuple[str, str]],
) -> str:
    """The cells of `keys` in a grid of `rows` × `cols`, each drawn as `mark` gives its colour, label and
    data, with `legend` (name, colour) below."""
    label_w = max([len(r) for r in rows] + [4]) * 6.5 + 12
    cw, ch, top = 46.0, 22.0, 34.0
    width = max(label_w + cw * len(cols) + 10, 450.0)
    height = top + ch * len(rows) + 30 + 16 * math.ceil(len(legend) / 4)
    out = [_open(kind, title, width, height), _text(4, 14, title, bold=True)]
    for j, m in enumerate(cols):
        out.append(_text(label_w + cw * j + cw / 2, top - 6, f"M={m}", anchor="middle"))
    present = set(keys)
    for i, row in enumerate(rows):
        y = top + ch * i
        out.append(_text(label_w - 6, y + ch / 2 + 4, row, anchor="end"))
        for j, m in enumerate(cols):
            if (row, m) not in present:
                continue
            color, label, data = mark(row, m)
            attrs = {"row": row, "m": str(m), **data}
            x = label_w + cw * j
            out.append(
                f'<g class="cell"{_data(attrs)}><title>{escape(tips.get((row, m), label))}</title>'
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{cw - 2:.1f}" height="{ch - 2:.1f}" fill="{color}"/>'
                + _text(x + cw / 2 - 1, y + ch / 2 + 3, label, anchor="middle")
                + "</g>"
            )
    y0 = top + ch * len(rows) + 14
    for i, (name, color) in enumerate(legend):
        x, y = 4 + 110 * (i % 4), y0 + 16 * (i // 4)
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}" stroke="#bbb"/>')
        out.append(_text(x + 14, y, name))
    out.append("</svg>")
    return "".join(out)


#: The speed-ups shown in a heatmap's legend.
_SCALE = (0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0)


def roofline(
    title: str,
    points: Sequence[tuple[float, float, str, str]],
    peak_tflops: float,
    mem_gbps: float,
) -> str:
    """Achieved TFLOP/s over arithmetic intensity (FLOP per byte of minimum traffic), log-log: one dot per
    (intensity, TFLOP/s, backend, tooltip), coloured by backend, under the roof min(peak, intensity ×
    bandwidth) where the peaks are known (> 0)."""
    roof = peak_tflops > 0 and mem_gbps > 0
    xs = [p[0] for p in points if p[0] > 0] or [1.0]
    ys = [p[1] for p in points if p[1] > 0] or [1.0]
    ridge = peak_tflops * 1e3 / mem_gbps if roof else None
    x_lo, x_hi = _decades(min(xs + ([ridge] if ridge else [])), max(xs + ([ridge] if ridge else [])))
    y_lo, y_hi = _decades(min(ys), max(ys + ([peak_tflops] if roof else [])))
    w, h, left, top, bottom = 520.0, 320.0, 56.0, 24.0, 40.0
    pw, ph = w - left - 120, h - top - bottom

    def px(x: float) -> float:
        return left + pw * (math.log10(x) - x_lo) / (x_hi - x_lo)

    def py(y: float) -> float:
        return top + ph * (1 - (math.log10(y) - y_lo) / (y_hi - y_lo))

    out = [_open("roofline", title, w, h), _text(4, 14, title, bold=True)]
    out.append(_axes(left, top, pw, ph, (x_lo, x_hi), (y_lo, y_hi), "FLOP / byte", "TFLOP/s"))
    if roof:
        assert ridge is not None
        a = 10**x_lo
        start = f"M{px(a):.1f},{py(max(a * mem_gbps / 1e3, 10**y_lo)):.1f}"
        path = f"{start} L{px(ridge):.1f},{py(peak_tflops):.1f} L{px(10**x_hi):.1f},{py(peak_tflops):.1f}"
        out.append(f'<path class="roof" d="{path}" fill="none" stroke="#333" stroke-width="1.5"/>')
        out.append(
            _text(px(10**x_hi) - 2, py(peak_tflops) - 4, f"peak {peak_tflops:g} TFLOP/s", anchor="end")
        )
    else:
        out.append(_text(left + 6, top + 12, "peaks unknown for this device: no roof"))
    colors = backend_colors(sorted({p[2] for p in points}))
    for x, y, backend, tip in points:
        if x <= 0 or y <= 0:
            continue
        out.append(
            f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colors[backend]}" '
            f'fill-opacity="0.8"{_data({"backend": backend, "intensity": f"{x:.4g}", "tflops": f"{y:.4g}"})}>'
            f"<title>{escape(tip)}</title></circle>"
        )
    out += _side_legend(list(colors.items()), left + pw + 10, top + 10)
    out.append("</svg>")
    return "".join(out)


def curves(title: str, series: Sequence[tuple[str, Sequence[tuple[int, float]]]], y_label: str = "µs") -> str:
    """Lines over M (log2 axis) of (name, [(M, value), ...]) with a value axis on log10, each series in
    its own colour with a dot per point."""
    pts = [(m, v) for _, s in series for m, v in s if m > 0 and v > 0]
    ms = [m for m, _ in pts] or [1]
    vs = [v for _, v in pts] or [1.0]
    x_lo, x_hi = math.floor(math.log2(min(ms))), math.ceil(math.log2(max(ms)))
    x_hi = max(x_hi, x_lo + 1)
    y_lo, y_hi = _decades(min(vs), max(vs))
    w, h, left, top, bottom = 520.0, 260.0, 56.0, 24.0, 40.0
    pw, ph = w - left - 130, h - top - bottom

    def px(m: float) -> float:
        return left + pw * (math.log2(m) - x_lo) / (x_hi - x_lo)

    def py(v: float) -> float:
        return top + ph * (1 - (math.log10(v) - y_lo) / (y_hi - y_lo))

    out = [_open("curves", title, w, h), _text(4, 14, title, bold=True)]
    out.append(_axes(left, top, pw, ph, (x_lo, x_hi), (y_lo, y_hi), "M", y_label, x_base=2))
    names = [name for name, _ in series]
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    for name, s in series:
        good = sorted((m, v) for m, v in s if m > 0 and v > 0)
        if not good:
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{px(m):.1f},{py(v):.1f}" for i, (m, v) in enumerate(good))
        out.append(f'<g class="series"{_data({"name": name, "points": str(len(good))})}>')
        out.append(f'<path d="{d}" fill="none" stroke="{colors[name]}" stroke-width="1.8"/>')
        for m, v in good:
            out.append(
                f'<circle cx="{px(m):.1f}" cy="{py(v):.1f}" r="2.5" fill="{colors[name]}">'
                f"<title>{escape(name)}: M={m} {v:.4g} {escape(y_label)}</title></circle>"
            )
        out.append("</g>")
    out += _side_legend(list(colors.items()), left + pw + 10, top + 10)
    out.append("</svg>")
    return "".join(out)


def bars(title: str, items: Sequence[tuple[str, float, str]], unit: str) -> str:
    """Horizontal bars of (label, value, note), the longest the largest value, each labelled with its
    value in `unit` and its note."""
    label_w = max([len(label) for label, _, _ in items] + [4]) * 6.5 + 12
    bh, top, span = 18.0, 26.0, 300.0
    width, height = label_w + span + 220, top + bh * len(items) + 8
    biggest = max([v for _, v, _ in items] + [1e-9])
    out = [_open("bars", title, width, height), _text(4, 14, title, bold=True)]
    for i, (label, value, note) in enumerate(items):
        y = top + bh * i
        length = max(1.0, span * value / biggest)
        out.append(
            f'<g class="bar"{_data({"label": label, "value": f"{value:.6g}"})}><title>{escape(label)}: '
            f'{value:.4g} {escape(unit)} {escape(note)}</title><rect x="{label_w:.1f}" y="{y:.1f}" '
            f'width="{length:.1f}" height="{bh - 4:.1f}" fill="{PALETTE[0]}"/></g>'
        )
        out.append(_text(label_w - 6, y + bh / 2 + 2, label, anchor="end"))
        out.append(_text(label_w + length + 4, y + bh / 2 + 2, f"{value:.4g} {unit} {note}".rstrip()))
    out.append("</svg>")
    return "".join(out)


# -- pieces ------------------------------------------------------------------------------------------------


def _open(kind: str, title: str, width: float, height: float) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="figure" data-figure="{kind}" role="img" '
        f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">'
        f"<title>{escape(title)}</title>"
    )


def _text(x: float, y: float, text: str, *, anchor: str = "start", bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return f'<text {_FONT} x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{weight}>{escape(text)}</text>'


def _data(attrs: Mapping[str, str]) -> str:
    return "".join(f' data-{k}="{escape(v, quote=True)}"' for k, v in attrs.items())


def _decades(lo: float, hi: float) -> tuple[int, int]:
    """The powers of ten around [lo, hi] (at least one decade apart)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return a, max(b, a + 1)


def _axes(
    left: float,
    top: float,
    pw: float,
    ph: float,
    xr: tuple[int, int],
    yr: tuple[int, int],
    x_label: str,
    y_label: str,
    x_base: int = 10,
) -> str:
    """The frame, the tick labels at each power of `x_base` (x) and of ten (y), and the axis names."""
    out = [
        f'<rect class="frame" x="{left}" y="{top}" width="{pw:.1f}" height="{ph:.1f}" fill="none" '
        'stroke="#999"/>'
    ]
    step = max(1, (xr[1] - xr[0]) // 8)
    for e in range(xr[0], xr[1] + 1, step):
        x = left + pw * (e - xr[0]) / (xr[1] - xr[0])
        out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="#999"/>')
        out.append(_text(x, top + ph + 16, _tick(x_base, e), anchor="middle"))
    for e in range(yr[0], yr[1] + 1):
        y = top + ph * (1 - (e - yr[0]) / (yr[1] - yr[0]))
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(_text(left - 4, y + 4, _tick(10, e), anchor="end"))
    out.append(_text(left + pw / 2, top + ph + 32, x_label, anchor="middle"))
    out.append(
        f'<text {_FONT} x="12" y="{top + ph / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + ph / 2:.1f})">{escape(y_label)}</text>'
    )
    return "".join(out)


def _tick(base: int, e: int) -> str:
    value = float(base) ** e
    return f"{value:g}" if 1e-3 <= value < 1e6 else f"1e{e}" if base == 10 else f"2^{e}"


def _side_legend(items: list[tuple[str, str]], x: float, y: float) -> list[str]:
    out = []
    for i, (name, color) in enumerate(items):
        out.append(f'<rect x="{x:.1f}" y="{y + 16 * i - 9:.1f}" width="10" height="10" fill="{color}"/>')
        out.append(_text(x + 14, y + 16 * i, name[:18]))
    return out
