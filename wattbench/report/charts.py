"""Interactive charts for the HTML report: Vega-Lite specs built with Altair, rendered in the page by vega-embed.

The JavaScript (Vega, Vega-Lite, vega-embed) is inlined into the report from vl-convert-python's bundle
(`vl_convert.javascript_bundle`, the bundle Altair itself inlines for `chart.save(..., inline=True)`), so the report
opens offline and fetches nothing. Data are inlined as values. The charts show the same point summaries as the
static pictures (wattbench/report/pictures.py), with the same colours, order and 95% intervals:
- power trace: total W of each deployment over time, steady-state windows shaded; drag to pan, wheel to zoom (x);
- TTFT and E2E CDFs: one panel per engine config, one line per point; hover shows the nearest quantile;
- throughput against latency: error bars on both axes, each config's Pareto frontier over fixed concurrency;
- tokens per joule against load: total and above idle side by side, error bars, open-loop points hollow.
Both comparisons also draw every repeat of a point as a small dot (a cross where its closed loop was bunched), as the
static pictures do; hovering one names its repeat and phase.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from wattbench.report.pictures import (
    engine_colors,
    interval_note,
    is_closed,
    load_order,
    pareto_frontier,
    point_colors,
    point_name,
    point_names,
    power_series,
    workload_key,
)

WIDTH = 820
# fixed concurrency: filled circles; open-loop arrivals (Poisson, gamma, surge, trace): hollow diamonds
_LOOP_SHAPE = alt.Shape(
    "loop:N",
    title="load",
    scale=alt.Scale(domain=["fixed concurrency", "open-loop arrivals"], range=["circle", "diamond"]),
    legend=alt.Legend(symbolStrokeColor="#555", symbolFillColor="#fff", symbolStrokeWidth=1.5),
)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: NaN/inf become null, numpy scalars plain Python."""
    out = []
    for row in df.to_dict(orient="records"):
        clean = {}
        for k, v in row.items():
            if isinstance(v, (np.integer,)):
                v = int(v)
            elif isinstance(v, (float, np.floating)):
                v = float(v) if math.isfinite(v) else None
            elif isinstance(v, (np.bool_,)):
                v = bool(v)
            elif v is pd.NA or v is pd.NaT:
                v = None
            clean[k] = v
        out.append(clean)
    return out


def _data(df: pd.DataFrame) -> alt.InlineData:
    return alt.InlineData(values=_records(df))


def _engine_scale(engines) -> alt.Scale:
    colors = engine_colors(engines)
    return alt.Scale(domain=list(colors), range=list(colors.values()))


def _fmt(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    v = float(v)
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def with_interval(v: Any, lo: Any, hi: Any) -> str | None:
    """'8212 [8140, 8284]'; the bare value without an interval."""
    s = _fmt(v)
    if s is None:
        return None
    a, b = _fmt(lo), _fmt(hi)
    return f"{s} [{a}, {b}]" if a is not None and b is not None else s


def _spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    return chart.to_dict()


def power_chart(samples: pd.DataFrame, windows: pd.DataFrame, label: str) -> dict[str, Any] | None:
    """Total W per deployment over the run with its load windows shaded, and each GPU's own trace (dashed) for a
    deployment on several GPUs; x zooms (wheel) and pans (drag)."""
    series = power_series(samples)
    if series.empty:
        return None
    t0 = samples["t_ns"].min()
    engine_of = (
        {d: e for d, e in zip(windows["deployment_id"], windows["engine"])}
        if not windows.empty and "engine" in windows
        else {}
    )
    series = series.assign(engine=series["deployment_id"].map(lambda d: engine_of.get(d, d)))
    scale = _engine_scale(series["engine"].unique())
    zoom = alt.selection_interval(name="zoom", bind="scales", encodings=["x"])
    x = alt.X("t_s:Q", title="seconds since the run's first sample")
    lines = (
        alt.Chart(_data(series))
        .mark_line(strokeWidth=1)
        .encode(
            x=x,
            y=alt.Y("power_w:Q", title="W, all GPUs of the deployment (sampled instant power)"),
            color=alt.Color("engine:N", scale=scale, title="engine config"),
            detail="deployment_id:N",
            tooltip=[
                alt.Tooltip("deployment_id:N", title="deployment"),
                alt.Tooltip("t_s:Q", title="t (s)", format=".1f"),
                alt.Tooltip("power_w:Q", title="power (W)", format=".0f"),
            ],
        )
        .add_params(zoom)
    )
    layers = [lines]
    gpus = power_series(samples, per_gpu=True)
    many = gpus.groupby("deployment_id")["gpu"].nunique()
    gpus = gpus[gpus["deployment_id"].isin(many[many > 1].index)]
    if not gpus.empty:  # tensor parallel: each GPU's own trace, dashed, under its deployment's total
        gpus = gpus.assign(engine=gpus["deployment_id"].map(lambda d: engine_of.get(d, d)))
        layers.append(
            alt.Chart(_data(gpus))
            .mark_line(strokeWidth=0.7, opacity=0.75, strokeDash=[4, 2])
            .encode(
                x=x,
                y="power_w:Q",
                color=alt.Color("engine:N", scale=scale, title="engine config"),
                detail="gpu:N",
                tooltip=[
                    alt.Tooltip("deployment_id:N", title="deployment"),
                    alt.Tooltip("gpu:N", title="GPU"),
                    alt.Tooltip("t_s:Q", title="t (s)", format=".1f"),
                    alt.Tooltip("power_w:Q", title="power of this GPU (W)", format=".0f"),
                ],
            )
        )
    if not windows.empty:
        w = windows.assign(
            start_s=(windows["window_start_ns"] - t0) / 1e9,
            end_s=(windows["window_end_ns"] - t0) / 1e9,
            point=[point_name(r) for _, r in windows.iterrows()],
        )
        rects = (
            alt.Chart(
                _data(w[["deployment_id", "engine", "point", "repeat", "start_s", "end_s", "window_s", "mean_power_w"]])
            )
            .mark_rect(opacity=0.13)
            .encode(
                x="start_s:Q",
                x2="end_s:Q",
                color=alt.Color("engine:N", scale=scale, title="engine config"),
                tooltip=[
                    alt.Tooltip("deployment_id:N", title="deployment"),
                    alt.Tooltip("point:N", title="load point"),
                    alt.Tooltip("repeat:Q", title="repeat"),
                    alt.Tooltip("window_s:Q", title="window (s)", format=".1f"),
                    alt.Tooltip("mean_power_w:Q", title="W over the window (energy counter)", format=".0f"),
                ],
            )
        )
        layers.insert(0, rects)
    chart = alt.layer(*layers).properties(
        width=WIDTH,
        height=280,
        title=alt.Title(
            f"GPU power over the run ({label})",
            subtitle="shaded: steady-state windows (hover for the energy-counter W); wheel zooms, drag pans; "
            "the trace is diagnosis, the energy counter is the figure of record",
        ),
    )
    return _spec(chart)


def cdf_rows(requests: pd.DataFrame, metric: str, max_points: int = 300) -> pd.DataFrame:
    """The empirical CDF of `metric` per (engine, point): every request up to `max_points`, else `max_points`
    evenly spaced sample quantiles (inverted CDF, so every x is an observed latency) plus the slowest request."""
    rows = []
    if requests.empty:
        return pd.DataFrame(columns=["engine", "point", "ms", "share", "n"])
    ok = requests.dropna(subset=[metric])
    one = ok["workload"].nunique() == 1
    for (engine, wl, pl), g in ok.groupby(["engine", "workload", "point_label"]):
        x = np.sort(g[metric].to_numpy(dtype=float))
        n = len(x)
        if n <= max_points:
            share = np.arange(1, n + 1) / n
            xs = x
        else:
            share = np.append(np.arange(1, max_points) / max_points, 1.0)
            xs = np.quantile(x, share, method="inverted_cdf")
        name = pl if one else f"{wl}:{pl}"
        rows.append(pd.DataFrame({"engine": engine, "point": name, "ms": xs, "share": share, "n": n}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["engine", "point", "ms", "share", "n"])


def cdf_chart(requests: pd.DataFrame, label: str, metric: str = "ttft_ms") -> dict[str, Any] | None:
    """CDF of TTFT or E2E per point, one panel per engine config; hover picks the nearest quantile; clicking a
    legend entry highlights that point."""
    rows = cdf_rows(requests, metric)
    if rows.empty:
        return None
    names = point_names(requests.dropna(subset=[metric]))
    scale = alt.Scale(domain=names, range=point_colors(len(names)))
    title = {"ttft_ms": "time to first token, TTFT", "e2e_ms": "end-to-end latency, E2E"}.get(metric, metric)
    key = metric.split("_")[0]
    hover = alt.selection_point(
        name=f"hover_{key}",
        on="pointerover",
        nearest=True,
        fields=["engine", "point", "ms"],
        empty=False,
        clear="pointerout",
    )
    pick = alt.selection_point(name=f"legend_{key}", fields=["point"], bind="legend")
    x = alt.X(
        "ms:Q", scale=alt.Scale(type="log", nice=False), title=f"{title} (ms, log scale)", axis=alt.Axis(format="~g")
    )
    y = alt.Y("share:Q", title="share of requests", axis=alt.Axis(format="%"))
    color = alt.Color("point:N", scale=scale, sort=names, title="load point")
    base = alt.Chart()
    line = base.mark_line(interpolate="step-after", strokeWidth=1.4).encode(
        x=x, y=y, color=color, opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15))
    )
    # Vega-Lite 6.4's nearest-point (voronoi) tooltips drop nominal fields, so the hovered point's name and values
    # are written beside it (text layer) and the tooltip carries the numbers.
    dots = (
        base.mark_point(filled=True, size=45)
        .encode(
            x=x,
            y=y,
            color=color,
            opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)),
            tooltip=[
                alt.Tooltip("ms:Q", title=f"{key.upper()} (ms)", format=".1f"),
                alt.Tooltip("share:Q", title="share of requests at or below", format=".1%"),
                alt.Tooltip("n:Q", title="requests (all repeats)"),
            ],
        )
        .add_params(hover)
    )
    text = base.mark_text(align="left", dx=8, dy=-8, fontSize=11, fontWeight="bold").encode(
        x=x, y=y, color=color, text="label:N", opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0))
    )
    rows["label"] = [
        f"{p}: {m:.1f} ms, {s:.1%} at or below" for p, m, s in zip(rows["point"], rows["ms"], rows["share"])
    ]
    engines = sorted(rows["engine"].unique())
    chart = (
        alt.layer(line.add_params(pick), dots, text, data=_data(rows))
        .properties(
            width=max(240, int(WIDTH / max(1, len(engines))) - 40),
            height=240,
        )
        .facet(column=alt.Column("engine:N", title=None, sort=engines))
        .properties(
            title=alt.Title(
                f"{title} CDF per load point ({label})",
                subtitle="successful requests sent inside the window, repeats pooled; hover for the nearest "
                "quantile, click a legend entry to highlight a point",
            )
        )
    )
    return _spec(chart)


def _point_rows(points: pd.DataFrame) -> pd.DataFrame:
    one = points["workload"].nunique() == 1
    df = load_order(points).copy()
    df["point"] = [point_name(r, one) for _, r in df.iterrows()]
    df["closed"] = is_closed(df["shape"])
    df["loop"] = np.where(df["closed"], "fixed concurrency", "open-loop arrivals")
    return df


# a repeat's dot: bunched closed loops as crosses, every other repeat a small circle
_PHASE_SHAPE = alt.Shape(
    "phase:N",
    title="repeat (dot)",
    scale=alt.Scale(domain=["spread or none", "bunched"], range=["circle", "cross"]),
    legend=alt.Legend(symbolStrokeColor="#555", symbolFillColor="#555", symbolOpacity=0.5),
)


def _repeat_dots(repeats: pd.DataFrame | None, x: str, y: str, one: bool) -> pd.DataFrame:
    """Every repeat with a figure on both axes: engine, point, repeat, its phase ('bunched' or 'spread or none') and
    the prefills a prefill step it was read from (docs/MEASUREMENT.md, "Step decomposition")."""
    cols = ["engine", "point", "repeat", "phase", "prefills", x, y]
    if repeats is None or repeats.empty or x not in repeats or y not in repeats:
        return pd.DataFrame(columns=cols)
    r = repeats.dropna(subset=[x, y]).copy()
    r["point"] = [point_name(row, one) for _, row in r.iterrows()]
    r["phase"] = np.where(r.get("phase_state") == "bunched", "bunched", "spread or none")
    r["prefills"] = r.get("prefills_per_step", np.nan)
    return r[cols]


def _dot_tooltip() -> list:
    return [
        alt.Tooltip("engine:N", title="engine config"),
        alt.Tooltip("point:N", title="load point"),
        alt.Tooltip("repeat:Q", title="repeat"),
        alt.Tooltip("phase:N", title="phase"),
        alt.Tooltip("prefills:Q", title="prefills a prefill step", format=".2f"),
    ]


def throughput_latency_chart(
    points: pd.DataFrame, label: str, repeats: pd.DataFrame | None = None
) -> dict[str, Any] | None:
    """Output tok/s against E2E p50 with 95% intervals on both axes (rules), each config's Pareto frontier over
    its fixed-concurrency points, one per workload (input and output lengths: pictures.workload_key), open-loop points
    hollow, off the line; every repeat a small dot; drag pans, wheel
    zooms."""
    data = points.dropna(subset=["e2e_p50_ms", "output_tok_s"]) if not points.empty else points
    if data.empty:
        return None
    df = _point_rows(data)
    df["tok_s_text"] = [
        with_interval(r["output_tok_s"], r.get("output_tok_s_lo"), r.get("output_tok_s_hi")) for _, r in df.iterrows()
    ]
    df["e2e_text"] = [
        with_interval(r["e2e_p50_ms"], r.get("e2e_p50_ms_lo"), r.get("e2e_p50_ms_hi")) for _, r in df.iterrows()
    ]
    df["frontier"] = df["engine"].astype(str) + " " + workload_key(df).astype(str)  # one line per config and workload
    front = pd.concat([pareto_frontier(g[g["closed"]]) for _, g in df.groupby("frontier")], ignore_index=True)
    cols = [
        "engine",
        "point",
        "loop",
        "closed",
        "repeats",
        "e2e_p50_ms",
        "e2e_p50_ms_lo",
        "e2e_p50_ms_hi",
        "output_tok_s",
        "output_tok_s_lo",
        "output_tok_s_hi",
        "tok_s_text",
        "e2e_text",
    ]
    scale = _engine_scale(df["engine"].unique())
    x = alt.X("e2e_p50_ms:Q", title="median end-to-end latency, E2E p50 (ms)", scale=alt.Scale(zero=False, padding=40))
    y = alt.Y("output_tok_s:Q", title="output throughput (tokens/s)", scale=alt.Scale(zero=False, padding=20))
    color = alt.Color("engine:N", scale=scale, title="engine config")
    zoom = alt.selection_interval(name="zoom_tl", bind="scales")
    pts = alt.Chart(_data(df[cols]))
    tooltip = [
        alt.Tooltip("engine:N", title="engine config"),
        alt.Tooltip("point:N", title="load point"),
        alt.Tooltip("loop:N", title="load"),
        alt.Tooltip("tok_s_text:N", title="output tok/s [95% interval]"),
        alt.Tooltip("e2e_text:N", title="E2E p50 ms [95% interval]"),
        alt.Tooltip("repeats:Q", title="repeats"),
    ]
    layers = [
        alt.Chart(
            _data(
                front[["engine", "frontier", "e2e_p50_ms", "output_tok_s"]]
                if not front.empty
                else pd.DataFrame(columns=["engine", "frontier", "e2e_p50_ms", "output_tok_s"])
            )
        )
        .mark_line(interpolate="step-after", opacity=0.55)
        .encode(x=x, y=y, color=color, detail="frontier:N"),
        pts.mark_rule().encode(x=alt.X("e2e_p50_ms_lo:Q"), x2="e2e_p50_ms_hi:Q", y=y, color=color),
        pts.mark_rule().encode(x=x, y=alt.Y("output_tok_s_lo:Q"), y2="output_tok_s_hi:Q", color=color),
        pts.mark_point(size=70, strokeWidth=1.6, opacity=1, filled=True)
        .encode(x=x, y=y, color=color, shape=_LOOP_SHAPE, tooltip=tooltip)
        .transform_filter("datum.closed")
        .add_params(zoom),
        pts.mark_point(size=70, strokeWidth=1.6, opacity=1, fill="white")
        .encode(x=x, y=y, color=color, shape=_LOOP_SHAPE, tooltip=tooltip)
        .transform_filter("!datum.closed"),
    ]
    dots = _repeat_dots(repeats, "e2e_p50_ms", "output_tok_s", data["workload"].nunique() == 1)
    if not dots.empty:
        layers.insert(  # under the points' markers, as on the tok/J chart: hovering a point gives its summary
            3,
            alt.Chart(_data(dots))
            .mark_point(size=22, opacity=0.5, filled=True)
            .encode(x=x, y=y, color=color, shape=_PHASE_SHAPE, tooltip=_dot_tooltip()),
        )
    chart = (
        alt.layer(*layers)
        .resolve_scale(shape="independent")
        .properties(
            width=WIDTH,
            height=380,
            title=alt.Title(
                f"Throughput against latency, Pareto frontier per config ({label})",
                subtitle=f"{interval_note(points, repeats)}; line: Pareto frontier over fixed concurrency; hollow: "
                "open-loop arrivals; hover a point for its name and figures; wheel zooms, drag pans",
            ),
        )
    )
    return _spec(chart)


def tokens_per_joule_chart(
    points: pd.DataFrame, label: str, repeats: pd.DataFrame | None = None
) -> dict[str, Any] | None:
    """Tokens per joule against concurrency, total and above idle side by side (one scale), 95% intervals, fixed-
    concurrency sweeps as lines, open-loop points hollow at their achieved concurrency, every repeat a small dot."""
    if points.empty:
        return None
    df = _point_rows(points)
    one = df["workload"].nunique() == 1
    parts = []
    for col, measure in (
        ("output_tokens_per_j", "total (GPU energy counter)"),
        ("output_tokens_per_j_above_idle", "above idle (idle W with the model loaded subtracted)"),
    ):
        if col not in df:
            continue
        p = df.dropna(subset=[col]).copy()
        p["measure"] = measure
        p["tok_j"], p["lo"], p["hi"] = p[col], p.get(f"{col}_lo"), p.get(f"{col}_hi")
        p["x"] = np.where(p["closed"], p["concurrency"], p.get("achieved_concurrency"))
        p["text"] = [with_interval(r["tok_j"], r["lo"], r["hi"]) for _, r in p.iterrows()]
        p["kind"] = "point"
        parts.append(p.dropna(subset=["x"]))
        if repeats is not None and not repeats.empty and col in repeats:
            closed = is_closed(repeats["shape"])
            placed = repeats.assign(x=np.where(closed, repeats["concurrency"], repeats["achieved_concurrency"]))
            dots = _repeat_dots(placed, "x", col, one).rename(columns={col: "tok_j"})
            parts.append(dots.assign(measure=measure, kind="repeat", closed=False))
    data = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if data.empty or not (data["kind"] == "point").any():
        return None
    data["closed"] = data["closed"].astype(bool)
    measures = list(dict.fromkeys(data["measure"]))
    xs = sorted({round(float(v), 1) if v < 10 else round(float(v)) for v in data["x"]})
    scale = _engine_scale(df["engine"].unique())
    closed_x = sorted({float(v) for v in data.loc[data["closed"], "x"]})
    x = alt.X(
        "x:Q",
        scale=alt.Scale(type="log", base=2, nice=False, domain=[min(xs) / 1.4, max(xs) * 1.4]),
        title="concurrent requests (open-loop: achieved)",
        axis=alt.Axis(values=closed_x or xs, format="~g"),
    )
    y = alt.Y("tok_j:Q", title="output tokens per joule (tok/J)")
    color = alt.Color("engine:N", scale=scale, title="engine config")
    tooltip = [
        alt.Tooltip("engine:N", title="engine config"),
        alt.Tooltip("point:N", title="load point"),
        alt.Tooltip("measure:N", title="tokens per joule"),
        alt.Tooltip("text:N", title="tok/J [95% interval]"),
        alt.Tooltip("x:Q", title="concurrency", format=".1f"),
        alt.Tooltip("repeats:Q", title="repeats"),
    ]
    base = alt.Chart()
    point, dot = "datum.kind == 'point'", "datum.kind == 'repeat'"
    layers = [
        base.mark_point(size=22, opacity=0.5, filled=True)
        .encode(x=x, y=y, color=color, shape=_PHASE_SHAPE, tooltip=_dot_tooltip())
        .transform_filter(dot),
        base.mark_line().encode(x=x, y=y, color=color, detail="engine:N").transform_filter(f"{point} && datum.closed"),
        base.mark_rule().encode(x=x, y=alt.Y("lo:Q"), y2="hi:Q", color=color).transform_filter(point),
        base.mark_point(size=60, strokeWidth=1.6, opacity=1, filled=True)
        .encode(x=x, y=y, color=color, shape=_LOOP_SHAPE, tooltip=tooltip)
        .transform_filter(f"{point} && datum.closed"),
        base.mark_point(size=60, strokeWidth=1.6, opacity=1, fill="white")
        .encode(x=x, y=y, color=color, shape=_LOOP_SHAPE, tooltip=tooltip)
        .transform_filter(f"{point} && !datum.closed"),
    ]
    if not (data["kind"] == "repeat").any():
        layers = layers[1:]
    cols = [
        "engine",
        "point",
        "loop",
        "closed",
        "measure",
        "x",
        "tok_j",
        "lo",
        "hi",
        "text",
        "repeats",
        "kind",
        "repeat",
        "phase",
        "prefills",
    ]
    data = data.reindex(columns=cols)
    chart = (
        alt.layer(*layers, data=_data(data[cols]))
        .resolve_scale(shape="independent")
        .properties(width=int(WIDTH / 2) - 40, height=300)
        .facet(column=alt.Column("measure:N", title=None, sort=measures))
        .properties(
            title=alt.Title(
                f"Energy efficiency against load ({label})",
                subtitle=f"{interval_note(points, repeats)}; hollow: open-loop arrivals at their achieved "
                "concurrency; "
                "hover a point for its name and figures",
            )
        )
    )
    return _spec(chart)


@functools.lru_cache(maxsize=1)
def javascript_bundle() -> tuple[str, str]:
    """Vega, Vega-Lite and vega-embed as one script (vl-convert-python's bundle, for Altair's Vega-Lite version),
    and a line naming the versions."""
    import vl_convert as vlc

    vl_version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])
    script = vlc.javascript_bundle(vl_version=vl_version)
    return script, (
        f"Vega {vlc.get_vega_version()}, Vega-Lite {alt.SCHEMA_VERSION}, vega-embed "
        f"{vlc.get_vega_embed_version()} (vl-convert-python bundle, Altair {alt.__version__})"
    )


def script_json(obj: Any) -> str:
    """JSON safe inside a <script> element: '</' and the HTML comment openers cannot end or alter it."""
    return (
        json.dumps(obj, allow_nan=False)
        .replace("</", "<\\/")
        .replace("<!--", "<\\!--")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
