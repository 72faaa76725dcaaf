"""The report as one HTML page: the views of `autotune.cli.reporting.data` with their figures inline.

The page is self-contained: its style is inline, its figures are inline SVG (`autotune.cli.reporting.svg`),
and it holds no script and no reference to any other file or address, so it opens from disk anywhere.
Each GPU is a ``<section class="gpu">``; inside, each op a ``<section class="op" data-op=OP>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape
from typing import TYPE_CHECKING

from autotune.cli.reporting import svg
from autotune.cli.reporting.data import Curves, GpuView, OpView, VerifyView

if TYPE_CHECKING:
    from autotune.db import SweepRecord

__all__ = ["render"]

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; }
td.num { text-align: right; }
.note { color: #666; font-size: 0.9em; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
svg.figure { background: #fff; border: 1px solid #eee; }
"""


def render(
    title: str, source: str, gpus: Sequence[GpuView], verifies: Sequence[VerifyView], version: str = ""
) -> str:
    """The page of `gpus` and `verifies`, read from the database `source`."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">{escape(source)} · written {now}'
        + (f" by autotune {escape(version)}" if version else "")
        + "</p>",
        _contents(gpus, verifies),
    ]
    for view in gpus:
        parts.append(_gpu(view))
    for i, v in enumerate(verifies):
        parts.append(_verify(i, v))
    if not gpus and not verifies:
        parts.append("<p>The database holds no winners and no profiles: nothing to show.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _contents(gpus: Sequence[GpuView], verifies: Sequence[VerifyView]) -> str:
    items = [f'<li><a href="#gpu-{v.gpu.fingerprint}">{escape(str(v.gpu))}</a></li>' for v in gpus]
    items += [
        f'<li><a href="#verify-{i}">verify: {escape(v.device or v.path)}</a></li>'
        for i, v in enumerate(verifies)
    ]
    return f"<ul>{''.join(items)}</ul>" if items else ""


def _gpu(view: GpuView) -> str:
    t = view.gpu.target
    peaks = (
        f"peaks {t.peak_tflops:g} TFLOP/s (dense bf16), {t.mem_gbps:g} GB/s"
        if t.peak_tflops > 0 and t.mem_gbps > 0
        else "peaks unknown"
    )
    toolchain = ", ".join(f"{k} {v}" for k, v in sorted(t.toolchain.items()))
    out = [
        f'<section class="gpu" id="gpu-{view.gpu.fingerprint}" data-fingerprint="{view.gpu.fingerprint}">',
        f"<h2>{escape(str(view.gpu))}</h2>",
        f'<p class="note">fingerprint {view.gpu.fingerprint} · {escape(peaks)}'
        + (f" · {escape(toolchain)}" if toolchain else "")
        + "</p>",
    ]
    if view.gpu.interpreter:
        out.append("<p class=\"note\">Triton's CPU interpreter: its timings are not a GPU's.</p>")
    if view.predicted:
        out.append(
            '<p class="note"><b>Predicted, not measured:</b> this GPU holds only the cost model\'s '
            "predictions of compile-only sweeps.</p>"
        )
    for op in view.ops:
        out.append(_op(view, op))
    if view.profiles:
        out.append("<h3>M profiles: the fastest candidate and the vendor library over M</h3>")
        out.append(_curve_figures(view.profiles))
    out.append(_cost(view))
    out.append("</section>")
    return "\n".join(out)


def _reference(op: str) -> str:
    """What an op's speed-ups are over: the vendor library, or the torch baseline of an op whose torch
    backend is only measured against and never served (the MoE's per-expert loop)."""
    from autotune.core.registry import is_served

    return "the vendor library" if is_served(op, "torch") else "its torch baseline"


def _op(view: GpuView, op: OpView) -> str:
    reference = _reference(op.op)
    values = {(c.family, c.M): c.speedup for c in op.cells}
    backends = {(c.family, c.M): c.backend for c in op.cells}
    tips = {
        (c.family, c.M): f"{c.family} M={c.M}: {c.config}, {c.time_us:.4g} µs"
        + (
            f", vendor {c.vendor_us:.4g} µs ({c.speedup:.3g}x)"
            if c.vendor_us and c.speedup
            else ", no vendor time"
        )
        for c in op.cells
    }
    points = [
        (
            c.intensity,
            c.tflops,
            c.backend,
            f"{c.family} M={c.M}: {c.config}, {c.tflops:.3g} TFLOP/s, {c.gbps:.4g} GB/s"
            + (f", {c.roof_fraction:.0%} of the roofline" if c.roof_fraction is not None else ""),
        )
        for c in op.cells
    ]
    t = view.gpu.target
    kind = "predicted" if view.predicted else "measured"
    with_vendor = [c.speedup for c in op.cells if c.speedup is not None]
    note = (
        f"{len(op.cells)} problems ({kind}); speed-up over {reference} known for {len(with_vendor)}, "
        f"above 1 on {sum(1 for x in with_vendor if x > 1.0)}"
    )
    return "\n".join(
        [
            f'<section class="op" data-op="{escape(op.op)}">',
            f"<h3>{escape(op.op)}</h3>",
            f'<p class="note">{escape(note)}</p>',
            '<div class="figures">',
            svg.heatmap(f"{op.op}: speed-up over {reference}", op.families, op.ms, values, tips),
            svg.category_grid(f"{op.op}: backend of each winner", op.families, op.ms, backends, tips),
            svg.roofline(f"{op.op}: roofline position of each winner", points, t.peak_tflops, t.mem_gbps),
            "</div>",
            "</section>",
        ]
    )


def _curve_figures(curves: Sequence[Curves]) -> str:
    return '<div class="figures">' + "".join(svg.curves(c.family, c.series) for c in curves) + "</div>"


def _cost(view: GpuView) -> str:
    out = ["<h3>Sweep cost</h3>"]
    if view.sweeps:
        items, rows = [], []
        for sw in sorted(view.sweeps, key=lambda s: s.id):
            wall = _wall_s(sw)
            total = sw.problems_total
            problems = f"{sw.problems_done or 0}/{total}" if total is not None else "-"
            trials = "-" if sw.trials_done is None else str(sw.trials_done)
            started = f"{sw.started_at:%Y-%m-%d %H:%M}"
            rows.append((str(sw.id), sw.name, sw.status, sw.host, started, f"{wall:.1f}", problems, trials))
            items.append((f"#{sw.id} {sw.name}", wall, f"({trials} trials)"))
        out.append(svg.bars("wall time of each sweep", items, "s"))
        head = ("sweep", "name", "state", "host", "started", "wall s", "problems", "trials")
        out.append(_table("sweeps", head, rows, numeric=5))
    else:
        out.append('<p class="note">No sweep of this GPU is recorded (imported or older trials only).</p>')
    if view.costs:
        cost_head = ("op", "source", "trials", "ok", "compile s", "measure s")
        cost_rows = [
            (c.op, c.source, str(c.trials), str(c.ok), f"{c.compile_s:.1f}", f"{c.measure_s:.1f}")
            for c in view.costs
        ]
        out.append(_table("costs", cost_head, cost_rows, numeric=2))
    return "\n".join(out)


def _table(kind: str, head: Sequence[str], rows: Sequence[Sequence[str]], numeric: int) -> str:
    """An HTML table of class `kind`; the columns from index `numeric` on are numbers, aligned right."""
    cells = ["<tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        tds = (
            f'<td class="num">{escape(v)}</td>' if i >= numeric else f"<td>{escape(v)}</td>"
            for i, v in enumerate(row)
        )
        cells.append("<tr>" + "".join(tds) + "</tr>")
    return f'<table class="{kind}">' + "".join(cells) + "</table>"


def _wall_s(sw: SweepRecord) -> float:
    """A sweep's wall time: to its end, else to its last heartbeat (a sweep still running or killed)."""
    start = sw.started_at
    end = sw.finished_at or sw.heartbeat_at or start
    if end.tzinfo is None and start.tzinfo is not None:
        end = end.replace(tzinfo=start.tzinfo)
    elif start.tzinfo is None and end.tzinfo is not None:
        start = start.replace(tzinfo=end.tzinfo)
    return max(0.0, (end - start).total_seconds())


def _verify(index: int, v: VerifyView) -> str:
    head = f"verify: {v.device or 'unknown device'}"
    verdict = "every row at or above" if v.ok else "some rows under"
    return "\n".join(
        [
            f'<section class="verify" id="verify-{index}">',
            f"<h2>{escape(head)}</h2>",
            f'<p class="note">{escape(v.path)}: the served call and the vendor library over M; '
            f"{verdict} the threshold {v.min_ratio:g} (vendor time / served time).</p>",
            _curve_figures(v.curves),
            "</section>",
        ]
    )
