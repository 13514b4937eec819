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


def plot_throughput_latency(points: pd.DataFrame, label: str) -> bytes:
    """Output tokens/s against median E2E latency per engine, Pareto frontier drawn."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = _colors(list(points["engine"].unique()))
    for engine, df in points.groupby("engine"):
        df = df.dropna(subset=["e2e_p50_ms", "output_tok_s"]).sort_values("e2e_p50_ms")
        ax.scatter(df["e2e_p50_ms"], df["output_tok_s"], color=colors[engine], label=engine, zorder=3)
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
    ax.set_title(f"Throughput against latency ({label})")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def plot_tokens_per_joule(points: pd.DataFrame, label: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = _colors(list(points["engine"].unique()))
    steady = points[points["shape"] == "concurrency"].dropna(subset=["output_tokens_per_j"])
    for engine, df in steady.groupby("engine"):
        df = df.sort_values("concurrency")
        ax.plot(df["concurrency"], df["output_tokens_per_j"], marker="o", color=colors[engine], label=engine)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("output tokens per joule (tok/J)")
    ax.set_xscale("log", base=2)
    ax.set_title(f"Energy efficiency against concurrency ({label})")
    ax.grid(alpha=0.3)
    if not steady.empty:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no steady-concurrency point with energy measured", ha="center", transform=ax.transAxes)
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
            ax.text((w["window_start_ns"] - t0) / 1e9, ax.get_ylim()[1] if False else total.max() * 0.98,
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


def pivot_head_to_head(long: pd.DataFrame) -> pd.DataFrame:
    """Rows are figures (with units), columns are engines; each cell names the load point it came from."""
    if long.empty:
        return pd.DataFrame()
    long = long.copy()
    long["figure"] = long.apply(lambda r: f"{r['figure']} ({r['unit']})" if r["unit"] else r["figure"], axis=1)
    long["cell"] = long.apply(
        lambda r: (str(r["value"]) if r["value"] is not None and r["value"] == r["value"] else "NULL (not measured)"), axis=1)
    order = long.drop_duplicates("figure").sort_values("ord")["figure"].tolist()
    table = long.pivot(index="figure", columns="engine", values="cell").reindex(order)
    table.columns.name = None
    return table


def markdown_table(df: pd.DataFrame, index: bool = False) -> str:
    return df.to_markdown(index=index, floatfmt=".4g") if not df.empty else "_no rows_"


def b64(png: bytes) -> str:
    return base64.b64encode(png).decode()


def write_html(path: Path, title: str, source: str, run_id: str, head_to_head: pd.DataFrame,
               load_points: pd.DataFrame, plots: dict[str, bytes], notes: list[str]) -> Path:
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
    .plots img{max-width:49%;margin:4px 0} .meta{color:#666;font-size:12px}
    """
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{css}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>", banner,
        f"<p class='meta'>run {html.escape(run_id)} &middot; source: {html.escape(source)}</p>",
        "<h2>Head to head</h2>",
        head_to_head.to_html(escape=True, na_rep="NULL (not measured)") if not head_to_head.empty else "<p>no data</p>",
        "<h2>Pictures</h2><div class='plots'>",
        *[f"<img alt='{html.escape(name)}' src='data:image/png;base64,{b64(png)}'>" for name, png in plots.items()],
        "</div><h2>Every load point</h2>",
        load_points.to_html(index=False, escape=True, na_rep="NULL", float_format=lambda v: f"{v:.4g}")
        if not load_points.empty else "<p>no load points</p>",
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
        f"Cost: {prices_label}; $ per 1M output tokens = GPU-hour price x GPUs / (output tok/s x 3600) x 1e6.",
    ]
    if source == "emulated":
        notes.insert(0, "Emulated run: timing, power and energy come from the emulator's performance and power model.")
    if min_window_s is not None and min_window_s < 20:
        notes.append(f"Shortest steady-state window {min_window_s:.1f} s: energy claims want >= 20 s (flagged by validation).")
    notes.append(f"Plan: {plan_label}.")
    return notes


def as_dict_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return df.to_dict(orient="records")
