"""Why the static pictures stay on matplotlib while the interactive charts are Altair: both stacks draw the same
figures from the same frames, timed and inspected side by side (results/plot_stacks.md).

One stack would be Altair for both, the static PNGs rendered by vl-convert from the interactive specs. What that
gives up is measured here: render time and PNG size per picture, and whether the static picture names its points
(a PNG has no hover, so the static pictures label points directly, placed by wattbench/report/pictures.py
place_labels so that no two labels and no label and marker overlap; Vega-Lite has no collision-avoiding label
placement, so the interactive charts name points in tooltips)."""

import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "plot_stacks.md"


def frames() -> dict[str, Any]:
    """The pictures' test data (tests/reports/synth.py two_engine_sweep, which test_pictures.py draws): two engines,
    c8/c32/c128 with three repeats each plus a gamma point, ingested into a real warehouse and summarised by the
    report's own queries."""
    sys.path.insert(0, str(ROOT))
    from tests.reports.synth import two_engine_sweep
    from wattbench.report import render
    from wattbench.warehouse import connect

    db = two_engine_sweep(Path(tempfile.mkdtemp(prefix="wb-plots-")))
    with connect(db, read_only=True) as con:
        return render.report_frames(con, "run")


def _median_s(fn, n: int = 5) -> tuple[float, Any]:
    out = fn()  # the first call pays imports and, for vl-convert, its JavaScript engine's start
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _vl_text_marks(spec: Any) -> int:
    """Text marks in a Vega-Lite spec (the only way it can name a point on a static picture)."""
    if isinstance(spec, dict):
        mark = spec.get("mark")
        here = 1 if mark == "text" or (isinstance(mark, dict) and mark.get("type") == "text") else 0
        return here + sum(_vl_text_marks(v) for v in spec.values())
    if isinstance(spec, list):
        return sum(_vl_text_marks(v) for v in spec)
    return 0


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import vl_convert

    from wattbench.report import charts, pictures

    fr = frames()
    points, repeats = fr["points"], fr.get("repeats")
    pairs = {
        "tokens per joule": (
            lambda: pictures.fig_tokens_per_joule(points, "bench", repeats),
            lambda: charts.tokens_per_joule_chart(points, "bench", repeats),
        ),
        "throughput vs latency": (
            lambda: pictures.fig_throughput_latency(points, "bench", repeats),
            lambda: charts.throughput_latency_chart(points, "bench", repeats),
        ),
        "TTFT distribution": (
            lambda: pictures.fig_latency_cdf(fr["requests"], "bench", "ttft_ms"),
            lambda: charts.cdf_chart(fr["requests"], "bench", "ttft_ms"),
        ),
    }
    rows = []
    for name, (mpl_fig, vl_spec) in pairs.items():
        fig = mpl_fig()
        mpl_labels = sum(1 for ax in fig.axes for t in ax.texts if t.get_gid())
        mpl_s, mpl_png = _median_s(lambda mpl_fig=mpl_fig: pictures._png(mpl_fig()))
        spec = vl_spec()
        vl_s, vl_png = _median_s(lambda spec=spec: vl_convert.vegalite_to_png(spec, scale=1.5))
        rows.append((name, mpl_s, len(mpl_png), mpl_labels, vl_s, len(vl_png), _vl_text_marks(spec)))
        print(
            f"{name}: matplotlib {mpl_s:.2f} s {len(mpl_png) / 1e3:.0f} kB, vl-convert {vl_s:.2f} s "
            f"{len(vl_png) / 1e3:.0f} kB",
            flush=True,
        )
    load = os.getloadavg()[0]
    lines = [
        "# Static pictures: matplotlib against Altair + vl-convert (benchmarks/plot_stacks.py)",
        "",
        f"Measured {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')} on {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()}, 1-minute load average {load:.2f}; median of 5 renders after a first one "
        "(imports and vl-convert's JavaScript engine start are not counted). Same frames for both: the pictures' test "
        "data (2 engines, 3 concurrencies x 3 repeats and one gamma point each).",
        "",
        "| picture | matplotlib (s) | PNG (kB) | points named on the picture | Altair + vl-convert (s) | PNG (kB) | "
        "text marks in the spec |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, ms, mb, ml, vs, vb, vt in rows:
        lines.append(f"| {name} | {ms:.2f} | {mb / 1e3:.0f} | {ml} | {vs:.2f} | {vb / 1e3:.0f} | {vt} |")
    lines += [
        "",
        "Decision (docs/REPORTS.md): the static pictures stay on matplotlib. A static picture must name its points "
        "(a PNG has no hover), and only matplotlib lets wattbench place those names so that none overlaps another "
        "or a marker (tests/reports/test_pictures.py checks it on the drawn figure); Vega-Lite has no collision-"
        "avoiding label placement, so the interactive charts name points in their tooltips and their PNGs name none. "
        f"Rendering the interactive specs to PNG also ranged from {min(r[4] / r[1] for r in rows):.1f}x to "
        f"{max(r[4] / r[1] for r in rows):.1f}x matplotlib's time here, at {min(r[5] / r[2] for r in rows):.1f}-"
        f"{max(r[5] / r[2] for r in rows):.1f}x the bytes. What the two share lives in one place: the colours, the "
        "legend order, the point names and the intervals (wattbench/report/pictures.py, which charts.py imports).",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
