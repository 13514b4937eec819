"""Tables, pictures and the self-contained HTML report. The report opens offline: inline CSS, PNGs as data URIs, and
interactive Vega-Lite charts whose JavaScript (Vega, Vega-Lite, vega-embed) is inlined in the page; nothing is
fetched. Static pictures: wattbench/report/pictures.py; interactive charts: wattbench/report/charts.py."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattbench.report import charts
from wattbench.report.pictures import (
    load_order,
    plot_frontiers,
    plot_latency_cdf,
    plot_power_trace,
    plot_throughput_latency,
    plot_tokens_per_joule,
)
from wattbench.report.rows import head_to_head_rows


def report_frames(con, run_id: str) -> dict[str, pd.DataFrame]:
    """What the pictures and charts are drawn from, for one run:
    - points: one row per engine x workload x point, its repeats summarised with 95% intervals (sql/load_points.sql:
      <figure>, <figure>_lo, <figure>_hi), with the mean achieved concurrency, precision and tp of its repeats;
    - repeats: each repeat of a point (v_load_points: one row per load run) with the figures the pictures compare and
      its phase state, so that the pictures show every repeat beside the summary;
    - samples: the sampled GPU power; windows: each load run's steady-state window with its point, repeat and
      energy-counter W; requests: TTFT and E2E of successful requests sent inside a window, with their point."""
    from wattbench.warehouse import run_sql

    points = run_sql(con, "load_points", {"run_id": run_id})
    per_run = con.execute(
        "SELECT engine, workload, point_label, avg(achieved_concurrency) AS achieved_concurrency, "
        "any_value(precision) AS precision, any_value(tp) AS tp, any_value(n_gpus) AS n_gpus "
        "FROM v_load_points WHERE run_id = ? GROUP BY ALL",
        [run_id],
    ).df()
    if not points.empty:
        points = points.merge(per_run, on=["engine", "workload", "point_label"], how="left")
    slo = con.execute("SELECT slo_ttft_ms, slo_tpot_ms, slo_e2e_ms FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return {
        "points": points,
        "repeats": con.execute(
            "SELECT engine, workload, point_label, shape, concurrency, rate, repeat, output_tok_s, e2e_p50_ms, "
            "output_tokens_per_j, output_tokens_per_j_above_idle, achieved_concurrency, phase_state, prefills_per_step "
            "FROM v_load_points WHERE run_id = ? ORDER BY engine, workload, point_label, repeat",
            [run_id],
        ).df(),
        "capacity": con.execute("SELECT * FROM v_slo_capacity WHERE run_id = ? ORDER BY engine", [run_id]).df(),
        "slo": pd.DataFrame([dict(zip(("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms"), slo or (None, None, None)))]),
        "samples": con.execute(
            "SELECT deployment_id, gpu_uuid, t_ns, power_w FROM gpu_samples WHERE run_id = ? AND power_w IS NOT NULL",
            [run_id],
        ).df(),
        "windows": con.execute(
            "SELECT l.deployment_id, v.engine, v.workload, v.point_label, v.repeat, v.shape, v.concurrency, v.rate, "
            "l.window_start_ns, l.window_end_ns, v.window_s, v.mean_power_w "
            "FROM load_runs l JOIN v_load_points v USING (run_id, deployment_id, load_point_id) "
            "WHERE l.run_id = ? AND l.window_start_ns IS NOT NULL ORDER BY l.window_start_ns",
            [run_id],
        ).df(),
        "requests": con.execute(
            "SELECT v.engine, v.workload, v.point_label, v.shape, v.concurrency, v.rate, q.ttft_ms, q.e2e_ms "
            "FROM requests q JOIN v_load_points v USING (run_id, deployment_id, load_point_id) "
            "WHERE q.run_id = ? AND q.in_window AND q.error_kind IS NULL",
            [run_id],
        ).df(),
    }


def pictures(frames: dict[str, pd.DataFrame], label: str) -> dict[str, bytes]:
    """The static pictures of a run (PNG): what the Dagster UI shows and the HTML keeps as its static copy."""
    return {
        "throughput vs latency": plot_throughput_latency(frames["points"], label, frames.get("repeats")),
        "tokens per joule vs concurrency": plot_tokens_per_joule(frames["points"], label, frames.get("repeats")),
        "power trace": plot_power_trace(frames["samples"], frames["windows"], label),
        "TTFT CDF": plot_latency_cdf(frames["requests"], label, "ttft_ms"),
        "E2E CDF": plot_latency_cdf(frames["requests"], label, "e2e_ms"),
        "frontiers": plot_frontiers(frames["points"], frames.get("capacity"), label, slo_of(frames)),
    }


def slo_of(frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The run's SLO bounds (report_frames' `slo`), the ones it has."""
    slo = frames.get("slo")
    if slo is None or slo.empty:
        return {}
    return {k: float(v) for k, v in slo.iloc[0].items() if v is not None and pd.notna(v)}


def interactive_charts(frames: dict[str, pd.DataFrame], label: str) -> dict[str, dict[str, Any] | None]:
    """The interactive charts of a run (Vega-Lite specs; None where there is nothing to draw)."""
    return {
        "power trace": charts.power_chart(frames["samples"], frames["windows"], label),
        "TTFT CDF": charts.cdf_chart(frames["requests"], label, "ttft_ms"),
        "E2E CDF": charts.cdf_chart(frames["requests"], label, "e2e_ms"),
        "throughput vs latency": charts.throughput_latency_chart(frames["points"], label, frames.get("repeats")),
        "tokens per joule vs load": charts.tokens_per_joule_chart(frames["points"], label, frames.get("repeats")),
    }


def pivot_head_to_head(long: pd.DataFrame, origins: bool = True) -> pd.DataFrame:
    """Rows are figures (with units), columns are engines: rows.head_to_head_rows as a DataFrame indexed by
    figure (each measured cell names the load point it came from; a NULL cell says why it is NULL)."""
    if long.empty:
        return pd.DataFrame()
    engines, rows = head_to_head_rows(long.to_dict(orient="records"), origins)
    table = pd.DataFrame(rows, columns=["figure", *engines]).set_index("figure")
    table.columns.name = None
    return table


# --- per-point summary and engine contrasts ------------------------------------------------------------------

# The figures of the per-point summary, in order: metric of v_metric_catalog -> column heading (unit in brackets).
# Above-idle figures sit right after their total, each labelled.
POINT_FIGURES = [
    ("output_tok_s", "output tok/s (window)"),
    ("requests_s", "requests/s"),
    ("goodput_requests_s", "goodput at SLO (req/s)"),
    ("output_tokens_per_j", "tokens per joule, total (tok/J)"),
    ("output_tokens_per_j_above_idle", "tokens per joule, above idle (tok/J)"),
    ("mean_power_w", "power, deployment, energy counter (W)"),
    ("above_idle_power_w", "power above idle, deployment (W)"),
    ("counter_w_per_gpu", "power per GPU, energy counter (W)"),
    ("usd_per_1m_output_tokens", "$ per 1M output tokens, GPU-hours ($)"),
    ("energy_usd_per_1m_output_tokens", "energy $ per 1M output tokens ($)"),
    ("j_per_request", "energy per request, total (J)"),
    ("j_per_request_above_idle", "energy per request, above idle (J)"),
    ("j_per_output_token", "energy per output token, total (J)"),
    ("j_per_output_token_above_idle", "energy per output token, above idle (J)"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("tpot_p50_ms", "TPOT p50 (ms)"),
    ("tpot_p99_ms", "TPOT p99 (ms)"),
    ("e2e_p50_ms", "E2E p50 (ms)"),
    ("e2e_p99_ms", "E2E p99 (ms)"),
]

# The figures the engine-contrast table shows first (every figure is in the full table).
CONTRAST_HEADLINES = (
    "output_tok_s",
    "goodput_requests_s",
    "output_tokens_per_j",
    "output_tokens_per_j_above_idle",
    "usd_per_1m_output_tokens",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "e2e_p50_ms",
)


MIXED_PHASE_NOTE = "two phase states: the mean mixes them, not a typical figure"


def phase_cell(states: Any, mixed: Any) -> str:
    """The phase states of a point's repeats as the tables print them: 'spread x3'; a point whose repeats fell in
    both states says that its mean is no typical figure; NULL where no repeat had a phase verdict."""
    if states is None or (isinstance(states, float) and states != states):
        return "NULL"
    return f"{states}: {MIXED_PHASE_NOTE}" if isinstance(mixed, (bool, np.bool_)) and mixed else str(states)


def point_summary_table(figures: pd.DataFrame, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per engine x point, its figures as 'estimate [lo, hi]' (the 95% interval; the bare estimate where
    there is none), from sql/point_figures.sql's long form; rows in the query's order (load order). With `points`
    (sql/load_points.sql), a column gives the phase states of its repeats (phase_cell)."""
    if figures.empty:
        return pd.DataFrame()
    f = figures[figures["metric"].isin([m for m, _ in POINT_FIGURES])].copy()
    f["point"] = f["workload"].astype(str) + ":" + f["point_label"].astype(str)
    f["cell"] = [charts.with_interval(r["estimate"], r["lo"], r["hi"]) for _, r in f.iterrows()]
    rows = f.drop_duplicates(["engine", "point"])[["engine", "point", "repeats"]]
    wide = f.pivot_table(index=["engine", "point"], columns="metric", values="cell", aggfunc="first")
    table = rows.merge(wide.reset_index(), on=["engine", "point"], how="left")
    headings = {m: h for m, h in POINT_FIGURES}
    cols = ["engine", "point", "repeats"] + [m for m, _ in POINT_FIGURES if m in table]
    if points is not None and not points.empty and "phase_states" in points:
        key = points["workload"].astype(str) + ":" + points["point_label"].astype(str)
        cells = {
            (e, k): phase_cell(s, m)
            for e, k, s, m in zip(points["engine"], key, points["phase_states"], points["mixed_phase"])
        }
        table["phase"] = [cells.get((e, p), "NULL") for e, p in zip(table["engine"], table["point"])]
        cols.insert(3, "phase")
    table = table[cols].rename(
        columns={"engine": "engine config", "point": "workload:point", "phase": "phase of the repeats", **headings}
    )
    return table.fillna("NULL").reset_index(drop=True)


def interval_methods(figures: pd.DataFrame) -> list[str]:
    """How the intervals of a run were made, one line per method (from v_point_figures.method)."""
    if figures.empty or "method" not in figures:
        return []
    return sorted({str(m) for m in figures["method"].dropna()})


def contrasts_table(
    contrasts: pd.DataFrame, points: pd.DataFrame | None = None, headlines: bool = True
) -> pd.DataFrame:
    """Engines compared at each point they share (sql/engine_contrasts.sql): the ratio first / second with its 95%
    interval where repeats pair up, and the finding ('<engine> better' or 'no significant difference'); points in
    load order, figures in catalogue order."""
    if contrasts.empty:
        return pd.DataFrame()
    c = contrasts[contrasts["metric"].isin(CONTRAST_HEADLINES)] if headlines else contrasts
    if c.empty:
        return pd.DataFrame()
    c = c.copy()
    if points is not None and not points.empty:
        order = load_order(points.drop_duplicates(["workload", "point_label"]))
        rank = {(r["workload"], r["point_label"]): i for i, (_, r) in enumerate(order.iterrows())}
        c["_rank"] = [rank.get((w, p), len(rank)) for w, p in zip(c["workload"], c["point_label"])]
        c = c.sort_values("_rank", kind="stable")

    def ratio(r) -> str:
        lo, hi = r["ratio_lo"], r["ratio_hi"]
        if lo is not None and hi is not None and lo == lo and hi == hi:
            return f"x{r['ratio']:.3f} [{lo:.3f}, {hi:.3f}]"
        if r["ratio"] == r["ratio"] and r["ratio"] is not None:
            return f"x{r['ratio']:.3f} (no interval)"  # the finding says why: it was not tested
        return "NULL"

    return pd.DataFrame(
        {
            "workload:point": c["workload"].astype(str) + ":" + c["point_label"].astype(str),
            "engines (first / second)": c["engine"].astype(str) + " / " + c["other"].astype(str),
            "figure": [f"{f} ({u})" if u else f for f, u in zip(c["figure"], c["unit"])],
            "ratio [95% interval]": [ratio(r) for _, r in c.iterrows()],
            "finding": c["finding"].astype(str),
            "how": c["method"].astype(str) + ", " + c["pairs"].astype(str) + " repeat(s)",
        }
    ).reset_index(drop=True)


def markdown_table(df: pd.DataFrame, index: bool = False) -> str:
    return df.to_markdown(index=index, floatfmt=".4g") if not df.empty else "_no rows_"


def html_table(df: pd.DataFrame, index: bool = False, empty: str = "no rows") -> str:
    if df.empty:
        return f"<p>{html.escape(empty)}</p>"
    return df.to_html(index=index, escape=True, na_rep="NULL", float_format=lambda v: f"{v:.4g}")


def b64(png: bytes) -> str:
    return base64.b64encode(png).decode()


def write_html(
    path: Path,
    title: str,
    source: str,
    run_id: str,
    sections: list[tuple[str, str]],
    plots: dict[str, bytes],
    notes: list[str],
    interactive: dict[str, dict[str, Any] | None] | None = None,
) -> Path:
    """One self-contained HTML file that opens offline and fetches nothing: inline CSS; `interactive` Vega-Lite
    specs rendered by vega-embed, whose JavaScript (with Vega and Vega-Lite) is inlined in the page; `plots` (PNG)
    as data: URIs. `sections`: (heading, HTML body) in order; the interactive charts follow them, then the static
    pictures (folded), then the notes. Each chart's view is kept in window.wattbenchCharts[<div id>]."""
    banner = (
        "<div class='banner emulated'>EMULATED: every figure below comes from wattbench's built-in engine "
        "emulator and its modelled GPU telemetry, not from real GPUs.</div>"
        if source == "emulated"
        else "<div class='banner measured'>MEASURED on real engines and GPUs.</div>"
    )
    css = (
        "\n"
        "    body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;"
        "max-width:1280px}\n"
        "    h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd} "
        "h3{font-size:1.05em}\n"
        "    table{border-collapse:collapse;font-size:13px;margin:8px 0} "
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}\n"
        "    th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}\n"
        "    .banner{padding:10px 14px;font-weight:600;border-radius:4px;margin:12px 0}\n"
        "    .emulated{background:#fff3cd;border:1px solid #e0b000} "
        ".measured{background:#d4edda;border:1px solid #2e7d32}\n"
        "    .plots img{max-width:49%;margin:4px 0} .meta{color:#666;font-size:12px} .scroll{overflow-x:auto}\n"
        "    .chart{margin:12px 0 28px 0;min-height:120px} .chart-error{color:#b00020}\n"
        "    "
    )
    interactive = interactive or {}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{css}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        banner,
        f"<p class='meta'>run {html.escape(run_id)} &middot; source: {html.escape(source)}</p>",
    ]
    for heading, body in sections:
        parts += [f"<h2>{html.escape(heading)}</h2>", f"<div class='scroll'>{body}</div>"]
    specs = {}
    if interactive:
        parts.append("<h2>Interactive charts</h2>")
        parts.append(
            "<noscript><p>The interactive charts need JavaScript; the static pictures below show the same "
            "figures.</p></noscript>"
        )
        for i, (name, spec) in enumerate(interactive.items()):
            div = f"chart-{i}"
            if spec is None:
                parts.append(f"<p class='meta'>{html.escape(name)}: nothing to draw for this run</p>")
                continue
            specs[div] = spec
            parts.append(f"<div class='chart' id='{div}' data-chart='{html.escape(name, quote=True)}'></div>")
    parts += [
        "<h2>Pictures</h2>",
        (
            "<details><summary>the same figures as static pictures (PNG, as in the Dagster UI)</summary>"
            if specs
            else "<div>"
        ),
        "<div class='plots'>",
        *[
            f"<img alt='{html.escape(name)}' title='{html.escape(name)}' src='data:image/png;base64,{b64(png)}'>"
            for name, png in plots.items()
        ],
        "</div>",
        "</details>" if specs else "</div>",
        "<h2>Notes</h2><ul>",
        *[f"<li>{html.escape(n)}</li>" for n in notes],
        "</ul>",
    ]
    if specs:
        script, versions = charts.javascript_bundle()
        parts += [
            f"<p class='meta'>Charts: {html.escape(versions)}, inlined.</p>",
            f"<script>/* {versions} */\n{script}\n</script>",
            "<script>\n(function () {\n"
            f"  var specs = {charts.script_json(specs)};\n"
            "  window.wattbenchCharts = {};\n"
            "  Object.keys(specs).forEach(function (id) {\n"
            "    vegaEmbed('#' + id, specs[id], {renderer: 'canvas', actions: {export: true, source: false, "
            "compiled: false, editor: false}})\n"
            "      .then(function (r) { window.wattbenchCharts[id] = r.view; })\n"
            "      .catch(function (e) { var d = document.getElementById(id); d.className += ' chart-error'; "
            "d.textContent = 'chart failed to render: ' + e; });\n"
            "  });\n})();\n</script>",
        ]
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def md_image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{b64(png)})"


def summarize_notes(source: str, plan_label: str, prices_label: str, min_window_s: float | None) -> list[str]:
    notes = [
        "Latency percentiles: successful requests sent inside the steady-state window; throughput: output tokens "
        "whose events arrived inside the window over the window length (docs/MEASUREMENT.md).",
        "Energy: GPU energy counter read at the window edges, summed over the deployment's GPUs; tokens per joule = "
        "output tokens in the window / that energy.",
        f"Cost: {prices_label}; $ per 1M output tokens = GPU-hour price x GPUs / (output tok/s x 3600) x 1e6; energy "
        "cost (second line) = kWh per 1M output tokens x $/kWh x PUE.",
        "Every report is a query in sql/ (docs/REPORTS.md): load_points, head_to_head, capacity_plan, hybrid_plan, "
        "regressions, compare_runs.",
    ]
    if source == "emulated":
        notes.insert(0, "Emulated run: timing, power and energy come from the emulator's performance and power model.")
    if min_window_s is not None and min_window_s < 20:
        notes.append(
            f"Shortest steady-state window {min_window_s:.1f} s: energy claims want >= 20 s (flagged by validation)."
        )
    notes.append(f"Plan: {plan_label}.")
    return notes


# --- Capacity plan -------------------------------------------------------------------------------------------

CAPACITY_ASSUMPTIONS = [
    "Per-replica capacity = the 95% lower bound of a load point's goodput (requests/s meeting every SLO, over its "
    "repeats; one repeat: its measured value), at the point with the highest such bound among those whose p99 "
    "TTFT/TPOT/E2E meet the plan's SLO on their 95% upper bounds (no interval: the worst repeat), at the measured "
    "workload lengths nearest the profile's; sized_on names the point and sized_bound the bounds. Never the best "
    "repeat. It is a demonstrated rate: a higher, unmeasured load may also meet the SLO, so sweep further. Where the "
    "plan has an SLO capacity search of the config (slo_capacity), it sizes instead: the goodput's lower 95% bound "
    "at the capacity found, scaled down by capacity_lo / capacity when the capacity's interval reaches below the "
    "load measured.",
    "Replicas = ceil(QPS / capacity); GPUs = replicas x GPUs per deployment; a month is 730 h; the elastic pool runs "
    "burst_hours_per_day x 730/24 h a month and is sized for (peak - steady) QPS with no credit for spare baseline "
    "capacity.",
    "Energy line = replicas x the deployment's measured mean W (energy counter) at the sizing point x hours x $/kWh x "
    "PUE: an upper bound, since replicas below their sizing load draw less.",
    "Lengths are not rescaled: when the profile's lengths differ from the measured ones the note says so.",
    "Hybrid rule: baseline engine = highest capacity per GPU; elastic engine = lowest worst p99 TTFT under gamma/surge "
    "arrivals among configs meeting the SLO there (the baseline engine when none was measured under bursts).",
]
