"""`kwh report`: one self-contained HTML file with the charts GPU engineers look at.

Every chart is inline SVG drawn here (no JavaScript, no fonts or scripts from a network), so the file
opens on an air-gapped laptop; hovering a mark shows its details through SVG <title> tooltips.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from kwarehouse import views
from kwarehouse.answers import diff as diff_lib
from kwarehouse.answers import queries
from kwarehouse.store.warehouse import Warehouse

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
                         f'stroke="{_color(p["library"], libraries)}" stroke-width="1.5" class="useful" '
                         f'data-kernel-id="{_esc(p.get("kernel_id", ""))}">'
                         f'<title>{_esc(p["useful_label"])}</title></circle>')
        # data-* name the kernel and the time its size stands for (for scripts reading the chart)
        parts.append(f'<circle cx="{sx(p["x"]):.1f}" cy="{sy(p["y"]):.1f}" r="{radius:.1f}" '
                     f'fill="{_color(p["library"], libraries)}" fill-opacity="0.7" stroke="#333" stroke-width="0.5" '
                     f'class="executed" data-kernel-id="{_esc(p.get("kernel_id", ""))}" data-size-ns="{p["size"]:.0f}">'
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
        # the queries round what they show; 4 significant digits would cut 16,337.9 us to 1.634e+04
        if abs(value) >= 1e3:
            return f"{value:,.1f}".removesuffix(".0")
        return f"{value:,.4g}"
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
    views.compute_once(con, views.READ_BY_MANY_ANSWERS)
    # the filters are bound parameters of sql/shared/selected_runs.sql and selected_models.sql; a query
    # binds those it names
    def q(name: str, **extra):
        sql = queries.load(name)
        bound = {k: v for k, v in {**filters.params, **extra}.items() if f"${k}" in sql}
        return con.execute(sql, bound).fetchall()
    latest, sections = [], []
    try:
        # Real GPU time (kernel_time): timeline time where a model has a timeline on that GPU, else ncu
        # replay time. kernel_time adds up all of a model's runs, so --since keeps the models with a run
        # since that day rather than cutting their runs.
        gaps = _gaps_section(q)
        if gaps:
            sections.append(gaps)
        libraries = [r[0] for r in q("libraries")]
        if not libraries:
            sections.append("<p>No kernels match.</p>")
            raise _Empty
        sections.append(_model_efficiency_section(q))
        sections.append(_time_basis_section(q))
        # roofline per GPU (the roofline view: tensor FLOPs where counted or known from op shapes)
        for (gpu,) in q("roofline_gpus"):
            sections.extend(_roofline_sections(q, gpu, libraries))
        # kernels of exports without durations have no GPU time to draw: kernel_time says so as NULL
        popular = [r for r in q("popular_kernels") if r[2] is not None]
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
        shares = q("share_per_model")
        for column, title in (("library", "Library"), ("op_class", "Op class")):
            rows = [r[1:] for r in shares if r[0] == column]
            # libraries keep the roofline's colors; op classes sort by name
            keys = libraries if column == "library" else sorted({r[1] for r in rows})
            grouped: dict[str, list] = {}
            for model, key, pct in rows:
                grouped.setdefault(model, []).append((key, pct or 0.0))
            if grouped:
                sections.append(_section(f"{title} share of GPU time per model",
                                         f"each bar is one model's real GPU time (100 %: its timelines, or ncu replay "
                                         f"time where it has none), split by {column.replace('_', ' ')}.",
                                         stacked_svg(list(grouped.items()), keys, "share of GPU time (%)")))
        classes = q("bottleneck_share")
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
        stalls = q("stall_shares")
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
        sections.extend(_bottleneck_sections(q))
        sections.extend(_signal_sections(q))
        sections.extend(_trends(q))
        latest = q("latest_days")
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
    body = "".join(sections) or "<p>No kernels match.</p>"   # (no run matches the filters either)
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_esc(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_esc(title)}</h1><p class=\"how\">Generated {generated} from "
            f"{_esc(str(warehouse.root))}.</p>{body}</body></html>")


def _gaps_section(q) -> str:
    """Per model and GPU, what its data lacks and which answers that costs: no ncu counters, no
    timeline, runs without kernels, ncu launches without a duration, time ncu did not profile."""
    rows = []
    for model, gpu, tools, ncu_runs, timeline_runs, empty_runs, untimed, unprofiled_pct in q("data_gaps"):
        missing = []
        if empty_runs and empty_runs == ncu_runs + timeline_runs:
            # every run of it is empty: which tool is missing says nothing more
            rows.append((model, gpu, tools, f"{empty_runs} run(s), none holding a kernel (nothing ran on the GPU, "
                                             "or the export kept none): no answer for it"))
            continue
        if ncu_runs == 0:
            missing.append("no ncu counters: its kernels are 'not profiled' (no roofline dot, bottleneck class or "
                           "counter-based signal); profile it with ncu (kwh profile)")
        elif unprofiled_pct:
            missing.append(f"{unprofiled_pct:g} % of its GPU time is in kernels ncu did not profile")
        if timeline_runs == 0:
            missing.append("no timeline (nsys or PyTorch trace): its GPU time is ncu replay time and it has no "
                           "idle-time or launch-bound answer")
        if empty_runs:
            missing.append(f"{empty_runs} run(s) hold no kernel (nothing ran on the GPU, or the export kept none)")
        if untimed:
            missing.append(f"{untimed} ncu launch(es) without a duration (an ncu --metrics list or a one-section "
                           "page): no GPU time, and 'not enough data' verdicts")
        if missing:
            rows.append((model, gpu, tools, "; ".join(missing)))
    if not rows:
        return ""
    return _section("What the data lacks",
                    "per model and GPU, the sources it has and what is missing from them, with the answers that costs "
                    "(the charts below leave those parts out rather than guess them).",
                    _table(["model", "GPU", "sources", "missing"], rows))


def _bottleneck_sections(q) -> list[str]:
    """Per model, its ten kernels with the most real GPU time, their class and verdict."""
    rows = q("bottleneck_per_model")
    if not rows:
        return []
    return [_section("Bottleneck class per model",
                     "one table per model, whose ten kernels with the most real GPU time it lists (timeline time; ncu "
                     "replay time for models without a timeline): the class holding most of that time, with the unit "
                     "that limits it, its share of this model's GPU time (not the fleet's), whose ncu counters describe "
                     "it (this model's, borrowed from another model's run of the same kernel, or none: 'not profiled'), "
                     "ncu's own verdict (SOLBottleneck) and whether kwh agrees, the metric values that decided it "
                     "(cut-offs in the bottleneck_thresholds table) and the fix.",
                     _tables_under_headings(
                         ["kernel", "library", "bottleneck", "limiting unit", "GPU time (us)", "% of model GPU time",
                          "time basis", "counters from", "SM %", "memory %", "ncu verdict", "agrees with ncu",
                          "decided by (longest ncu launch)", "fix"],
                         [(f"{model} on {gpu}", [r[2:] for r in model_rows])
                          for (model, gpu), model_rows in _by_first([((r[0], r[1]), *r) for r in rows], strip=True)]))]


def _signal_sections(q) -> list[str]:
    """The kernel-time design signals per model, and apart from them the idle-time items: the two bases
    never add up (what_to_fix_first.basis)."""
    sections = []
    kernel_rows = q("kernel_signals_per_model")
    if kernel_rows:
        shown = [r for model, rows in _by_first(kernel_rows) for r in rows[:12]]
        sections.append(_section(
            "Design signals: what to fix first (kernel time)",
            "per model, patterns to act on ordered by the kernel time a fix would save (an estimate: its assumption "
            "is in the last column; each bounded by the kernel's time above its floor, one kernel's signals "
            "sharing that bound, a model's savings within its GPU time). GPU time and saving are this model's part "
            "of the signal (a signal on a kernel several models run is split by their time in it) and its shares "
            "are of this model's GPU time, not of the fleet's. Idle time is in the next table, never added to these.",
            _tables_under_headings(
                ["signal", "subject", "time basis", "GPU time (us)", "% of model GPU time", "est. saved (us)",
                 "est. saved, % of model GPU time", "models sharing it", "fix", "evidence", "assumption"],
                [(model, [r[1:] for r in rows]) for model, rows in _by_first(shown)])))
    idle_rows = q("idle_signals")
    if idle_rows:
        sections.append(_section(
            "Idle time between kernels: launch-bound runs",
            "GPU idle time a fix (CUDA Graphs, fewer launches) would give back, per run (the model's timeline runs "
            "averaged), on its own basis: 'idle time measured under the profiler, an upper bound' (the profiler "
            "stretches launch gaps) or 'idle time without the profiler' (an un-profiled timing of the same "
            "iterations). It is not kernel time and is never added to the savings above. The CPU launch interval is "
            "the median time between launches the trace shows: the evidence for launch-boundness.",
            _table(["rank", "model", "signal", "subject", "basis", "est. idle saved per run (us)",
                    "% of the run's span", "CPU launch interval (us)", "median gap (us)",
                    "un-profiled span (us)", "fix", "evidence", "assumption"], idle_rows)))
    return sections


def _tables_under_headings(columns: list[str], groups: list[tuple[str, list[tuple]]]) -> str:
    """One table (these columns) per group, under the group's heading: a model's rows, say."""
    return "".join(f"<h3>{_esc(heading)}</h3>" + _table(columns, rows) for heading, rows in groups)


def _by_first(rows: list[tuple], strip: bool = False) -> list[tuple[object, list[tuple]]]:
    """Rows grouped by their first column, in order of first appearance (strip: without that column)."""
    grouped: dict[object, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row[1:] if strip else row)
    return list(grouped.items())


def _unique_labels(items: list[tuple[str, str]], width: int = 40) -> list[str]:
    """Short bar labels (name, kernel id) that never read alike: names cut to `width`, and those that
    still collide get the start of their kernel id."""
    short = [name if len(name) <= width else name[:width - 1] + "…" for name, _ in items]
    return [f"{label} #{kernel_id[:6]}" if short.count(label) > 1 else label
            for label, (_, kernel_id) in zip(short, items)]


def _roofline_sections(q, gpu: str, libraries: list[str]) -> list[str]:
    """One GPU's roofline chart (kernel identities placed by the roofline view, under the tensor roof of
    each dtype present, the CUDA-core FP32/FP64 roofs, DRAM and L2), the top kernels ncu did not profile
    (the chart cannot show them) and the list of kernels it cannot place: no FLOPs are drawn at zero."""
    shown = []
    for (kernel_id, name, library, intensity, executed, ncu_ns, roof, limiter, pct_of_roof, l2_intensity, real_ns,
         time_basis, padding) in q("roofline_points", gpu_name=gpu):
        if not (intensity and executed and intensity > 0 and executed > 0):
            continue
        # dots sized by real GPU time (kernel_time); ncu replay time only where no kernel_time row has the kernel
        size_ns = real_ns if real_ns is not None else ncu_ns
        if real_ns is None:
            time_note = f"{size_ns / 1e3:,.1f} us ncu replay time (no kernel_time row: no timeline ran it)"
        elif time_basis == "timeline":
            time_note = f"{size_ns / 1e3:,.1f} us real GPU time (timeline)"
        else:   # its models have no timeline on this GPU (or some have): kernel_time says which
            time_note = f"{size_ns / 1e3:,.1f} us GPU time ({time_basis})"
        point = dict(x=intensity, y=executed, size=size_ns or 0, library=library, kernel_id=kernel_id,
                     label=f"{name} ({library}): {intensity:.3g} FLOP per DRAM byte"
                           + (f", {l2_intensity:.3g} per L2 byte" if l2_intensity else "")
                           + f", {_fmt(executed)}FLOP/s executed; roof {roof}, limited by {limiter} at "
                           f"{pct_of_roof or 0:.0f}% of it; {time_note}")
        # a padded kernel (executed tensor FLOPs above the useful ones from its shapes) gets its useful
        # point too; below half a percent the two points coincide on a log chart
        if padding and round(padding, 2) > 1.0:
            point.update(useful_y=executed / padding,
                         useful_label=f"{name}: useful {_fmt(executed / padding)}FLOP/s (op shapes), "
                                      f"executed {_fmt(executed)}FLOP/s: padding factor {padding:.2f}")
        shown.append(point)
    roofs = q("roofline_tensor_roofs", gpu_name=gpu)
    peaks = q("roofline_peaks", gpu_name=gpu)
    fp32, fp64, dram, l2 = peaks[0] if peaks else (None, None, None, None)
    compute_roofs = [(name, flops) for name, flops in [*roofs, ("fp32 CUDA-core", fp32), ("fp64 CUDA-core", fp64)]
                     if flops]
    memory_roofs = [(name, bandwidth) for name, bandwidth in (("DRAM", dram), ("L2", l2)) if bandwidth]
    sections = []
    if shown and compute_roofs and memory_roofs:
        sections.append(_section(
            f"Roofline: {gpu}",
            "each dot is a kernel identity, sized by its real GPU time (timeline; ncu replay time where no "
            "timeline ran it) and colored by library (legend below), at its FLOPs per DRAM byte and achieved "
            "FLOP/s: tensor-core FLOPs where ncu counted them or the op's shapes give them, plus CUDA-core FLOPs. "
            "A hollow circle under a dot, joined to it, is the same kernel's useful FLOP/s (from the op's shapes) "
            "where the tensor cores executed more (padded tiles or channels, computed-then-masked blocks: padding "
            "factor above 1). Flat lines: the dense tensor roof of each dtype present and "
            "the CUDA-core FP32/FP64 roofs (ncu's peaks at the clock it measured); slopes: DRAM, and L2 (dashed) "
            "where ncu measured it. The tooltip names the roof that limits the kernel (the lowest of its compute "
            "roof and each level's bandwidth x intensity) and the share of it reached.",
            roofline_svg(shown, compute_roofs, memory_roofs, libraries) + _legend(libraries)))
    unprofiled = q("unprofiled_kernels", gpu_name=gpu)
    if unprofiled:
        sections.append(_section(
            f"Top kernels ncu did not profile: {gpu}",
            "kernels that take real GPU time (timeline) but have no ncu launch on this GPU, so the roofline "
            "above cannot show them, by GPU time: profile them (kwh profile selects by real time) before "
            "reading the roofline as the whole picture.",
            _table(["kernel", "library", "op class", "launches", "GPU time (us)", "models"],
                   [(r[0], r[1], r[2], r[3], _us(r[4]), r[5]) for r in unprofiled])))
    unplaced = q("roofline_unplaced", gpu_name=gpu)
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


def _model_efficiency_section(q) -> str:
    """Per model and run: MFU, tensor busy, padding, throttling and where the span went (model_efficiency)."""
    rows = q("model_efficiency")
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
    rows = q("time_basis")
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
    days = [str(r[0]) for r in q("trend_days")]
    if len(days) < 2:
        return []
    rows = q("trend_kernels")
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
