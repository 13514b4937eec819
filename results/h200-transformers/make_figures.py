"""Re-make this folder's figures and table from the committed bundle, with the same SQL and plot code the
report assets use:  .venv/bin/python results/h200-transformers/make_figures.py"""

from pathlib import Path

from wattbench.report import pictures, render
from wattbench.warehouse import connect, ingest_bundle

HERE = Path(__file__).resolve().parent
DB = HERE / "h200.duckdb"

DB.unlink(missing_ok=True)
with connect(DB) as con:
    ingest_bundle(con, HERE / "bundle")
    run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]
    frames = render.report_frames(con, run_id)  # point summaries (sql/load_points.sql), samples, windows, requests
DB.unlink()
label = "measured, 1x H200, transformers serve, random 1B"
for name, png in {
    "tokens_per_joule.png": pictures.plot_tokens_per_joule(frames["points"], label),
    "power_trace.png": pictures.plot_power_trace(frames["samples"], frames["windows"], label),
    "throughput_latency.png": pictures.plot_throughput_latency(frames["points"], label),
    "ttft_cdf.png": pictures.plot_latency_cdf(frames["requests"], label, "ttft_ms"),
}.items():
    (HERE / name).write_bytes(png)
    print(HERE / name)
