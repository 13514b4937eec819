"""Re-make this folder's figures from the committed bundles with the warehouse's own SQL (v_point_figures,
v_engine_contrasts, gpu_samples):  .venv/bin/python results/h200-vllm/make_figures.py"""

import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from wattbench.plan import load_plan, plan_run_fields  # noqa: E402
from wattbench.warehouse import connect, ingest_bundle, set_run_fields  # noqa: E402
from wattbench_agent.bundle import read_manifest, unpacked  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE.parents[1] / "plans" / "h200-vllm.yaml"
COLORS = {"vllm-bf16": "#1f77b4", "vllm-fp8": "#d62728"}
LABEL = "measured: vLLM 0.25.0, 1x H200, Llama-3.1-8B shape (random weights); 95% intervals over 3 repeats"

with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "w.duckdb") as con:
    plan, sha = load_plan(PLAN)
    fields = plan_run_fields(plan, PLAN, sha)
    for name in ("bundle-steady.tar.xz", "bundle-long-bursty.tar.xz"):
        with unpacked(HERE / name) as folder:
            ingest_bundle(con, folder)
            set_run_fields(con, read_manifest(folder)["run_id"], fields)
    fig_rows = con.execute("SELECT * FROM v_point_figures WHERE workload = 'steady'").df()
    ratios = con.execute(
        "SELECT * FROM v_engine_contrasts WHERE engine = 'vllm-fp8' AND metric IN "
        "('output_tok_s', 'output_tokens_per_j') ORDER BY workload, point_label"
    ).df()
    trace = con.execute("""SELECT s.deployment_id, s.t_ns, s.power_w, s.sm_clock_mhz, l.load_point_id
                           FROM gpu_samples s LEFT JOIN load_runs l ON l.run_id = s.run_id
                            AND l.deployment_id = s.deployment_id
                            AND s.t_ns BETWEEN l.window_start_ns AND l.window_end_ns
                           WHERE s.run_id = 'h200-vllm-steady' AND s.deployment_id = 'vllm-bf16'
                           ORDER BY s.t_ns""").df()

# 1. tokens per joule (total and above idle) and throughput against streams, with 95% intervals
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, metrics, ylabel in (
    (axes[0], ("output_tok_s",), "output tokens/s"),
    (axes[1], ("output_tokens_per_j", "output_tokens_per_j_above_idle"), "output tokens per joule"),
):
    for engine, df in fig_rows.groupby("engine"):
        for metric in metrics:
            d = df[df["metric"] == metric].sort_values("concurrency")
            style = "--" if metric.endswith("above_idle") else "-"
            ax.errorbar(
                d["concurrency"],
                d["estimate"],
                yerr=[d["estimate"] - d["lo"], d["hi"] - d["estimate"]],
                fmt="o" + style,
                color=COLORS[engine],
                capsize=4,
                label=f"{engine}{' above idle' if metric.endswith('above_idle') else ''}",
            )
    ax.set_xscale("log")
    ax.set_xticks([16, 64, 256], ["16", "64", "256"])
    ax.minorticks_off()
    ax.set_xlabel("closed-loop streams (512 in / 128 out)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle(LABEL, fontsize=9)
fig.savefig(HERE / "throughput_tokens_per_joule.png", dpi=110, bbox_inches="tight")

# 2. fp8 / bf16 ratios with their paired 95% intervals, against the seed article's 1.8-2.1x
fig, ax = plt.subplots(figsize=(7.5, 3.6))
labels = [f"{r.workload}:{r.point_label}" for r in ratios.itertuples() if r.metric == "output_tok_s"]
for i, (metric, color) in enumerate((("output_tok_s", "#444"), ("output_tokens_per_j", "#2ca02c"))):
    d = ratios[ratios["metric"] == metric]
    x = [j + (i - 0.5) * 0.25 for j in range(len(d))]
    ax.errorbar(
        x,
        d["ratio"],
        yerr=[d["ratio"] - d["ratio_lo"], d["ratio_hi"] - d["ratio"]],
        fmt="o",
        color=color,
        capsize=4,
        label={"output_tok_s": "output tokens/s", "output_tokens_per_j": "tokens per joule"}[metric],
    )
ax.axhspan(1.8, 2.1, color="#ff7f0e", alpha=0.2, label="seed article's claim (1.8-2.1x)")
ax.axhline(1.0, color="#999", lw=0.8)
ax.set_xticks(range(len(labels)), labels, fontsize=8)
ax.set_ylabel("fp8 / bf16")
ax.set_ylim(0.8, 2.3)
ax.grid(alpha=0.3, axis="y")
ax.legend(fontsize=8, loc="upper left")
ax.set_title("fp8 (online) against bf16, paired repeats, 95% intervals", fontsize=9)
fig.savefig(HERE / "fp8_vs_bf16.png", dpi=110, bbox_inches="tight")

# 3. power and SM clock over the bf16 engine's steady run: the 700 W cap holds from 16 streams up
fig, ax = plt.subplots(figsize=(9, 3.2))
t0 = trace["t_ns"].min()
ax.plot((trace["t_ns"] - t0) / 1e9, trace["power_w"], lw=0.8, color="#333", label="power (W)")
ax2 = ax.twinx()
ax2.plot((trace["t_ns"] - t0) / 1e9, trace["sm_clock_mhz"], lw=0.6, color="#1f77b4", alpha=0.6, label="SM clock (MHz)")
for lp, d in trace.dropna(subset=["load_point_id"]).groupby("load_point_id"):
    ax.axvspan((d["t_ns"].min() - t0) / 1e9, (d["t_ns"].max() - t0) / 1e9, color="#ff7f0e", alpha=0.12)
    ax.text((d["t_ns"].min() - t0) / 1e9, 715, lp.split(":")[-1], fontsize=6)
ax.axhline(700, color="#d62728", lw=0.8, ls="--")
ax.set_ylim(0, 760)
ax2.set_ylim(0, 2100)
ax.set_xlabel("seconds (shaded: bf16's windows; fp8's ran in between)")
ax.set_ylabel("W (NVML instant power)")
ax2.set_ylabel("SM clock (MHz)")
ax.set_title("vllm-bf16 on the H200: power at the 700 W limit, SM clock lowered under load", fontsize=9)
fig.savefig(HERE / "power_clock_bf16.png", dpi=110, bbox_inches="tight")
print("wrote", *(p.name for p in sorted(HERE.glob("*.png"))))
