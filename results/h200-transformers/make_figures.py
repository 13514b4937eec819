"""Re-make this folder's figures and table from the committed bundle, with the same SQL and plot code the
report assets use:  .venv/bin/python results/h200-transformers/make_figures.py"""

from pathlib import Path

from assets import reporting
from resources.warehouse import connect, ingest_bundle

HERE = Path(__file__).resolve().parent
DB = HERE / "h200.duckdb"

DB.unlink(missing_ok=True)
with connect(DB) as con:
    ingest_bundle(con, HERE / "bundle")
    run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]
    points = con.execute("SELECT * FROM v_load_points WHERE run_id = ? ORDER BY concurrency", [run_id]).df()
    samples = con.execute("SELECT deployment_id, gpu_uuid, t_ns, power_w FROM gpu_samples WHERE run_id = ?", [run_id]).df()
    windows = con.execute("SELECT deployment_id, load_point_id, window_start_ns, window_end_ns FROM load_runs "
                          "WHERE run_id = ?", [run_id]).df()
    reqs = con.execute("SELECT load_point_id, ttft_ms, in_window, error_kind FROM requests WHERE run_id = ?", [run_id]).df()
DB.unlink()
label = "measured, 1x H200, transformers serve, random 1B"
for name, png in {
    "tokens_per_joule.png": reporting.plot_tokens_per_joule(points, label),
    "power_trace.png": reporting.plot_power_trace(samples, windows, label),
    "throughput_latency.png": reporting.plot_throughput_latency(points, label),
    "ttft_cdf.png": reporting.plot_ttft_cdf(reqs, label),
}.items():
    (HERE / name).write_bytes(png)
    print(HERE / name)
