"""Static pictures (PNG, matplotlib) for the Dagster UI and the HTML report's static section.

The pictures that compare points are drawn from the point summaries (one marker per engine x workload x point, the
repeats' mean or pooled percentile with its 95% interval: sql/load_points.sql; error bars are those intervals) and
show every repeat beside its summary as a small dot (a cross where the repeat's closed loop was bunched), so a point
whose repeats split into two groups is seen as such; a point whose repeats fell in both phase states has its
interval drawn dashed and its label says so (its mean mixes two states and is no typical figure).
Rules every picture follows (tests/reports/test_pictures.py checks them on the drawn figure):
- one colour per engine config, never shared (up to 20 from Tableau's palettes, then evenly spaced hues);
- points in load order (fixed concurrency ascending, then open-loop shapes by rate), never in string order;
- log axes carry plain numbers at the measured values or at 1-2-5 steps, no minor labels, no 2^k notation;
- point labels are placed where they overlap neither each other nor the markers (a leader line when moved out);
- open-loop points (Poisson, gamma, surge, trace) are drawn hollow and never joined to a closed-loop line.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

from wattbench_agent.loadgen.shapes import SHAPES  # noqa: E402

SHAPE_ORDER = {name: shape.order for name, shape in SHAPES.items()}  # the registry's order: closed loop first
CLOSED_LOOP = tuple(name for name, shape in SHAPES.items() if shape.closed_loop)  # the registry's trait


def is_closed(shape: pd.Series) -> pd.Series:
    """Rows of a closed-loop shape: drawn at their concurrency (open-loop ones at their achieved concurrency)."""
    return shape.isin(CLOSED_LOOP)


# --- order, names and colours ------------------------------------------------------------------------------------


def engine_colors(engines: Iterable[str]) -> dict[str, str]:
    """A distinct colour per engine config, in sorted order: Tableau 10, Tableau 20 beyond 10, evenly spaced hues
    beyond 20. The same engine gets the same colour in every picture and chart of a report."""
    names = sorted({str(e) for e in engines})
    if len(names) <= 10:
        cmap = [matplotlib.colors.to_hex(c) for c in colormaps["tab10"].colors]
    elif len(names) <= 20:
        cmap = [matplotlib.colors.to_hex(c) for c in colormaps["tab20"].colors]
    else:
        cmap = [matplotlib.colors.to_hex(colormaps["hsv"](i / len(names))) for i in range(len(names))]
    return {e: cmap[i] for i, e in enumerate(names)}


def point_colors(n: int) -> list[str]:
    """n distinct colours in load order (light load pale, heavy load dark): viridis sampled evenly."""
    if n <= 0:
        return []
    return [matplotlib.colors.to_hex(colormaps["viridis"](0.85 - 0.8 * i / max(n - 1, 1))) for i in range(n)]


def load_order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted as loads are: fixed concurrency ascending, then open-loop shapes by requested rate; then
    workload and point label. Works on point summaries and on per-request frames alike."""
    if df.empty:
        return df
    key = pd.DataFrame(
        {
            "_shape": df.get("shape", pd.Series(CLOSED_LOOP[0], index=df.index)).map(SHAPE_ORDER).fillna(9),
            "_conc": pd.to_numeric(df.get("concurrency", pd.Series(np.nan, index=df.index)), errors="coerce").fillna(0),
            "_rate": pd.to_numeric(df.get("rate", pd.Series(np.nan, index=df.index)), errors="coerce").fillna(0),
            "_wl": df.get("workload", pd.Series("", index=df.index)).astype(str),
            "_pl": df.get("point_label", pd.Series("", index=df.index)).astype(str),
        },
        index=df.index,
    )
    return df.loc[key.sort_values(["_shape", "_conc", "_rate", "_wl", "_pl"], kind="stable").index]


def point_names(df: pd.DataFrame) -> list[str]:
    """Each distinct point of a frame ('steady:c32', or 'c32' when the frame has one workload), in load order."""
    if df.empty:
        return []
    ordered = load_order(df.drop_duplicates(["workload", "point_label"]))
    one = df["workload"].nunique() == 1
    return [point_name(r, one) for _, r in ordered.iterrows()]


def point_name(row: Any, one_workload: bool = False) -> str:
    return str(row["point_label"]) if one_workload else f"{row['workload']}:{row['point_label']}"


def config_label(engine: str, df: pd.DataFrame) -> str:
    """'trtllm-like (fp8, tp8)': the engine config a series belongs to."""
    bits = []
    if "precision" in df and not df.empty and pd.notna(df["precision"].iloc[0]):
        bits.append(str(df["precision"].iloc[0]))
    if "tp" in df and not df.empty and pd.notna(df["tp"].iloc[0]):
        bits.append(f"tp{int(df['tp'].iloc[0])}")
    return f"{engine} ({', '.join(bits)})" if bits else str(engine)


def interval_note(points: pd.DataFrame, repeats: pd.DataFrame | None = None) -> str:
    """What the error bars are, from the repeats the summaries rest on (and, with `repeats` drawn, what the dots
    are and which points mix two phase states)."""
    if points.empty or "repeats" not in points:
        return "no load point"
    reps = pd.to_numeric(points["repeats"], errors="coerce").dropna()
    if reps.empty or reps.max() <= 1:
        return "one repeat per point: no figure has an interval (run-to-run variation not measured)"
    span = f"{int(reps.min())}" if reps.min() == reps.max() else f"{int(reps.min())}-{int(reps.max())}"
    note = f"bars: 95% intervals ({span} repeats per point; t on the log scale over repeats)"
    if repeats is not None and not repeats.empty:
        note += "; dots: each repeat"
    if _mixed(points).any():
        note += "; dashed: repeats in two phase states"
    return note


def _err(df: pd.DataFrame, col: str) -> np.ndarray | None:
    """Asymmetric error bar lengths [[below], [above]] from <col>_lo/<col>_hi; 0 where there is no interval."""
    lo, hi = f"{col}_lo", f"{col}_hi"
    if lo not in df or hi not in df:
        return None
    v = df[col].to_numpy(dtype=float)
    below = np.nan_to_num(v - df[lo].to_numpy(dtype=float), nan=0.0).clip(min=0)
    above = np.nan_to_num(df[hi].to_numpy(dtype=float) - v, nan=0.0).clip(min=0)
    return np.vstack([below, above])


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _plain(v: float, _pos: Any = None) -> str:
    """A tick label as a plain number: 8, 32, 128, 0.5, 2000 (never 2^3 or 10^1)."""
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


def plain_log_axis(axis, values: Iterable[float] | None = None) -> None:
    """Plain labels on a log-scaled axis: at the measured `values` when given (a sweep's concurrencies), else at
    1-2-5 steps (finer over less than two decades of data); no minor tick labels. Call after plotting, and
    thin_tick_labels after the layout is final."""
    vals = sorted({float(v) for v in (values or []) if v is not None and np.isfinite(v) and v > 0})
    if vals:
        axis.set_major_locator(FixedLocator(vals))
        axis.set_minor_locator(NullLocator())
    else:
        lo, hi = sorted(axis.get_view_interval())
        decades = np.log10(hi / lo) if lo > 0 and hi > lo else 3.0
        subs = (
            (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
            if decades < 1
            else (1.0, 2.0, 3.0, 5.0)
            if decades < 2
            else (1.0, 2.0, 5.0)
        )
        axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=40))
        axis.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10) * 1.0, numticks=40))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())


def thin_tick_labels(ax, which: str = "x") -> None:
    """Hide tick labels that would overlap the previous visible one (measured on the drawn figure)."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(axis.get_view_interval())
    last = None
    for t in sorted(axis.get_major_ticks(), key=lambda t: t.get_loc()):
        lab = t.label1
        if not (lo <= t.get_loc() <= hi) or not lab.get_visible() or not lab.get_text():
            continue
        box = lab.get_window_extent(renderer).expanded(1.15, 1.0)
        if last is not None and box.overlaps(last):
            lab.set_visible(False)
        else:
            last = box


# --- label placement ---------------------------------------------------------------------------------------------

_DIRS = [(1, 1), (1, -1), (-1, 1), (-1, -1), (0, 1), (0, -1), (1, 0), (-1, 0)]


def place_labels(ax, items: list[tuple[float, float, str, str]], fontsize: float = 7) -> list:
    """Label data points so that no label overlaps another label or a marker, or leaves the axes: each label tries
    8 directions at growing distances (a leader line beyond the first ring) and takes the first free spot, first
    clear of the error bars too, then (when that fails) across one; a label with no free spot is left out (the
    legend and the tables still name the point). items: (x, y, text, colour)."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    marker_px = 5.0
    markers, bars = [], []
    for x, y, _, _ in items:
        if np.isfinite(x) and np.isfinite(y):
            px, py = ax.transData.transform((x, y))
            markers.append(
                matplotlib.transforms.Bbox.from_extents(px - marker_px, py - marker_px, px + marker_px, py + marker_px)
            )
    for coll in ax.collections:  # error bars (LineCollections)
        for seg in getattr(coll, "get_segments", lambda: [])():
            pts = ax.transData.transform(np.asarray(seg, dtype=float))
            if np.isfinite(pts).all():
                (x0, y0), (x1, y1) = pts.min(axis=0), pts.max(axis=0)
                bars.append(matplotlib.transforms.Bbox.from_extents(x0 - 2, y0 - 2, x1 + 2, y1 + 2))
    placed: list = []
    texts = []

    def free(box, avoid_bars: bool) -> bool:
        inside = box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1
        return (
            inside
            and not any(box.overlaps(b) for b in placed)
            and not any(box.overlaps(m) for m in markers)
            and not (avoid_bars and any(box.overlaps(b) for b in bars))
        )

    for x, y, text, color in items:
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        spot = None
        for avoid_bars in (True, False):
            for ring, dist in enumerate((5, 14, 26, 40)):
                for dx, dy in _DIRS:
                    ha = "left" if dx > 0 else "right" if dx < 0 else "center"
                    va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
                    ann = ax.annotate(
                        text,
                        (x, y),
                        xytext=(dx * dist, dy * dist),
                        textcoords="offset points",
                        fontsize=fontsize,
                        color=color,
                        ha=ha,
                        va=va,
                        arrowprops=(dict(arrowstyle="-", color=color, lw=0.5, alpha=0.6) if ring else None),
                    )
                    box = ann.get_window_extent(renderer).expanded(1.05, 1.1)
                    if free(box, avoid_bars):
                        spot = (ann, box)
                        break
                    ann.remove()
                if spot:
                    break
            if spot:
                break
        if spot:
            ann, box = spot
            placed.append(box)
            texts.append(ann)
            ann.set_gid("point-label")
    return texts


# --- pictures ----------------------------------------------------------------------------------------------------


def _legend_below(ax, handles=None, ncol: int = 2) -> None:
    kw = {"handles": handles} if handles is not None else {}
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, frameon=False, **kw)


def _style_handles(repeats: pd.DataFrame | None = None) -> list:
    handles = [
        Line2D([], [], color="#555", marker="o", lw=1.2, label="fixed concurrency (filled)"),
        Line2D([], [], color="#555", marker="o", mfc="none", lw=0, label="open-loop arrivals (hollow, not joined)"),
    ]
    if repeats is not None and not repeats.empty:
        handles.append(Line2D([], [], color="#555", marker=".", lw=0, alpha=0.6, label="one repeat (dot)"))
        if (repeats.get("phase_state") == "bunched").any():
            handles.append(Line2D([], [], color="#555", marker="x", lw=0, ms=4, label="a bunched repeat (cross)"))
    return handles


BUNCHED = "bunched"


def _mixed(df: pd.DataFrame) -> pd.Series:
    """Which summaries rest on repeats in both phase states (sql/load_points.sql mixed_phase)."""
    if "mixed_phase" not in df:
        return pd.Series(False, index=df.index)
    return df["mixed_phase"].map(lambda v: bool(v) if isinstance(v, (bool, np.bool_)) else False).astype(bool)


def _phase_note(row: Any) -> str:
    """A point label's suffix: its repeats fell in two phase states."""
    return " (2 phases: mean not typical)" if _mixed(pd.DataFrame([row])).iloc[0] else ""


def _repeat_rows(repeats: pd.DataFrame | None, engine: str, x: str, y: str) -> pd.DataFrame:
    if repeats is None or repeats.empty or x not in repeats or y not in repeats:
        return pd.DataFrame()
    return repeats[repeats["engine"] == engine].dropna(subset=[x, y])


def draw_repeats(ax, repeats: pd.DataFrame | None, engine: str, x: str, y: str, color: str) -> None:
    """Every repeat of an engine's points as a small dot at its own figures (a cross where its closed loop was
    bunched), under the summaries' markers: a point whose repeats split into two groups shows as two groups."""
    rows = _repeat_rows(repeats, engine, x, y)
    if rows.empty:
        return
    bunched = rows.get("phase_state", pd.Series(None, index=rows.index)) == BUNCHED
    for part, marker, gid in ((rows[~bunched], "o", "repeats"), (rows[bunched], "x", "repeats-bunched")):
        if not part.empty:
            ax.scatter(
                part[x],
                part[y],
                s=10 if marker == "o" else 16,
                marker=marker,
                color=color,
                alpha=0.55,
                linewidths=0.9,
                zorder=2,
                gid=f"{gid}:{engine}",
            )


def workload_key(df: pd.DataFrame) -> pd.Series:
    """Which frontier a point belongs to: its workload's input and output lengths ('512/32'), or the workload's name
    where a dataset decides the lengths. Points of different lengths are different questions (a 512/32 interactive
    point is not a faster 512/128 steady one): a frontier joins one workload's points, never two."""
    if df.empty:
        return pd.Series([], dtype=object, index=df.index)
    n_in = pd.to_numeric(df["input_tokens"], errors="coerce") if "input_tokens" in df else None
    n_out = pd.to_numeric(df["output_tokens"], errors="coerce") if "output_tokens" in df else None
    names = df["workload"].astype(str) if "workload" in df else pd.Series("", index=df.index)
    if n_in is None or n_out is None:
        return names
    lengths = n_in.map(lambda v: f"{v:g}" if v == v else "") + "/" + n_out.map(lambda v: f"{v:g}" if v == v else "")
    return lengths.where(n_in.notna() & n_out.notna(), names)


def frontier_groups(df: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(linestyle, workload key, its points) per workload of one config, in key order: one frontier each."""
    if df.empty:
        return []
    keys = workload_key(df)
    styles = ("-", "--", ":", "-.")
    return [(styles[i % len(styles)], k, df[keys == k]) for i, k in enumerate(sorted(keys.unique()))]


def pareto_frontier(df: pd.DataFrame, x: str = "e2e_p50_ms", y: str = "output_tok_s") -> pd.DataFrame:
    """The points of one config that no other of its points beats on both lower latency and higher throughput."""
    df = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False])
    best, keep = -np.inf, []
    for idx, row in df.iterrows():
        if row[y] > best:
            best = row[y]
            keep.append(idx)
    return df.loc[keep]


def _errorbars(ax, part: pd.DataFrame, x: str, y: str, xerr: bool, **kw) -> None:
    """A set of summaries with their intervals; those resting on repeats in two phase states with dashed bars."""
    mixed = _mixed(part)
    for rows, style in ((part[~mixed], "-"), (part[mixed], "--")):
        if rows.empty:
            continue
        eb = ax.errorbar(rows[x], rows[y], xerr=_err(rows, x) if xerr else None, yerr=_err(rows, y), **kw)
        for bars in eb.lines[2]:
            bars.set_linestyle(style)
        if style == "--":
            eb.set_label(None)
            eb.lines[0].set_gid((kw.get("gid") or "") + ":mixed-phase")
        kw = {**kw, "label": None}


def fig_throughput_latency(points: pd.DataFrame, label: str, repeats: pd.DataFrame | None = None) -> Figure:
    """Output tokens/s against median E2E latency, one marker per point summary with its 95% intervals on both
    axes; each config's Pareto frontier over its fixed-concurrency points, one per workload (its input and output
    lengths, a line style each: workload_key), open-loop points hollow, not on it;
    with `repeats` (render.report_frames), every repeat as a small dot (draw_repeats)."""
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    data = points.dropna(subset=["e2e_p50_ms", "output_tok_s"]) if not points.empty else points
    colors = engine_colors(points["engine"].unique() if not points.empty else [])
    one = data["workload"].nunique() == 1 if not data.empty else True
    labels = []
    for engine in sorted(colors):
        df = load_order(data[data["engine"] == engine])
        if df.empty:
            continue
        c = colors[engine]
        closed = df[is_closed(df["shape"])]
        open_ = df[~is_closed(df["shape"])]
        groups = frontier_groups(closed)
        for style, key, part in groups:  # one frontier per workload (its lengths), never across two
            front = pareto_frontier(part)
            if len(front) > 1:
                ax.step(
                    front["e2e_p50_ms"],
                    front["output_tok_s"],
                    where="post",
                    color=c,
                    ls=style,
                    alpha=0.55,
                    lw=1.2,
                    gid=f"frontier:{engine}:{key}",
                )
        draw_repeats(ax, repeats, engine, "e2e_p50_ms", "output_tok_s", c)
        for part, filled in ((closed, True), (open_, False)):
            if part.empty:
                continue
            _errorbars(
                ax,
                part,
                "e2e_p50_ms",
                "output_tok_s",
                True,
                fmt="o",
                ms=5,
                color=c,
                mfc=c if filled else "white",
                mec=c,
                ecolor=c,
                elinewidth=0.9,
                capsize=2.5,
                zorder=3,
                label=config_label(engine, df) if filled or closed.empty else None,
                gid=f"points:{engine}:{'closed' if filled else 'open'}",
            )
        labels += [
            (r["e2e_p50_ms"], r["output_tok_s"], point_name(r, one) + _phase_note(r), c) for _, r in df.iterrows()
        ]
    ax.set_xlabel("median end-to-end latency, E2E p50 (ms)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_title(
        f"Throughput against latency, Pareto frontier per config ({label})\n{interval_note(points, repeats)}",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    if data.empty:
        ax.text(0.5, 0.5, "no load point measured", ha="center", transform=ax.transAxes)
    else:
        ax.margins(x=0.12, y=0.12)
        handles, _ = ax.get_legend_handles_labels()
        _legend_below(ax, handles + _style_handles(repeats))
        place_labels(ax, labels)
    return fig


def _dash_mixed(eb, rows: pd.DataFrame) -> None:
    """Dashed interval bars for the summaries resting on repeats in two phase states (one bar per row, in order)."""
    mixed = _mixed(rows)
    if mixed.any():
        for bars in eb.lines[2]:
            bars.set_linestyles(["--" if m else "-" for m in mixed])


def _tpj_repeats(repeats: pd.DataFrame | None) -> pd.DataFrame | None:
    """The repeats placed as the panel places their points: a closed loop at its concurrency, open-loop arrivals at
    the repeat's own achieved concurrency."""
    if repeats is None or repeats.empty:
        return repeats
    closed = is_closed(repeats["shape"])
    return repeats.assign(x=np.where(closed, repeats["concurrency"], repeats["achieved_concurrency"]))


def _tpj_panel(
    ax, data: pd.DataFrame, col: str, colors: dict[str, str], one: bool, repeats: pd.DataFrame | None = None
) -> list:
    """One tokens-per-joule panel: closed-loop sweeps as lines with error bars at their concurrency, open-loop points
    hollow at their achieved concurrency, every repeat a dot. Returns the label items."""
    labels = []
    repeats = _tpj_repeats(repeats)
    for engine in sorted(colors):
        df = load_order(data[(data["engine"] == engine)].dropna(subset=[col]))
        if df.empty:
            continue
        c = colors[engine]
        closed = df[is_closed(df["shape"])].sort_values("concurrency")
        open_ = df[(~is_closed(df["shape"])) & df["achieved_concurrency"].notna()]
        draw_repeats(ax, repeats, engine, "x", col, c)
        if not closed.empty:
            eb = ax.errorbar(
                closed["concurrency"],
                closed[col],
                yerr=_err(closed, col),
                fmt="-o",
                ms=5,
                color=c,
                elinewidth=0.9,
                capsize=2.5,
                label=config_label(engine, df),
                gid=f"sweep:{engine}",
            )
            _dash_mixed(eb, closed)
            labels += [
                (r["concurrency"], r[col], point_name(r, one) + _phase_note(r), c)
                for _, r in closed[_mixed(closed)].iterrows()
            ]
        if not open_.empty:
            eb = ax.errorbar(
                open_["achieved_concurrency"],
                open_[col],
                yerr=_err(open_, col),
                fmt="o",
                ms=5,
                color=c,
                mfc="white",
                mec=c,
                ecolor=c,
                elinewidth=0.9,
                capsize=2.5,
                zorder=3,
                label=None if not closed.empty else config_label(engine, df),
                gid=f"open:{engine}",
            )
            _dash_mixed(eb, open_)
            labels += [
                (r["achieved_concurrency"], r[col], point_name(r, one) + _phase_note(r), c) for _, r in open_.iterrows()
            ]
    return labels


def fig_tokens_per_joule(points: pd.DataFrame, label: str, repeats: pd.DataFrame | None = None) -> Figure:
    """Output tokens per joule against concurrency, two panels: total GPU energy (energy counter) and above idle
    (the deployment's idle power with the model loaded subtracted). Fixed-concurrency sweeps as lines; open-loop
    points hollow at their achieved (time-averaged) concurrency; bars: 95% intervals over repeats; with `repeats`,
    every repeat a dot (a closed loop's summaries that mix two phase states are labelled so)."""
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.4), sharey=True)
    colors = engine_colors(points["engine"].unique() if not points.empty else [])
    one = points["workload"].nunique() == 1 if not points.empty else True
    xs: list[float] = []  # every x drawn (axis limits)
    ticks: list[float] = []  # the fixed concurrencies swept (tick labels); open-loop points carry their own labels
    titles = ("total: output tokens / GPU energy (counter)", "above idle: output tokens / (energy - idle W x window)")
    for ax, col, title in zip(axes, ("output_tokens_per_j", "output_tokens_per_j_above_idle"), titles):
        data = points.dropna(subset=[col]) if col in points else points.iloc[0:0]
        labels = _tpj_panel(ax, data, col, colors, one, repeats) if not data.empty else []
        if not data.empty:
            ticks += data.loc[is_closed(data["shape"]), "concurrency"].dropna().tolist()
            xs += data.loc[~is_closed(data["shape"]), "achieved_concurrency"].dropna().tolist()
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("concurrent requests (open-loop: achieved)")
        ax.grid(alpha=0.3)
        if data.empty:
            why = (
                "no load point with energy measured"
                if col == "output_tokens_per_j"
                else "no idle baseline measured: above-idle needs the deployment's idle power"
            )
            ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, fontsize=8, transform=ax.transAxes)
        ax._wb_labels = labels
    axes[0].set_ylabel("output tokens per joule (tok/J)")
    xs += ticks
    placed = _tpj_repeats(repeats)
    if placed is not None and not placed.empty and xs:  # open-loop repeats sit at their own achieved concurrency
        xs += [float(x) for x in placed["x"].dropna() if x > 0]
    if xs:
        for ax in axes:
            ax.set_xscale("log", base=2)
            plain_log_axis(ax.xaxis, ticks or [round(x, 1) if x < 10 else round(x) for x in xs])
            ax.set_xlim(min(xs) / 1.4, max(xs) * 1.4)
    fig.suptitle(f"Energy efficiency against concurrency ({label})\n{interval_note(points, repeats)}", fontsize=9)
    handles, names = axes[0].get_legend_handles_labels()
    if not handles:
        handles, names = axes[1].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles + _style_handles(repeats),
            names + [h.get_label() for h in _style_handles(repeats)],
            fontsize=7,
            loc="lower center",
            ncol=3,
            frameon=False,
            bbox_to_anchor=(0.5, -0.08),
        )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    for ax in axes:
        thin_tick_labels(ax)
        place_labels(ax, ax._wb_labels)
    return fig


def _gpu_name(row_uuid: str, index: Any) -> str:
    return f"GPU {int(index)}" if index is not None and pd.notna(index) else str(row_uuid)[:12]


def power_series(samples: pd.DataFrame, max_points: int = 4000, per_gpu: bool = False) -> pd.DataFrame:
    """Total power of each deployment over time: each GPU's samples averaged into common time bins (100 ms, wider
    when a deployment has more than `max_points` bins), summed over the deployment's GPUs in bins where every GPU
    has a reading (its own, or its previous bin's). Columns: deployment_id, t_s (from the run's first sample),
    power_w. per_gpu: each GPU's own series on the same bins instead (column gpu: "GPU <index>", or the UUID's
    start where no index was recorded), the parts of that total."""
    cols = ["deployment_id", "gpu", "t_s", "power_w"] if per_gpu else ["deployment_id", "t_s", "power_w"]
    if samples.empty:
        return pd.DataFrame(columns=cols)
    s = samples.dropna(subset=["power_w"])
    t0 = s["t_ns"].min()
    out = []
    for dep, d in s.groupby("deployment_id"):
        span = (d["t_ns"].max() - d["t_ns"].min()) / 1e9
        bin_ns = int(max(0.1, span / max_points) * 1e9)
        bin_s = bin_ns / 1e9
        b = (d["t_ns"] - t0) // bin_ns
        per_bin = d.assign(bin=b).groupby(["bin", "gpu_uuid"])["power_w"].mean().unstack("gpu_uuid")
        # a GPU whose 10 Hz reading fell into the next bin keeps its last reading for one bin
        filled = per_bin.reindex(range(int(b.min()), int(b.max()) + 1)).ffill(limit=1).dropna()
        t_s = (filled.index.to_numpy() + 0.5) * bin_s
        if per_gpu:
            index = (
                d.groupby("gpu_uuid")["gpu_index"].first()
                if "gpu_index" in d
                else pd.Series(None, index=filled.columns, dtype=object)
            )
            for uuid in filled.columns:
                out.append(
                    pd.DataFrame(
                        {
                            "deployment_id": dep,
                            "gpu": _gpu_name(uuid, index.get(uuid)),
                            "t_s": t_s,
                            "power_w": filled[uuid].to_numpy(),
                        }
                    )
                )
        else:
            out.append(pd.DataFrame({"deployment_id": dep, "t_s": t_s, "power_w": filled.sum(axis=1).to_numpy()}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=cols)


_GPU_DASHES = [(0, (4, 1.5)), (0, (1, 1)), (0, (6, 2, 1, 2)), (0, (2, 2))]


def fig_power_trace(samples: pd.DataFrame, windows: pd.DataFrame, label: str) -> Figure:
    """Total W of each deployment over the run (sampled instant power summed over its GPUs; diagnosis only, the
    energy counter is the figure of record), each load point's steady-state window shaded and labelled; a
    deployment on several GPUs also shows each GPU's own trace (dashed)."""
    series = power_series(samples)
    gpus = power_series(samples, per_gpu=True)
    deployments = sorted(series["deployment_id"].unique()) if not series.empty else []
    n = max(1, len(deployments))
    fig, axes = plt.subplots(n, 1, figsize=(8.0, 2.3 * n), squeeze=False, sharex=True)
    t0 = samples["t_ns"].min() if not samples.empty else 0
    colors = engine_colors(windows["engine"].unique() if "engine" in windows and not windows.empty else deployments)
    repeated = "repeat" in windows and not windows.empty and pd.to_numeric(windows["repeat"]).max() > 1
    for ax, dep in zip(axes[:, 0], deployments):
        s = series[series["deployment_id"] == dep]
        w = windows[windows["deployment_id"] == dep] if not windows.empty else windows
        engine = str(w["engine"].iloc[0]) if "engine" in w and not w.empty else dep
        color = colors.get(engine, "#333")
        ax.plot(s["t_s"], s["power_w"], lw=0.9, color=color, label="all its GPUs")
        parts = gpus[gpus["deployment_id"] == dep]
        if parts["gpu"].nunique() > 1:  # tensor parallel: each GPU's share under the total
            for (name, g), dash in zip(parts.groupby("gpu"), _GPU_DASHES * 4):
                ax.plot(g["t_s"], g["power_w"], lw=0.6, alpha=0.75, color=color, linestyle=dash, label=name)
            ax.legend(fontsize=6, loc="lower left", ncol=min(5, 1 + parts["gpu"].nunique()), frameon=False)
        top = float(s["power_w"].max()) if not s.empty else 1.0
        ax.set_ylim(0, top * 1.3)
        for _, r in w.iterrows():
            a, b = (r["window_start_ns"] - t0) / 1e9, (r["window_end_ns"] - t0) / 1e9
            ax.axvspan(a, b, alpha=0.13, color=color, lw=0)
            rep = f" #{int(r['repeat'])}" if repeated and pd.notna(r["repeat"]) else ""
            ax.text(
                (a + b) / 2,
                top * 1.27,
                f"{r['point_label']}{rep}",
                fontsize=6,
                rotation=90,
                ha="center",
                va="top",
                color="#333",
                gid="window-label",
            )
        ax.set_ylabel(f"{dep}\nW (all its GPUs)", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the run's first sample (shaded: steady-state windows)")
    axes[0, 0].set_title(f"GPU power over the run, sampled instant power ({label})", fontsize=9)
    if not deployments:
        axes[0, 0].text(0.5, 0.5, "no GPU samples (telemetry missing)", ha="center", transform=axes[0, 0].transAxes)
    return fig


LATENCY_NAMES = {"ttft_ms": "time to first token, TTFT", "e2e_ms": "end-to-end latency, E2E"}


def fig_latency_cdf(requests: pd.DataFrame, label: str, metric: str = "ttft_ms") -> Figure:
    """Empirical CDF of a request latency (successful requests sent inside the window, every repeat of a point
    pooled), one panel per engine config, one line per point coloured in load order; log x with plain labels."""
    ok = requests.dropna(subset=[metric]) if not requests.empty else requests
    engines = sorted(ok["engine"].unique()) if not ok.empty else []
    n = max(1, len(engines))
    fig, axes = plt.subplots(1, n, figsize=(min(4.2 * n, 13), 3.8), squeeze=False, sharex=True, sharey=True)
    names = point_names(ok)
    colors = dict(zip(names, point_colors(len(names))))
    one = ok["workload"].nunique() == 1 if not ok.empty else True
    for ax, engine in zip(axes[0], engines):
        df = ok[ok["engine"] == engine]
        groups = {(pl if one else f"{wl}:{pl}"): g for (wl, pl), g in df.groupby(["workload", "point_label"])}
        for name in names:
            if name not in groups:
                continue
            x = np.sort(groups[name][metric].to_numpy(dtype=float))
            y = np.arange(1, len(x) + 1) / len(x)
            ax.step(x, y, where="post", color=colors[name], lw=1.2, label=f"{name} ({len(x)})")
        ax.set_title(engine, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, title="point (requests)", title_fontsize=6, loc="lower right")
    if engines:
        axes[0, 0].set_xscale("log")
        plain_log_axis(axes[0, 0].xaxis)
    for ax in axes[0]:
        ax.set_xlabel(f"{LATENCY_NAMES.get(metric, metric)} (ms, log scale)", fontsize=8)
    axes[0, 0].set_ylabel("share of requests")
    fig.suptitle(f"{LATENCY_NAMES.get(metric, metric)} distribution per load point ({label})", fontsize=9)
    if not engines:
        axes[0, 0].text(0.5, 0.5, "no successful request in a window", ha="center", transform=axes[0, 0].transAxes)
    fig.tight_layout()
    for ax in axes[0]:
        thin_tick_labels(ax)
    return fig


def frontier(df: pd.DataFrame, x: str, y: str, x_better: str = "lower") -> pd.DataFrame:
    """The points no other point beats on both x (lower, or higher with x_better='higher') and higher y, in x order.
    vLLM's plot_pareto keeps, with x descending, every point whose y reaches the best so far (ties kept)."""
    df = df.dropna(subset=[x, y])
    if df.empty:
        return df
    asc = x_better == "lower"
    df = df.sort_values([x, y], ascending=[asc, False])
    best, keep = -np.inf, []
    for idx, row in df.iterrows():
        if row[y] >= best - 1e-12:
            best = max(best, row[y])
            keep.append(idx)
    return df.loc[keep].sort_values(x)


# The frontier panels: (x, x label, x better, y, y label, SLO bound on x)
FRONTIER_PANELS = (
    ("ttft_p99_ms", "TTFT p99 (ms)", "lower", "output_tokens_per_j", "output tokens per joule (tok/J)", "slo_ttft_ms"),
    ("tpot_p99_ms", "TPOT p99 (ms)", "lower", "output_tokens_per_j", "output tokens per joule (tok/J)", "slo_tpot_ms"),
    ("tok_s_per_user", "output tok/s per user", "higher", "tok_s_per_gpu", "output tok/s per GPU", None),
)


def frontier_points(points: pd.DataFrame) -> pd.DataFrame:
    """The point summaries with vLLM's Pareto axes (vllm/benchmarks/sweep/plot_pareto.py): tokens/s per user = output
    tok/s / concurrent requests (the achieved, time-averaged concurrency: a closed loop's streams, an open loop's
    requests in flight) and tokens/s per GPU = output tok/s / the deployment's GPUs."""
    if points.empty:
        return points
    df = points.copy()
    users = pd.to_numeric(df.get("achieved_concurrency"), errors="coerce")
    gpus = pd.to_numeric(df.get("n_gpus"), errors="coerce")
    df["tok_s_per_user"] = df["output_tok_s"] / users.where(users > 0)
    df["tok_s_per_gpu"] = df["output_tok_s"] / gpus.where(gpus > 0)
    return df


def fig_frontiers(points: pd.DataFrame, capacity: pd.DataFrame | None, label: str, slo: dict | None = None) -> Figure:
    """Per engine config (engine, precision, tp): tokens per joule against TTFT p99 and against TPOT p99, and output
    tokens/s per GPU against tokens/s per user (vLLM's Pareto view); each config's frontier joined per workload (its
    input and output lengths: workload_key; a line style each), every point a marker (open loop hollow), the SLO's
    bound dashed and each config's SLO capacity ringed (slo_capacity)."""
    df = frontier_points(points)
    fig, axes = plt.subplots(1, 3, figsize=(15.0, 4.8))
    colors = engine_colors(points["engine"].unique() if not points.empty else [])
    cap = capacity if capacity is not None and not capacity.empty else pd.DataFrame()
    for ax, (x, xlabel, better, y, ylabel, bound) in zip(axes, FRONTIER_PANELS):
        data = df.dropna(subset=[x, y]) if not df.empty and x in df and y in df else pd.DataFrame()
        for engine in sorted(colors):
            part = data[data["engine"] == engine] if not data.empty else data
            if part.empty:
                continue
            c = colors[engine]
            groups = frontier_groups(part)
            for style, key, rows in groups:  # one frontier per workload (its lengths), never across two
                front = frontier(rows, x, y, better)
                if len(front) > 1:
                    ax.plot(front[x], front[y], color=c, ls=style, lw=1.4, alpha=0.8, gid=f"frontier:{engine}:{key}")
                    if len(groups) > 1:  # say which workload each line is
                        ax.annotate(
                            f"{key} in/out" if "/" in key else key,
                            (float(front[x].iloc[-1]), float(front[y].iloc[-1])),
                            textcoords="offset points",
                            xytext=(4, 4),
                            fontsize=6,
                            color=c,
                            gid="frontier-workload",
                        )
            for filled in (True, False):
                sub = part[(is_closed(part["shape"])) == filled]
                if sub.empty:
                    continue
                ax.scatter(
                    sub[x],
                    sub[y],
                    s=22,
                    color=c,
                    facecolors=c if filled else "white",
                    edgecolors=c,
                    zorder=3,
                    label=config_label(engine, part) if filled or (is_closed(part["shape"])).sum() == 0 else None,
                    gid=f"points:{engine}:{'closed' if filled else 'open'}",
                )
            here = cap[cap["engine"] == engine] if not cap.empty else cap
            for _, r in here.iterrows():
                at = part[(part["workload"] == r["workload"]) & (part["point_label"] == r["at_point_label"])]
                if at.empty:
                    continue
                ax.scatter(
                    at[x],
                    at[y],
                    s=170,
                    facecolors="none",
                    edgecolors=c,
                    linewidths=2.0,
                    zorder=4,
                    gid=f"capacity:{engine}",
                )
                ax.annotate(
                    f"SLO capacity {r['capacity']:.3g} {r['unit']}",
                    (float(at[x].iloc[0]), float(at[y].iloc[0])),
                    textcoords="offset points",
                    xytext=(8, -12),
                    fontsize=7,
                    color=c,
                )
        if bound and not data.empty:
            _slo_lines(ax, data[x], bound, slo, cap)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if data.empty:
            why = "no point with both figures measured" if not df.empty else "no load point measured"
            ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=8, transform=ax.transAxes)
        elif better == "lower" and data[x].max() / max(data[x].min(), 1e-9) > 20:
            ax.set_xscale("log")
            plain_log_axis(ax.xaxis)
    axes[0].set_title("tokens per joule against TTFT p99", fontsize=8)
    axes[1].set_title("tokens per joule against TPOT p99", fontsize=8)
    axes[2].set_title("tok/s per GPU against tok/s per user (vLLM's Pareto view)", fontsize=8)
    fig.suptitle(
        f"Frontiers per engine config and workload (input/output lengths, never joined across): lines join the points "
        f"no other beats on both axes; ringed: the SLO capacity "
        f"({label})\none marker per point: its repeats' mean (tok/s, tok/J) or pooled percentile (latency)",
        fontsize=9,
    )
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, fontsize=7, loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, -0.06))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _slo_lines(ax, xs: pd.Series, bound: str, slo: dict | None, cap: pd.DataFrame) -> None:
    """The plan's SLO bound (dashed) and a capacity search's own (dotted, where it differs) on a latency axis; a
    bound far right of every point is said in the panel instead of stretching the axis to it."""
    lines = [("plan SLO", (slo or {}).get(bound), "--")]
    if not cap.empty and bound in cap:
        for v in sorted({float(v) for v in cap[bound].dropna()}):
            if v != lines[0][1]:
                lines.append(("searched SLO", v, ":"))
    far = []
    top = float(xs.max())
    for name, v, style in lines:
        if not v:
            continue
        if v <= 1.5 * top:
            ax.axvline(v, color="#d62728", ls=style, lw=1.1, alpha=0.8, label=f"{name}: {v:g} ms")
        else:
            far.append(f"{name} {v:g} ms")
    if far:
        ax.text(
            0.98,
            0.02,
            "off the axis: " + ", ".join(far),
            ha="right",
            va="bottom",
            fontsize=7,
            color="#d62728",
            transform=ax.transAxes,
        )


def plot_frontiers(points: pd.DataFrame, capacity: pd.DataFrame | None, label: str, slo: dict | None = None) -> bytes:
    return _png(fig_frontiers(points, capacity, label, slo))


def plot_throughput_latency(points: pd.DataFrame, label: str, repeats: pd.DataFrame | None = None) -> bytes:
    return _png(fig_throughput_latency(points, label, repeats))


def plot_tokens_per_joule(points: pd.DataFrame, label: str, repeats: pd.DataFrame | None = None) -> bytes:
    return _png(fig_tokens_per_joule(points, label, repeats))


def plot_power_trace(samples: pd.DataFrame, windows: pd.DataFrame, label: str) -> bytes:
    return _png(fig_power_trace(samples, windows, label))


def plot_latency_cdf(requests: pd.DataFrame, label: str, metric: str = "ttft_ms") -> bytes:
    return _png(fig_latency_cdf(requests, label, metric))


def plot_capacity(topologies: pd.DataFrame, label: str, note: str | None = None) -> bytes:
    """Monthly cost of each topology of sql/hybrid_plan.sql: GPU-hours and energy stacked, the rule's pick marked."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * max(4, len(topologies)) + 1.2))
    rows = topologies.dropna(subset=["monthly_gpu_usd"]) if not topologies.empty else topologies
    if rows.empty:
        ax.text(
            0.5, 0.5, note or "no topology could be sized", ha="center", va="center", wrap=True, transform=ax.transAxes
        )
        ax.set_axis_off()
    else:
        rows = rows.iloc[::-1]
        y = np.arange(len(rows))
        gpu = rows["monthly_gpu_usd"].to_numpy(dtype=float)
        energy = rows["monthly_energy_usd"].fillna(0).to_numpy(dtype=float)
        picked = rows["pick"].fillna("").str.contains("rule pick").to_numpy()
        ax.barh(y, gpu, color=np.where(picked, "#2ca02c", "#1f77b4"), label="GPU-hours")
        ax.barh(y, energy, left=gpu, color="#ff7f0e", label="energy (measured W x hours x $/kWh x PUE)")
        for yi, g, e in zip(y, gpu, energy):
            ax.text(g + e, yi, f" ${g + e:,.0f}", va="center", fontsize=7)
        ax.set_yticks(y, [t if len(t) <= 60 else t[:57] + "..." for t in rows["topology"]], fontsize=7)
        ax.set_xlabel("$ per month")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, float((gpu + energy).max()) * 1.25)
    ax.set_title(f"Capacity plan: monthly cost per topology (green: the rule's hybrid) ({label})")
    return _png(fig)
