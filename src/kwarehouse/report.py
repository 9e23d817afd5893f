"""`kwh report`: one self-contained HTML file with the charts GPU engineers look at.

Every chart is inline SVG drawn here (no JavaScript, no fonts or scripts from a network), so the file
opens on an air-gapped laptop; hovering a mark shows its details through SVG <title> tooltips.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from kwarehouse import diff as diff_lib
from kwarehouse.store import Warehouse

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f"]
# Twenty distinct colours for the warp stall reasons (19 today): no two reasons share one.
STALL_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
                 "#f7b6d2", "#393b79", "#dbdb8d", "#9edae5"]
WIDTH, HEIGHT = 760, 420
MARGIN = dict(left=80, right=20, top=20, bottom=55)


@dataclass
class Filters:
    model: str | None = None
    gpu: str | None = None
    since: str | None = None   # YYYY-MM-DD: runs of this day or later

    def where(self, alias: str = "") -> str:
        """SQL condition on a table with model, gpu and run_id columns (values are bound, not pasted)."""
        prefix = f"{alias}." if alias else ""
        parts = ["($model IS NULL OR {p}model = $model)", "($gpu IS NULL OR {p}gpu = $gpu)",
                 "($since IS NULL OR {p}run_id IN (SELECT run_id FROM runs WHERE "
                 "coalesce(run_date, CAST(ingested_at AS DATE)) >= CAST($since AS DATE)))"]
        return " AND ".join(p.format(p=prefix) for p in parts)

    @property
    def params(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "since": self.since}


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _color(name: str, names: list[str], palette: list[str] = PALETTE) -> str:
    return palette[names.index(name) % len(palette)] if name in names else "#999999"


def _fmt(value: float) -> str:
    """1.2k, 3.4M, 5.6G, 7.8T: tick labels."""
    for factor, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def _frame(title_x: str, title_y: str, body: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    left, top, bottom = MARGIN["left"], MARGIN["top"], MARGIN["bottom"]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img">'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>{body}'
            f'<text x="{left + (width - left - MARGIN["right"]) / 2}" y="{height - 12}" text-anchor="middle" '
            f'class="axis">{_esc(title_x)}</text>'
            f'<text transform="translate(16,{top + (height - top - bottom) / 2}) rotate(-90)" text-anchor="middle" '
            f'class="axis">{_esc(title_y)}</text></svg>')


def roofline_svg(points: list[dict], compute_roofs: list[tuple[str, float]], memory_roofs: list[tuple[str, float]],
                 libraries: list[str]) -> str:
    """Log-log roofline of one GPU: points (x = FLOP per DRAM byte, y = achieved FLOP/s, size, library,
    label; useful_y and useful_label where the executed FLOPs exceed the useful ones: a hollow point at
    the useful rate) under every compute roof (name, FLOP/s: each tensor dtype present and the CUDA-core FP32/FP64
    roofs) and memory roof (name, bytes/s: DRAM, and L2 where measured, dashed: it bounds a kernel at its
    L2 intensity, which the tooltip gives)."""
    top_flops = max(f for _, f in compute_roofs)
    dram = dict(memory_roofs).get("DRAM") or max(b for _, b in memory_roofs)
    x_values = [p["x"] for p in points] + [f / dram for _, f in compute_roofs]
    y_values = [p["y"] for p in points] + [p["useful_y"] for p in points if p.get("useful_y")] + \
        [f for _, f in compute_roofs]
    x_lo, x_hi = 10 ** math.floor(math.log10(min(x_values) / 2)), 10 ** math.ceil(math.log10(max(x_values) * 4))
    y_lo, y_hi = 10 ** math.floor(math.log10(min(y_values) / 2)), 10 ** math.ceil(math.log10(max(y_values) * 2))
    left, right, top, bottom = MARGIN["left"], WIDTH - MARGIN["right"], MARGIN["top"], HEIGHT - MARGIN["bottom"]
    def sx(x): return left + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (right - left)
    def sy(y): return bottom - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (bottom - top)
    parts = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" class="frame"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" class="frame"/>']
    for exponent in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        x = sx(10 ** exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">{_fmt(10 ** exponent)}</text>')
    for exponent in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        y = sy(10 ** exponent)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_fmt(10 ** exponent)}</text>')
    # memory roofs: a slope from the left edge up to the highest compute roof
    for name, bandwidth in memory_roofs:
        start_x = max(x_lo, y_lo / bandwidth)
        end_x = top_flops / bandwidth
        dashed = ' stroke-dasharray="6,4"' if name != "DRAM" else ""
        parts.append(f'<line x1="{sx(start_x):.1f}" y1="{sy(start_x * bandwidth):.1f}" x2="{sx(end_x):.1f}" '
                     f'y2="{sy(top_flops):.1f}" class="roof"{dashed}><title>{_esc(name)} roof {_fmt(bandwidth)}B/s'
                     f'</title></line><text x="{sx(start_x) + 4:.1f}" y="{sy(start_x * bandwidth) - 4:.1f}" '
                     f'class="tick">{_esc(name)} {_fmt(bandwidth)}B/s</text>')
    # compute roofs: flat from where the DRAM slope meets them; roofs within 2 % share a line (bf16 and
    # fp16 on most GPUs); a label too close to the one above moves left
    merged: list[tuple[str, float]] = []
    for name, flops in sorted(compute_roofs, key=lambda r: -r[1]):
        if merged and flops > 0.98 * merged[-1][1]:
            merged[-1] = (f"{merged[-1][0].replace(' tensor', '')}/{name}", merged[-1][1])
        else:
            merged.append((name, flops))
    last_y, shift = None, 0
    for name, flops in merged:
        ridge = flops / dram
        y = sy(flops)
        shift = shift + 230 if last_y is not None and y - last_y < 14 and shift == 0 else 0
        last_y = y
        parts.append(f'<line x1="{sx(ridge):.1f}" y1="{y:.1f}" x2="{sx(x_hi):.1f}" y2="{y:.1f}" '
                     f'class="roof"><title>{_esc(name)} roof {_fmt(flops)}FLOP/s; ridge {ridge:.3g} FLOP/B</title>'
                     f'</line><text x="{right - 4 - shift}" y="{y - 4:.1f}" text-anchor="end" class="tick">'
                     f'{_esc(name)} {_fmt(flops)}FLOP/s</text>')
    ridge = top_flops / dram
    parts.append(f'<line x1="{sx(ridge):.1f}" y1="{sy(top_flops):.1f}" x2="{sx(ridge):.1f}" y2="{bottom}" class="ridge"/>'
                 f'<text x="{sx(ridge) + 4:.1f}" y="{bottom - 6}" class="tick">ridge {ridge:.3g} FLOP/B</text>')
    biggest = max(p["size"] for p in points) or 1
    for p in sorted(points, key=lambda p: -p["size"]):
        radius = 3 + 12 * math.sqrt(p["size"] / biggest)
        if p.get("useful_y"):
            # a padded kernel: its useful FLOP/s (hollow) under the executed point, joined by a line
            parts.append(f'<line x1="{sx(p["x"]):.1f}" y1="{sy(p["y"]):.1f}" x2="{sx(p["x"]):.1f}" '
                         f'y2="{sy(p["useful_y"]):.1f}" stroke="#333" stroke-dasharray="2,2"/>'
                         f'<circle cx="{sx(p["x"]):.1f}" cy="{sy(p["useful_y"]):.1f}" r="{radius:.1f}" fill="none" '
                         f'stroke="{_color(p["library"], libraries)}" stroke-width="1.5" class="useful">'
                         f'<title>{_esc(p["useful_label"])}</title></circle>')
        parts.append(f'<circle cx="{sx(p["x"]):.1f}" cy="{sy(p["y"]):.1f}" r="{radius:.1f}" '
                     f'fill="{_color(p["library"], libraries)}" fill-opacity="0.7" stroke="#333" stroke-width="0.5">'
                     f'<title>{_esc(p["label"])}</title></circle>')
    return _frame("arithmetic intensity (FLOP per DRAM byte, log)", "achieved FLOP/s (log)", "".join(parts))


def bars_svg(items: list[tuple[str, float, str]], unit: str, title_x: str, colors: dict[str, str] | None = None) -> str:
    """Horizontal bars: (label, value, tooltip)."""
    height = MARGIN["top"] + MARGIN["bottom"] + 22 * len(items)
    left, right = 300, WIDTH - MARGIN["right"] - 60
    top = MARGIN["top"]
    most = max((v for _, v, _ in items), default=1) or 1
    parts = []
    for i, (label, value, tip) in enumerate(items):
        y = top + i * 22
        width = (right - left) * value / most
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" class="tick">{_esc(label[:48])}</text>'
                     f'<rect x="{left}" y="{y + 3}" width="{max(width, 1):.1f}" height="16" '
                     f'fill="{(colors or {}).get(label, PALETTE[0])}"><title>{_esc(tip)}</title></rect>'
                     f'<text x="{left + width + 4:.1f}" y="{y + 15}" class="tick">{_fmt(value)}{_esc(unit)}</text>')
    return _frame(title_x, "", "".join(parts), height=height)


def stacked_svg(rows: list[tuple[str, list[tuple[str, float]]]], keys: list[str], title_x: str,
                palette: list[str] = PALETTE) -> str:
    """Horizontal 100 % stacked bars: (row label, [(key, percent)])."""
    height = MARGIN["top"] + MARGIN["bottom"] + 26 * len(rows) + 22 * math.ceil(len(keys) / 5)
    left, right, top = 190, WIDTH - MARGIN["right"], MARGIN["top"]
    parts = []
    for i, (label, shares) in enumerate(rows):
        y, x = top + i * 26, left
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end" class="tick">{_esc(label[:28])}</text>')
        for key, pct in shares:
            width = (right - left) * pct / 100
            parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{max(width, 0.5):.1f}" height="18" '
                         f'fill="{_color(key, keys, palette)}"><title>{_esc(f"{label}: {key} {pct:.1f}%")}</title></rect>')
            x += width
    legend_top = top + 26 * len(rows) + 8
    for j, key in enumerate(keys):
        x, y = left + (j % 5) * 115, legend_top + (j // 5) * 20
        parts.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{_color(key, keys, palette)}"/>'
                     f'<text x="{x + 14}" y="{y + 9}" class="tick">{_esc(key[:16])}</text>')
    return _frame(title_x, "", "".join(parts), height=height + 10)


def lines_svg(series: dict[str, list[tuple[str, float]]], title_y: str) -> str:
    """Lines over days: {name: [(day, value)]}."""
    days = sorted({d for points in series.values() for d, _ in points})
    left, right, top, bottom = MARGIN["left"], WIDTH - MARGIN["right"] - 150, MARGIN["top"], HEIGHT - MARGIN["bottom"]
    most = max((v for points in series.values() for _, v in points), default=1) or 1
    def sx(day): return left + (days.index(day) / max(len(days) - 1, 1)) * (right - left)
    def sy(value): return bottom - value / most * (bottom - top)
    names = list(series)
    parts = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" class="frame"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" class="frame"/>']
    for day in days:
        parts.append(f'<text x="{sx(day):.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">{_esc(day)}</text>')
    for fraction in (0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{left - 6}" y="{sy(most * fraction) + 4:.1f}" text-anchor="end" class="tick">'
                     f'{_fmt(most * fraction)}</text>')
    for i, (name, points) in enumerate(series.items()):
        coords = " ".join(f"{sx(d):.1f},{sy(v):.1f}" for d, v in sorted(points))
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{_color(name, names)}" stroke-width="2">'
                     f'<title>{_esc(name)}</title></polyline>')
        for d, v in points:
            parts.append(f'<circle cx="{sx(d):.1f}" cy="{sy(v):.1f}" r="3" fill="{_color(name, names)}">'
                         f'<title>{_esc(f"{name} {d}: {_fmt(v)}s")}</title></circle>')
        parts.append(f'<text x="{right + 8}" y="{top + 14 + 16 * i}" fill="{_color(name, names)}" class="tick">'
                     f'{_esc(name[:24])}</text>')
    return _frame("day", title_y, "".join(parts))


def _table(columns: list[str], rows: list[tuple]) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(_cell(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else _fmt(value)
    return str(value)


def _us(ns: float | None) -> float | None:
    """ns as us to 0.1, or None: an export without durations (an ncu --metrics list, a single-section
    page) leaves GPU times unknown, and the report shows them blank."""
    return None if ns is None else round(ns / 1e3, 1)


def _section(title: str, how: str, content: str) -> str:
    return f'<section><h2>{_esc(title)}</h2><p class="how">How to read this: {_esc(how)}</p>{content}</section>'


def build(warehouse: Warehouse, filters: Filters | None = None) -> str:
    """The report's HTML text."""
    filters = filters or Filters()
    con = warehouse.connect()
    where, params = filters.where(), filters.params
    def q(sql: str, **extra):
        sql = sql.replace("{where}", where)
        bound = {k: v for k, v in {**params, **extra}.items() if f"${k}" in sql}
        return con.execute(sql, bound).fetchall()
    try:
        sections = []
        # Real GPU time (kernel_time): timeline time where a model has a timeline on that GPU, else ncu
        # replay time. kernel_time adds up all of a model's runs, so --since keeps the models with a run
        # since that day rather than cutting their runs.
        libraries = [r[0] for r in q(f"SELECT library FROM kernel_time WHERE {TIMED} GROUP BY 1 "
                                     "ORDER BY sum(gpu_time_ns) DESC")]
        if not libraries:
            latest = []
            raise _Empty
        sections.append(_model_efficiency_section(q))
        sections.append(_time_basis_section(q))
        # roofline per GPU (the roofline view: tensor FLOPs where counted or known from op shapes)
        for (gpu,) in q("SELECT DISTINCT gpu FROM roofline WHERE level = 'launch' AND {where} ORDER BY 1"):
            sections.extend(_roofline_sections(q, gpu, libraries))
        popular = q("SELECT coalesce((SELECT min(kernel_display) FROM kernel_launches l WHERE l.kernel_id = t.kernel_id), "
                    "(SELECT min(kernel_display) FROM kernels k WHERE k.kernel_id = t.kernel_id), min(kernel_base)), "
                    "library, sum(gpu_time_ns) AS ns, count(DISTINCT model) AS models, "
                    "sum(launches), kernel_id, min(kernel_signature), "
                    "CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END, "
                    "100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) "
                    f"/ nullif(sum(gpu_time_ns), 0) FROM kernel_time t WHERE {TIMED} "
                    "GROUP BY kernel_id, library ORDER BY ns DESC LIMIT 15")
        # kernels of exports without durations have no GPU time to draw: kernel_time says so as NULL
        popular = [r for r in popular if r[2] is not None]
        if popular:
            labels = _unique_labels([(r[0], r[5]) for r in popular])
            colors = {f"{label} [{r[3]}]": _color(r[1], libraries) for label, r in zip(labels, popular)}
            sections.append(_section(
                "Kernel popularity across models",
                "the kernels taking the most real GPU time in the selected runs (timeline time; ncu replay time for "
                "models without a timeline, named in the tooltip); [n] after a name is how many models use it, #id "
                "tells apart identities that share a name, the color is its library.",
                bars_svg([(f"{label} [{r[3]}]", r[2] / 1e3, f"{r[6] or r[0]} ({r[1]}): {r[2] / 1e3:,.1f} us, "
                           f"{r[4]} launches, {r[3]} model(s); time basis: {r[7]}; "
                           f"{r[8] or 0:.0f}% of it with ncu counters") for label, r in zip(labels, popular)],
                         " us", "GPU time (us)", colors)))
        for column, title in (("library", "Library"), ("op_class", "Op class")):
            shares = q(f"SELECT model, {column}, 100 * sum(gpu_time_ns) / sum(sum(gpu_time_ns)) OVER (PARTITION BY model) "
                       f"FROM kernel_time WHERE {TIMED} GROUP BY model, {column} ORDER BY model, 3 DESC")
            # libraries keep the roofline's colors; op classes sort by name
            keys = libraries if column == "library" else sorted({r[1] for r in shares})
            grouped: dict[str, list] = {}
            for model, key, pct in shares:
                grouped.setdefault(model, []).append((key, pct or 0.0))
            if grouped:
                sections.append(_section(f"{title} share of GPU time per model",
                                         f"each bar is one model's real GPU time (100 %: its timelines, or ncu replay "
                                         f"time where it has none), split by {column.replace('_', ' ')}.",
                                         stacked_svg(list(grouped.items()), keys, "share of GPU time (%)")))
        classes = q(f"SELECT model, bottleneck, share_pct FROM bottleneck_share WHERE {TIMED} AND gpu_time_ns > 0 "
                    "ORDER BY model, share_pct DESC")
        if classes:
            grouped = {}
            for model, bottleneck, pct in classes:
                grouped.setdefault(model, []).append((bottleneck, pct or 0.0))
            sections.append(_section("Bottleneck share of GPU time per model",
                                     "each bar is one model's real GPU time (100 %: its timelines, or ncu replay time "
                                     "where it has none), split by the bottleneck class of the ncu launches whose counters "
                                     "describe each kernel (borrowed from other runs and models where needed; "
                                     "'not profiled': no ncu launch of that kernel on that GPU). The bottleneck_share view "
                                     "has the numbers and the top kernel of each class.",
                                     stacked_svg(list(grouped.items()), sorted({r[1] for r in classes}),
                                                 "share of GPU time (%)")))
        stalls = q(_stall_shares_sql())
        if stalls:
            reasons = sorted({r[1] for r in stalls})
            grouped = {}
            for op_class, reason, pct in stalls:
                grouped.setdefault(op_class, []).append((reason, pct))
            sections.append(_section("Warp stall breakdown per op class",
                                     "why warps waited instead of issuing, as shares of all stall cycles (time-weighted; the warp_stalls view weights by instructions issued); "
                                     "long_scoreboard is memory latency, barrier is __syncthreads, math_pipe_throttle a busy pipe.",
                                     stacked_svg(list(grouped.items()), reasons, "share of stall cycles (%)",
                                                 STALL_PALETTE)))
        bottlenecks = q("SELECT model, kernel_base, library, bottleneck, limiting_unit, count(*) AS launches, "
                        "round(sum(duration_ns) / 1e3, 1), round(avg(sm_pct), 1), round(avg(memory_pct), 1), "
                        "arg_max(seed_class, coalesce(duration_ns, -1)), arg_max(ncu_verdict, coalesce(duration_ns, -1)), "
                        "bool_and(agrees_with_ncu), arg_max(decided_by, coalesce(duration_ns, -1)), "
                        "arg_max(fix, coalesce(duration_ns, -1)) "
                        "FROM bottleneck_class WHERE {where} "
                        "GROUP BY model, kernel_base, library, bottleneck, limiting_unit "
                        "QUALIFY row_number() OVER (PARTITION BY model ORDER BY sum(duration_ns) DESC NULLS LAST, "
                        "kernel_base) <= 10 ORDER BY model, 7 DESC NULLS LAST, 2")
        if bottlenecks:
            sections.append(_section("Bottleneck class per model", "per model (its ten longest), kernel and class, with "
                                     "the unit that limits it, ncu's own "
                                     "verdict (SOLBottleneck) and whether kwh agrees, the seed heuristic's class, the "
                                     "metric values that decided it (cut-offs in the bottleneck_thresholds table) and "
                                     "the fix.",
                                     _table(["model", "kernel", "library", "bottleneck", "limiting unit", "ncu launches",
                                             "ncu replay time (us)", "SM %", "memory %", "seed class", "ncu verdict",
                                             "agrees with ncu", "decided by (its longest launch)", "fix"], bottlenecks)))
        # shares of the GPU time of the models a signal names (not of the fleet): what a model owner reads
        signals = q("WITH model_time AS (SELECT model, sum(gpu_time_ns) AS ns FROM kernel_time GROUP BY model) "
                    "SELECT s.signal, s.subject, s.model_list, s.launches, "
                    "round(100 * s.gpu_time_ns / nullif(sum(m.ns), 0), 2), "
                    "round(100 * s.est_time_saved_ns / nullif(sum(m.ns), 0), 2), "
                    "round(s.est_time_saved_ns / 1e3, 1), s.fix, s.evidence, s.assumption "
                    "FROM design_signals s LEFT JOIN model_time m ON list_contains(string_split(s.model_list, ','), m.model) "
                    "WHERE s.source = 'calibrated' AND ($model IS NULL OR "
                    "list_contains(string_split(s.model_list, ','), $model)) "
                    "GROUP BY s.signal, s.subject, s.model_list, s.launches, s.gpu_time_ns, s.est_time_saved_ns, "
                    "s.fix, s.evidence, s.assumption, s.kernel_id "
                    "ORDER BY s.est_time_saved_ns DESC NULLS LAST, s.gpu_time_ns DESC LIMIT 25")
        if signals:
            sections.append(_section("Design signals: what to fix first", "patterns to act on, ordered by the GPU time a fix "
                                     "would save (an estimate: its assumption is in the last column), with the fix. "
                                     "Shares are of the GPU time of the models the signal names, not of the fleet.",
                                     _table(["signal", "subject", "models", "launches", "% of their models' GPU time",
                                             "est. saved, % of their models' GPU time", "est. time saved (us)", "fix",
                                             "evidence", "assumption"], signals)))
        sections.extend(_trends(q))
        latest = q("SELECT model, list(DISTINCT CAST(coalesce(run_date, CAST(ingested_at AS DATE)) AS VARCHAR)) "
                   "FROM runs WHERE tool = 'ncu' AND ($model IS NULL OR model = $model) AND ($gpu IS NULL OR gpu = $gpu) "
                   "GROUP BY model ORDER BY model")
    except _Empty:
        pass
    finally:
        con.close()
    for model, days in latest:
        days = sorted(days)
        if len(days) >= 2:
            sections.append(regressions_section(warehouse, model, days[-2], days[-1]))
    title = "kwarehouse report" + "".join(f" · {k} {v}" for k, v in filters.params.items() if v)
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(sections) or "<p>No kernels match.</p>"
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_esc(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_esc(title)}</h1><p class=\"how\">Generated {generated} from "
            f"{_esc(str(warehouse.root))}.</p>{body}</body></html>")


def _unique_labels(items: list[tuple[str, str]], width: int = 40) -> list[str]:
    """Short bar labels (name, kernel id) that never read alike: names cut to `width`, and those that
    still collide get the start of their kernel id."""
    short = [name if len(name) <= width else name[:width - 1] + "…" for name, _ in items]
    return [f"{label} #{kernel_id[:6]}" if short.count(label) > 1 else label
            for label, (_, kernel_id) in zip(short, items)]


def _roofline_sections(q, gpu: str, libraries: list[str]) -> list[str]:
    """One GPU's roofline chart (kernel identities placed by the roofline view, under the tensor roof of
    each dtype present, the CUDA-core FP32/FP64 roofs, DRAM and L2) and the list of kernels it cannot
    place: no FLOPs are drawn at zero."""
    # dots sized by real GPU time (kernel_time: timeline time, ncu replay time for models without one);
    # padded kernels (executed / useful FLOPs above 1.05) get a hollow point at their useful rate too
    placed = q("SELECT r.kernel_id, min(kernel_base), min(library), sum(flops) / nullif(sum(dram_bytes), 0), "
               "sum(flops) / nullif(sum(duration_ns) * 1e-9, 0), sum(duration_ns), arg_max(roof, duration_ns), "
               "arg_max(limiter, duration_ns), sum(pct_of_roof * duration_ns) / nullif(sum(duration_ns), 0), "
               "sum(flops) / nullif(sum(l2_bytes), 0), min(t.gpu_time_ns), "
               "sum(tensor_flops) FILTER (WHERE useful_flops > 0) / nullif(sum(useful_flops) FILTER "
               "(WHERE tensor_flops IS NOT NULL), 0) "
               "FROM roofline r LEFT JOIN (SELECT kernel_id, sum(gpu_time_ns) AS gpu_time_ns FROM kernel_time "
               f"WHERE gpu = $gpu_name AND {TIMED} GROUP BY kernel_id) t ON t.kernel_id = r.kernel_id "
               "WHERE level = 'launch' AND gpu = $gpu_name AND limiter IS NOT NULL AND {where} "
               "GROUP BY r.kernel_id", gpu_name=gpu)
    shown = []
    for r in placed:
        if not (r[3] and r[4] and r[3] > 0 and r[4] > 0):
            continue
        real_ns = r[10] if r[10] else r[5]
        point = dict(x=r[3], y=r[4], size=real_ns, library=r[2],
                     label=f"{r[1]} ({r[2]}): {r[3]:.3g} FLOP per DRAM byte"
                           + (f", {r[9]:.3g} per L2 byte" if r[9] else "")
                           + f", {_fmt(r[4])}FLOP/s executed; roof {r[6]}, limited by {r[7]} at {r[8] or 0:.0f}% of "
                           f"it; {real_ns / 1e3:,.1f} us real GPU time"
                           + ("" if r[10] else " (ncu replay time: no timeline ran it)"))
        if r[11] and r[11] > 1.05:
            point.update(useful_y=r[4] / r[11],
                         useful_label=f"{r[1]}: useful {_fmt(r[4] / r[11])}FLOP/s (op shapes), "
                                      f"executed {_fmt(r[4])}FLOP/s: padding factor {r[11]:.2f}")
        shown.append(point)
    roofs = q("SELECT roof, avg(peak_flops_per_s) FROM roofline WHERE level = 'launch' AND gpu = $gpu_name "
              "AND roof LIKE '% tensor' AND flops > 0 AND {where} GROUP BY roof ORDER BY 2 DESC", gpu_name=gpu)
    cuda_core = q("SELECT avg(peak_fp32_flops_per_s), avg(peak_fp64_flops_per_s), avg(peak_dram_bytes_per_s), "
                  "avg(peak_l2_bytes_per_s) FROM kernels WHERE gpu = $gpu_name AND {where}", gpu_name=gpu)
    fp32, fp64, dram, l2 = cuda_core[0] if cuda_core else (None, None, None, None)
    compute_roofs = [(name, flops) for name, flops in [*roofs, ("fp32 CUDA-core", fp32), ("fp64 CUDA-core", fp64)]
                     if flops]
    memory_roofs = [(name, bandwidth) for name, bandwidth in (("DRAM", dram), ("L2", l2)) if bandwidth]
    unplaced = q("SELECT min(kernel_base), min(library), min(unplaced_reason), count(*), sum(duration_ns) "
                 "FROM roofline WHERE level = 'launch' AND gpu = $gpu_name AND limiter IS NULL "
                 "AND unplaced_reason <> 'no floating-point work' AND {where} "
                 "GROUP BY kernel_id ORDER BY 5 DESC LIMIT 15", gpu_name=gpu)
    sections = []
    if shown and compute_roofs and memory_roofs:
        sections.append(_section(
            f"Roofline: {gpu}",
            "each dot is a kernel identity, sized by its real GPU time (timeline; ncu replay time where no "
            "timeline ran it) and colored by library (legend below), at its FLOPs per DRAM byte and achieved "
            "FLOP/s: tensor-core FLOPs where ncu counted them or the op's shapes give them, plus CUDA-core FLOPs. "
            "A hollow circle under a dot is the same kernel's useful FLOP/s (from the op's shapes) where the "
            "tensor cores executed more (padded tiles or channels, computed-then-masked blocks). Flat lines: the dense tensor roof of each dtype present and "
            "the CUDA-core FP32/FP64 roofs (ncu's peaks at the clock it measured); slopes: DRAM, and L2 (dashed) "
            "where ncu measured it. The tooltip names the roof that limits the kernel (the lowest of its compute "
            "roof and each level's bandwidth x intensity) and the share of it reached.",
            roofline_svg(shown, compute_roofs, memory_roofs, libraries) + _legend(libraries)))
    unprofiled = q("SELECT min(kernel_base), min(library), min(op_class), sum(launches), sum(gpu_time_ns), "
                   "string_agg(DISTINCT model, ', ') FROM kernel_time WHERE gpu = $gpu_name AND "
                   f"counter_match = 'not profiled' AND gpu_time_ns > 0 AND {TIMED} "
                   "GROUP BY kernel_id ORDER BY 5 DESC LIMIT 10", gpu_name=gpu)
    if unprofiled:
        sections.append(_section(
            f"Top kernels ncu did not profile: {gpu}",
            "kernels that take real GPU time (timeline) but have no ncu launch on this GPU, so the roofline "
            "above cannot show them, by GPU time: profile them (kwh profile selects by real time) before "
            "reading the roofline as the whole picture.",
            _table(["kernel", "library", "op class", "launches", "GPU time (us)", "models"],
                   [(r[0], r[1], r[2], r[3], _us(r[4]), r[5]) for r in unprofiled])))
    if unplaced:
        sections.append(_section(
            f"Kernels not on the roofline: {gpu}",
            "kernels the roofline cannot place, by ncu GPU time: 'tensor-core work not counted' is a GEMM, conv "
            "or attention kernel profiled without ncu's SpeedOfLight_HierarchicalTensorRooflineChart section "
            "and without op shapes (it would sit at its epilogue's ~0 FLOP/s); 'no FLOP count': ncu collected "
            "no FLOP counters. Kernels that do no floating-point work are left out.",
            _table(["kernel", "library", "why", "launches", "ncu time (us)"],
                   [(r[0], r[1], r[2], r[3], _us(r[4])) for r in unplaced])))
    return sections


def _stall_shares_sql() -> str:
    """Per op class, each stall reason's share of all stall cycles, time-weighted over the selected
    launches (the kernels table's stall_<reason> columns; the filters' {where} applies, unlike the
    warp_stalls view, which covers every run)."""
    from kwarehouse import schema
    reasons = [c[len("stall_"):] for c in schema.tables()["kernels"].arrow.names
               if c.startswith("stall_") and c != "stall_selected"]
    per_reason = " UNION ALL ".join(
        f"SELECT op_class, '{r}' AS reason, sum(stall_{r} * duration_ns) / nullif(sum(duration_ns) FILTER "
        f"(WHERE stall_{r} IS NOT NULL), 0) AS cycles FROM kernels WHERE {{where}} GROUP BY op_class" for r in reasons)
    return (f"SELECT op_class, reason, 100 * cycles / sum(cycles) OVER (PARTITION BY op_class) AS pct "
            f"FROM ({per_reason}) WHERE cycles > 0 ORDER BY op_class, pct DESC")


# kernel_time rows kept by the filters: it has no run_id, so --since keeps the models with a run since then
TIMED = ("($model IS NULL OR model = $model) AND ($gpu IS NULL OR gpu = $gpu) AND ($since IS NULL OR model IN "
         "(SELECT model FROM runs WHERE coalesce(run_date, CAST(ingested_at AS DATE)) >= CAST($since AS DATE)))")


def _model_efficiency_section(q) -> str:
    """Per model and run: MFU, tensor busy, padding, throttling and where the span went (model_efficiency)."""
    rows = q("SELECT model, left(run_id, 8), time_basis, round(mfu_pct, 1), round(mfu_busy_pct, 1), "
             "round(tensor_busy_pct, 1), round(padding_factor, 2), round(throttled_pct, 1), round(at_roof_pct, 1), "
             "round(below_roof_pct, 1), round(unplaced_pct, 1), round(idle_pct, 1), round(flops_coverage_pct, 1) "
             "FROM model_efficiency WHERE {where} ORDER BY model, time_basis DESC, run_id")
    return _section("Model efficiency",
                    "MFU: useful FLOPs (from the ops' shapes, not padded tiles) over the traced span at the datasheet "
                    "dense peak of each kernel's dtype; busy MFU over GPU busy time. Tensor busy: time in tensor-core "
                    "kernels. Padding factor: executed / useful tensor FLOPs. Throttled: time in big kernels that ran "
                    "below 90 % of the GPU's max clock. The span splits into kernels at their roof, below it, not "
                    "placed (no ncu counters) and idle. ncu-replay rows have no span: their shares are of ncu time.",
                    _table(["model", "run", "time basis", "MFU %", "busy MFU %", "tensor busy %", "padding factor",
                            "throttled %", "at roof %", "below roof %", "unplaced %", "idle %", "FLOPs known %"], rows))


def _time_basis_section(q) -> str:
    """Per model: what its GPU time rests on (timeline or ncu replay) and how much of it has counters."""
    rows = q("SELECT model, gpu, min(time_basis), sum(launches), round(sum(gpu_time_ns) / 1e3, 1), "
             "round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) "
             "/ nullif(sum(gpu_time_ns), 0), 1), "
             "round(100 * sum(CASE WHEN counter_source = 'other model' THEN gpu_time_ns ELSE 0 END) "
             f"/ nullif(sum(gpu_time_ns), 0), 1) FROM kernel_time WHERE {TIMED} GROUP BY model, gpu ORDER BY model, gpu")
    replay = sorted({r[0] for r in rows if r[2] == "ncu replay"})
    warning = (f"<p class=\"warn\">{_esc(', '.join(replay))}: these answers rest on ncu replay time only (no nsys "
               "or PyTorch timeline): ncu serialises kernels and flushes caches, so small kernels read longer than in "
               "the real run, and kernels outside its launch range are missing.</p>") if replay else ""
    return _section("What the GPU time rests on",
                    "time basis 'timeline' is real GPU time from nsys or PyTorch traces; 'ncu replay' is ncu's replayed "
                    "durations. Counter coverage is the share of that time whose kernels have ncu counters, this "
                    "model's own or borrowed from another model's run of the same kernel on the same GPU.",
                    warning + _table(["model", "GPU", "time basis", "launches", "GPU time (us)",
                                      "counter coverage %", "borrowed %"], rows))


class _Empty(Exception):
    """No kernel matches the filters: the report says so instead of drawing empty charts."""


def _legend(keys: list[str]) -> str:
    items = "".join(f'<span class="key"><span class="swatch" style="background:{_color(k, keys)}"></span>{_esc(k)}</span>'
                    for k in keys)
    return f'<div class="legend">{items}</div>'


def _trends(q) -> list[str]:
    days = [str(r[0]) for r in q("SELECT DISTINCT coalesce(r.run_date, CAST(r.ingested_at AS DATE)) FROM runs r "
                                 "WHERE r.tool = 'ncu' AND r.run_id IN (SELECT run_id FROM kernels WHERE {where}) ORDER BY 1")]
    if len(days) < 2:
        return []
    rows = q("SELECT k.kernel_base, CAST(coalesce(r.run_date, CAST(r.ingested_at AS DATE)) AS VARCHAR), "
             "sum(k.duration_ns) / count(DISTINCT k.run_id) * 1e-9 FROM kernels k JOIN runs r USING (run_id) "
             "WHERE k.kernel_base IN (SELECT kernel_base FROM kernels WHERE {where} GROUP BY 1 ORDER BY sum(duration_ns) "
             "DESC LIMIT 6) GROUP BY 1, 2")
    series: dict[str, list] = {}
    for name, day, seconds in rows:
        if seconds is not None:     # runs of exports without durations have no time to draw
            series.setdefault(name, []).append((day, seconds))
    if not series:
        return []
    out = [_section("Trend of the top kernels", "GPU time per run of the six biggest kernels, day by day (a run's day "
                    "is its manifest date); a rising line is a kernel getting slower or more frequent.",
                    lines_svg(series, "GPU time per run (s)"))]
    return out


def regressions_section(warehouse: Warehouse, model: str, before: str, after: str) -> str:
    result = diff_lib.diff(warehouse, f"model={model},date={before},tool=ncu", f"model={model},date={after},tool=ncu")
    rows = [(k.kernel_base, k.change, round(k.baseline_ns / 1e3, 1), round(k.candidate_ns / 1e3, 1),
             None if k.delta_pct is None else round(k.delta_pct, 1)) for k in result.kernels if k.change != "unchanged"][:15]
    return _section(f"Latest changes: {model} {before} → {after}", "kwh diff of the last two days with runs.",
                    _table(["kernel", "change", "before (us/run)", "after (us/run)", "delta %"], rows))


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:32px}.how{color:#555;font-size:13px;max-width:900px}
svg{display:block;margin:8px 0;border:1px solid #ddd}.axis{font-size:12px;fill:#333}.tick{font-size:10px;fill:#444}
.frame{stroke:#333;stroke-width:1}.grid{stroke:#eee;stroke-width:1}.roof{fill:none;stroke:#c00;stroke-width:2}
.ridge{stroke:#c00;stroke-dasharray:4 3}table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}th{background:#f4f4f4}
.warn{color:#a40;font-weight:600}.legend{font-size:12px}.key{margin-right:14px;white-space:nowrap}.swatch{display:inline-block;width:10px;height:10px;margin-right:4px}
"""
