"""Pictures and the self-contained HTML report (inline CSS and base64 PNGs: it opens offline, no CDN)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _colors(engines: list[str]) -> dict[str, str]:
    return {e: _PALETTE[i % len(_PALETTE)] for i, e in enumerate(sorted(engines))}


def _config_label(engine: str, df: pd.DataFrame) -> str:
    """'trtllm-like (fp8, tp8)': the engine config a curve belongs to."""
    bits = [str(df[c].iloc[0]) if c == "precision" else f"tp{df[c].iloc[0]}"
            for c in ("precision", "tp") if c in df and not df.empty and pd.notna(df[c].iloc[0])]
    return f"{engine} ({', '.join(bits)})" if bits else str(engine)


def plot_throughput_latency(points: pd.DataFrame, label: str) -> bytes:
    """Output tokens/s against median E2E latency per engine config, its Pareto frontier drawn (the points no
    other point of the same config beats on both throughput and latency)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = _colors(list(points["engine"].unique()))
    for engine, df in points.groupby("engine"):
        df = df.dropna(subset=["e2e_p50_ms", "output_tok_s"]).sort_values("e2e_p50_ms")
        ax.scatter(df["e2e_p50_ms"], df["output_tok_s"], color=colors[engine], label=_config_label(engine, df), zorder=3)
        best, frontier = -np.inf, []
        for _, row in df.iterrows():
            if row["output_tok_s"] > best:
                best = row["output_tok_s"]
                frontier.append(row)
        if frontier:
            f = pd.DataFrame(frontier)
            ax.step(f["e2e_p50_ms"], f["output_tok_s"], where="post", color=colors[engine], alpha=0.6)
        for _, row in df.iterrows():
            ax.annotate(row["load_point_id"].split(":", 1)[-1], (row["e2e_p50_ms"], row["output_tok_s"]),
                        fontsize=7, alpha=0.7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("median end-to-end latency (ms)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_title(f"Throughput against latency, Pareto frontier per config ({label})")
    ax.grid(alpha=0.3)
    if not points.empty:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no load point measured", ha="center", transform=ax.transAxes)
    return _png(fig)


def plot_tokens_per_joule(points: pd.DataFrame, label: str) -> bytes:
    """Output tokens per joule against concurrency: fixed-concurrency sweeps as lines; open-loop points (Poisson,
    gamma, surge, trace) as hollow markers at their achieved (time-averaged) concurrency."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = _colors(list(points["engine"].unique()))
    measured = points.dropna(subset=["output_tokens_per_j"])
    steady = measured[measured["shape"] == "concurrency"]
    for engine, df in steady.groupby("engine"):
        df = df.sort_values("concurrency")
        ax.plot(df["concurrency"], df["output_tokens_per_j"], marker="o", color=colors[engine],
                label=_config_label(engine, df))
    open_loop = measured[(measured["shape"] != "concurrency") & measured["achieved_concurrency"].notna()]
    for engine, df in open_loop.groupby("engine"):
        ax.scatter(df["achieved_concurrency"], df["output_tokens_per_j"], facecolors="none", edgecolors=colors[engine],
                   label=f"{engine} open-loop (achieved concurrency)", zorder=3)
        for _, row in df.iterrows():
            ax.annotate(str(row["load_point_id"]).split(":")[-1], (row["achieved_concurrency"], row["output_tokens_per_j"]),
                        fontsize=7, alpha=0.7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("output tokens per joule (tok/J)")
    ax.set_xscale("log", base=2)
    ax.set_title(f"Energy efficiency against concurrency ({label})")
    ax.grid(alpha=0.3)
    if not measured.empty:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no load point with energy measured", ha="center", transform=ax.transAxes)
    return _png(fig)


def plot_power_trace(samples: pd.DataFrame, windows: pd.DataFrame, label: str) -> bytes:
    """Total power of each deployment over time, load-point windows shaded."""
    deployments = sorted(samples["deployment_id"].unique()) if not samples.empty else []
    fig, axes = plt.subplots(max(1, len(deployments)), 1, figsize=(7.5, 2.2 * max(1, len(deployments))), squeeze=False)
    for ax, dep in zip(axes[:, 0], deployments):
        s = samples[samples["deployment_id"] == dep]
        t0 = s["t_ns"].min()
        total = s.groupby("t_ns")["power_w"].sum().sort_index()
        ax.plot((total.index - t0) / 1e9, total.values, lw=1, color="#333")
        for _, w in windows[windows["deployment_id"] == dep].iterrows():
            ax.axvspan((w["window_start_ns"] - t0) / 1e9, (w["window_end_ns"] - t0) / 1e9, alpha=0.15, color="#1f77b4")
            ax.text((w["window_start_ns"] - t0) / 1e9, total.max() * 0.98,
                    w["load_point_id"].split(":", 1)[-1], fontsize=7, va="top")
        ax.set_ylabel(f"{dep}\nW (all GPUs)")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the deployment's first sample (shaded: steady-state windows)")
    axes[0, 0].set_title(f"GPU power over the run ({label})")
    if not deployments:
        axes[0, 0].text(0.5, 0.5, "no GPU samples (telemetry missing)", ha="center", transform=axes[0, 0].transAxes)
    return _png(fig)


def plot_ttft_cdf(requests: pd.DataFrame, label: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ok = requests[requests["in_window"] & requests["error_kind"].isna()].dropna(subset=["ttft_ms"])
    for i, (lp, df) in enumerate(ok.groupby("load_point_id")):
        x = np.sort(df["ttft_ms"].to_numpy())
        y = np.arange(1, len(x) + 1) / len(x)
        ax.step(x, y, where="post", label=lp, color=_PALETTE[i % len(_PALETTE)] if i < 6 else None, alpha=0.85)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (ms, log scale)")
    ax.set_ylabel("share of requests")
    ax.set_title(f"TTFT distribution per load point ({label})")
    ax.grid(alpha=0.3)
    if not ok.empty:
        ax.legend(fontsize=6)
    return _png(fig)


def plot_capacity(topologies: pd.DataFrame, label: str, note: str | None = None) -> bytes:
    """Monthly cost of each topology of sql/hybrid_plan.sql: GPU-hours and energy stacked, the rule's pick marked."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * max(4, len(topologies)) + 1.2))
    rows = topologies.dropna(subset=["monthly_gpu_usd"]) if not topologies.empty else topologies
    if rows.empty:
        ax.text(0.5, 0.5, note or "no topology could be sized", ha="center", va="center", wrap=True,
                transform=ax.transAxes)
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


def _short_point(load_point_id: Any) -> str:
    """'trtllm-like:steady:c32' -> 'steady:c32' (the engine is the column already); 'steady:c32' stays."""
    parts = str(load_point_id).split(":")
    return ":".join(parts[-2:])


def pivot_head_to_head(long: pd.DataFrame, origins: bool = True) -> pd.DataFrame:
    """Rows are figures (with units), columns are engines. With `origins`, each measured cell names the load
    point it came from ('4295.5 @ steady:c32'; the run is the table's); a NULL cell says why it is NULL."""
    if long.empty:
        return pd.DataFrame()
    long = long.copy()
    long["figure"] = long.apply(lambda r: f"{r['figure']} ({r['unit']})" if r["unit"] else r["figure"], axis=1)

    def cell(r) -> str:
        value = r["value"]
        if value is None or value != value:
            note = r.get("note")
            return f"NULL ({note})" if isinstance(note, str) and note else "NULL (not measured)"
        lp = r.get("load_point_id")
        return f"{value} @ {_short_point(lp)}" if origins and isinstance(lp, str) and lp else str(value)

    long["cell"] = long.apply(cell, axis=1)
    order = long.drop_duplicates("figure").sort_values("ord")["figure"].tolist()
    table = long.pivot(index="figure", columns="engine", values="cell").reindex(order).fillna("NULL (not measured)")
    table.columns.name = None
    table.index.name = "figure"
    return table


def markdown_table(df: pd.DataFrame, index: bool = False) -> str:
    return df.to_markdown(index=index, floatfmt=".4g") if not df.empty else "_no rows_"


def html_table(df: pd.DataFrame, index: bool = False, empty: str = "no rows") -> str:
    if df.empty:
        return f"<p>{html.escape(empty)}</p>"
    return df.to_html(index=index, escape=True, na_rep="NULL", float_format=lambda v: f"{v:.4g}")


def b64(png: bytes) -> str:
    return base64.b64encode(png).decode()


def write_html(path: Path, title: str, source: str, run_id: str, sections: list[tuple[str, str]],
               plots: dict[str, bytes], notes: list[str]) -> Path:
    """One self-contained HTML file: inline CSS, PNGs as data: URIs, no script and no link to fetch.
    `sections`: (heading, HTML body) in order; the pictures follow them, the notes close the page."""
    banner = ("<div class='banner emulated'>EMULATED: every figure below comes from wattbench's built-in engine "
              "emulator and its modelled GPU telemetry, not from real GPUs.</div>" if source == "emulated"
              else "<div class='banner measured'>MEASURED on real engines and GPUs.</div>")
    css = """
    body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
    h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
    table{border-collapse:collapse;font-size:13px;margin:8px 0} td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
    th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
    .banner{padding:10px 14px;font-weight:600;border-radius:4px;margin:12px 0}
    .emulated{background:#fff3cd;border:1px solid #e0b000} .measured{background:#d4edda;border:1px solid #2e7d32}
    .plots img{max-width:49%;margin:4px 0} .meta{color:#666;font-size:12px} .scroll{overflow-x:auto}
    """
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{css}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>", banner,
        f"<p class='meta'>run {html.escape(run_id)} &middot; source: {html.escape(source)}</p>",
    ]
    for heading, body in sections:
        parts += [f"<h2>{html.escape(heading)}</h2>", f"<div class='scroll'>{body}</div>"]
    parts += [
        "<h2>Pictures</h2><div class='plots'>",
        *[f"<img alt='{html.escape(name)}' title='{html.escape(name)}' src='data:image/png;base64,{b64(png)}'>"
          for name, png in plots.items()],
        "</div>",
        "<h2>Notes</h2><ul>", *[f"<li>{html.escape(n)}</li>" for n in notes], "</ul>",
        "</body></html>",
    ]
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
        notes.append(f"Shortest steady-state window {min_window_s:.1f} s: energy claims want >= 20 s (flagged by validation).")
    notes.append(f"Plan: {plan_label}.")
    return notes


# --- Capacity plan -------------------------------------------------------------------------------------------

CAPACITY_PARAMS = ("steady_qps", "peak_qps", "burst_hours_per_day", "input_tokens", "output_tokens",
                   "elastic_gpu_hour_usd")

CAPACITY_ASSUMPTIONS = [
    "Per-replica capacity = the highest goodput (requests/s meeting every SLO) of a load point whose p99 TTFT/TPOT/E2E "
    "meet the plan's SLO, at the measured workload lengths nearest the profile's. It is a demonstrated rate: a higher, "
    "unmeasured load may also meet the SLO, so sweep further to tighten it.",
    "Replicas = ceil(QPS / capacity); GPUs = replicas x GPUs per deployment; a month is 730 h; the elastic pool runs "
    "burst_hours_per_day x 730/24 h a month and is sized for (peak - steady) QPS with no credit for spare baseline "
    "capacity.",
    "Energy line = replicas x the deployment's measured mean W (energy counter) at the sizing point x hours x $/kWh x "
    "PUE: an upper bound, since replicas below their sizing load draw less.",
    "Lengths are not rescaled: when the profile's lengths differ from the measured ones the note says so.",
    "Hybrid rule: baseline engine = highest capacity per GPU; elastic engine = lowest worst p99 TTFT under gamma/surge "
    "arrivals among configs meeting the SLO there (the baseline engine when none was measured under bursts).",
]


def capacity_params(profile: Any) -> dict[str, Any] | None:
    """The $parameters of sql/capacity_plan.sql and sql/hybrid_plan.sql from a plan's `capacity` section
    (resources.plan.CapacityProfile, or a dict of its fields); None when there is none."""
    if profile is None:
        return None
    data = profile.model_dump() if hasattr(profile, "model_dump") else dict(profile)
    return {k: data.get(k) for k in CAPACITY_PARAMS}


def run_capacity_profile(con, run_id: str) -> dict[str, Any] | None:
    """The capacity section of the plan a run recorded (runs.plan_path), if the file is still there and has one."""
    row = con.execute("SELECT plan_path FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if not row or not row[0] or not Path(row[0]).exists():
        return None
    from resources.plan import PlanError, load_plan

    try:
        plan, _ = load_plan(row[0])
    except PlanError:
        return None
    return capacity_params(plan.capacity)


def query_params(con, text: str, run_id: str | None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The $parameters a report query in sql/ uses: $run_id, the capacity profile from the run's plan, and
    `overrides` (NAME=VALUE from the command line, values parsed as numbers where they are numbers).
    Raises ValueError naming the parameters still missing."""
    import re

    wanted = set(re.findall(r"\$([A-Za-z_]\w*)", text))
    params: dict[str, Any] = {}
    if "run_id" in wanted and run_id is not None:
        params["run_id"] = run_id
    if wanted & set(CAPACITY_PARAMS) and run_id is not None:
        params.update(run_capacity_profile(con, run_id) or {})
    for key, value in (overrides or {}).items():
        params[key] = _number(value)
    optional = {"input_tokens", "output_tokens", "elastic_gpu_hour_usd"}
    for key in wanted & optional:
        params.setdefault(key, None)
    missing = sorted(k for k in wanted if k not in params or (params[k] is None and k not in optional))
    if missing:
        hint = (" (or add a `capacity:` section to the plan)" if set(missing) & set(CAPACITY_PARAMS) else "")
        raise ValueError("query needs " + ", ".join(f"${m}" for m in missing) + "; pass --param NAME=VALUE" + hint)
    return {k: v for k, v in params.items() if k in wanted}


def _number(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if value.lower() in ("null", "none", ""):
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def as_dict_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return df.to_dict(orient="records")
