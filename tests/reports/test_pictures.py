"""The static pictures, checked on the drawn matplotlib figures (wattbench/report/pictures.py): the plot defects of
issue 16 cannot come back. Points come from a real warehouse (synthetic bundle, ingested, summarised by
sql/load_points.sql) where the test is about the data, and from frames made here where it is about crowding
(eight engines)."""

import itertools
import json
import re

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from wattbench.report import pictures, render
from wattbench.warehouse import connect

from .synth import Deployment, simple_point, two_engine_sweep, write_run


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """Two engines, c8/c32/c128 with three repeats each plus a gamma point: the default plan's shape, repeated."""
    db = two_engine_sweep(tmp_path_factory.mktemp("pictures"))
    with connect(db, read_only=True) as con:
        return render.report_frames(con, "run")


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _labels_overlap(fig, gid: str) -> list:
    renderer = _drawn(fig)
    boxes = [t.get_window_extent(renderer) for ax in fig.axes for t in ax.texts if t.get_gid() == gid]
    return [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)], boxes


def _visible_tick_labels(ax, which="x"):
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(axis.get_view_interval())
    return [
        t.label1
        for t in sorted(axis.get_major_ticks(), key=lambda t: t.get_loc())
        if lo <= t.get_loc() <= hi and t.label1.get_visible() and t.label1.get_text()
    ]


def test_error_bars_are_the_summaries_intervals(frames):
    """One marker per engine x point (never one per repeat); its bars span [lo, hi] of sql/load_points.sql."""
    points = frames["points"]
    fig = pictures.fig_throughput_latency(points, "emulated")
    ax = fig.axes[0]
    closed = [c for c in ax.containers if c.get_label() and "trtllm-like" in c.get_label()]
    assert closed, "no error-bar series for trtllm-like"
    data, _caps, bars = closed[0].lines
    ybars = bars[-1]  # x bars first, then y bars
    ref = pictures.load_order(points[(points["engine"] == "trtllm-like") & (points["shape"] == "concurrency")])
    assert list(data.get_ydata()) == pytest.approx(list(ref["output_tok_s"]))  # 3 markers, not 9
    spans = sorted((float(s[0][1]), float(s[1][1])) for s in ybars.get_segments())
    want = sorted(zip(ref["output_tok_s_lo"], ref["output_tok_s_hi"]))
    assert [v for span in spans for v in span] == pytest.approx([v for span in want for v in span], abs=0.06)
    assert all(hi > lo for lo, hi in spans)  # three repeats that differ: a real interval


def test_open_loop_points_are_hollow_and_off_the_pareto_line(frames):
    points = frames["points"]
    fig = pictures.fig_throughput_latency(points, "emulated")
    ax = fig.axes[0]
    gamma = points[points["shape"] == "gamma"]
    for engine in ("trtllm-like", "vllm-like"):
        (front,) = [ln for ln in ax.lines if (ln.get_gid() or "").startswith(f"frontier:{engine}:")]
        g = gamma[gamma["engine"] == engine].iloc[0]
        assert g["e2e_p50_ms"] not in list(front.get_xdata())
        assert len(set(front.get_xdata())) == 3  # the three fixed-concurrency points
    hollow = [ln for ln in ax.lines if (ln.get_gid() or "").endswith(":open") and ln.get_marker() == "o"]
    assert hollow and all(mcolors.to_hex(ln.get_markerfacecolor()) == "#ffffff" for ln in hollow)


def test_tokens_per_joule_axis_reads_plain_concurrencies_and_has_both_measures(frames):
    fig = pictures.fig_tokens_per_joule(frames["points"], "emulated")
    total, above = fig.axes[:2]
    _drawn(fig)
    for ax in (total, above):
        labels = [t.get_text() for t in _visible_tick_labels(ax)]
        assert labels == ["8", "32", "128"], labels  # not 2^3 .. 2^7, not the open-loop achieved value
    assert "total" in total.get_title() and "above idle" in above.get_title()
    assert total.lines and above.lines  # both measured (idle power known)
    t8 = [ln for ln in total.lines if ln.get_gid() == "sweep:vllm-like"][0].get_ydata()[0]
    a8 = [ln for ln in above.lines if ln.get_gid() == "sweep:vllm-like"][0].get_ydata()[0]
    assert a8 > t8  # above idle: fewer joules per token


def test_latency_cdf_legend_in_load_order_with_distinct_colours_and_clean_log_axis(frames):
    fig = pictures.fig_latency_cdf(frames["requests"], "emulated", "ttft_ms")
    renderer = _drawn(fig)
    for ax in fig.axes:
        names = [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()]
        assert names == ["steady:c8", "steady:c32", "steady:c128", "bursty:gamma-r6-b0.25"]
        colours = [mcolors.to_hex(ln.get_color()) for ln in ax.lines]
        assert len(colours) == len(set(colours)) == 4
        ticks = _visible_tick_labels(ax)
        assert len(ticks) >= 2
        assert all(re.fullmatch(r"\d+(\.\d+)?", t.get_text()) for t in ticks), [t.get_text() for t in ticks]
        boxes = [t.get_window_extent(renderer) for t in ticks]
        assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


def _crowd(n_engines: int = 8) -> pd.DataFrame:
    """Eight engine configs whose points nearly coincide: the worst case for colours and labels."""
    rows = []
    for i in range(n_engines):
        for c, tok in ((8, 1500.0), (32, 4200.0), (128, 7000.0)):
            rows.append(
                {
                    "engine": f"engine-{i}",
                    "workload": "steady",
                    "point_label": f"c{c}",
                    "shape": "concurrency",
                    "concurrency": c,
                    "rate": np.nan,
                    "repeats": 3,
                    "achieved_concurrency": float(c),
                    "output_tok_s": tok * (1 + 0.01 * i),
                    "output_tok_s_lo": tok * 0.98,
                    "output_tok_s_hi": tok * 1.02,
                    "e2e_p50_ms": 600.0 + 3 * c + 4 * i,
                    "e2e_p50_ms_lo": np.nan,
                    "e2e_p50_ms_hi": np.nan,
                    "output_tokens_per_j": tok / 4000,
                    "output_tokens_per_j_lo": np.nan,
                    "output_tokens_per_j_hi": np.nan,
                    "output_tokens_per_j_above_idle": tok / 3000,
                    "precision": "fp8",
                    "tp": 8,
                }
            )
        rows.append(
            {
                "engine": f"engine-{i}",
                "workload": "bursty",
                "point_label": "gamma-r6-b0.25",
                "shape": "gamma",
                "concurrency": np.nan,
                "rate": 6.0,
                "repeats": 3,
                "achieved_concurrency": 1.8 + 0.05 * i,
                "output_tok_s": 390.0 + i,
                "e2e_p50_ms": 590.0 + 2 * i,
                "output_tokens_per_j": 0.24,
                "output_tokens_per_j_above_idle": 0.36,
                "precision": "fp8",
                "tp": 8,
            }
        )
    return pd.DataFrame(rows)


def test_eight_engines_get_eight_colours_and_labels_never_overlap():
    crowd = _crowd(8)
    colours = pictures.engine_colors(crowd["engine"])
    assert len(set(colours.values())) == 8
    assert len(set(pictures.engine_colors([f"e{i}" for i in range(25)]).values())) == 25
    fig = pictures.fig_throughput_latency(crowd, "emulated")
    ax = fig.axes[0]
    drawn = {mcolors.to_hex(c.lines[0].get_color()) for c in ax.containers}
    assert len(drawn) == 8
    legend = [t.get_text() for t in ax.get_legend().get_texts()][:8]
    assert legend == [f"engine-{i} (fp8, tp8)" for i in range(8)]
    overlaps, boxes = _labels_overlap(fig, "point-label")
    assert boxes and not overlaps
    renderer = _drawn(fig)
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    markers = [ax.transData.transform((x, y)) for x, y in zip(crowd["e2e_p50_ms"], crowd["output_tok_s"])]
    assert not any(b.contains(px, py) for b in boxes for px, py in markers)
    fig2 = pictures.fig_tokens_per_joule(crowd, "emulated")
    overlaps, _ = _labels_overlap(fig2, "point-label")
    assert not overlaps


def _two_workloads() -> pd.DataFrame:
    """One engine config, the default plan's two closed-loop workloads: 512/32 interactive (c1, c4, c16) and 512/128
    steady (c8, c32), whose points interleave on every axis."""
    rows = []
    for workload, n_out, points in (
        ("interactive", 32, ((1, 400.0, 30.0), (4, 1300.0, 45.0), (16, 3600.0, 90.0))),
        ("steady", 128, ((8, 1500.0, 700.0), (32, 4200.0, 900.0))),
    ):
        for c, tok, e2e in points:
            rows.append(
                {
                    "engine": "vllm-like",
                    "workload": workload,
                    "point_label": f"c{c}",
                    "shape": "concurrency",
                    "concurrency": c,
                    "rate": np.nan,
                    "repeats": 1,
                    "input_tokens": 512,
                    "output_tokens": n_out,
                    "achieved_concurrency": float(c),
                    "n_gpus": 1,
                    "output_tok_s": tok,
                    "output_tok_s_lo": np.nan,
                    "output_tok_s_hi": np.nan,
                    "e2e_p50_ms": e2e,
                    "e2e_p50_ms_lo": np.nan,
                    "e2e_p50_ms_hi": np.nan,
                    "ttft_p99_ms": 20.0 + c,
                    "tpot_p99_ms": 5.0 + c / 4,
                    "output_tokens_per_j": tok / 2000,
                    "precision": "fp8",
                    "tp": 1,
                }
            )
    return pd.DataFrame(rows)


def test_a_frontier_joins_one_workloads_points_never_two():
    """Issue 39 item 8: the frontiers joined the 512/32 interactive and 512/128 steady points into one line. Now each
    workload (input and output lengths) has its own line, in every panel of both pictures and in the HTML chart."""
    df = _two_workloads()
    full = pictures.frontier_points(df)

    def workloads_of(line, x, y) -> set:
        pairs = set(zip(line.get_xdata(), line.get_ydata()))
        return {r["workload"] for _, r in full.iterrows() if (r[x], r[y]) in pairs}

    fig = pictures.fig_frontiers(df, None, "emulated")
    for ax, (x, _, _, y, _, _) in zip(fig.axes, pictures.FRONTIER_PANELS):
        lines = [ln for ln in ax.lines if (ln.get_gid() or "").startswith("frontier:vllm-like:")]
        assert sorted(ln.get_gid() for ln in lines) == ["frontier:vllm-like:512/128", "frontier:vllm-like:512/32"]
        for ln in lines:
            assert workloads_of(ln, x, y) == {"interactive" if ln.get_gid().endswith("/32") else "steady"}, x
    fig = pictures.fig_throughput_latency(df, "emulated")
    lines = [ln for ln in fig.axes[0].lines if (ln.get_gid() or "").startswith("frontier:")]
    assert len(lines) == 2
    for ln in lines:
        # a step line: its corners are the points' (x, y) pairs, and its steps mix a point's x with the next one's y
        xs = set(ln.get_xdata())
        assert len({r["workload"] for _, r in df.iterrows() if r["e2e_p50_ms"] in xs}) == 1, ln.get_gid()
    from wattbench.report import charts

    spec = charts.throughput_latency_chart(df, "emulated")
    data = {k: v for k, v in spec["datasets"].items()}
    front_name = spec["layer"][0]["data"]["name"]
    assert {r["frontier"] for r in data[front_name]} == {"vllm-like 512/128", "vllm-like 512/32"}
    assert spec["layer"][0]["encoding"]["detail"]["field"] == "frontier"


def test_power_trace_sums_each_deployments_gpus_on_a_common_grid():
    """Two GPUs sampled at slightly different instants (as NVML reads them one after the other): the trace is their
    sum per 100 ms bin, not each reading on its own."""
    t = np.arange(0, 50) * 100_000_000
    samples = pd.concat(
        [
            pd.DataFrame({"deployment_id": "d", "gpu_uuid": "GPU-0", "t_ns": t + 1_000_000, "power_w": 300.0}),
            pd.DataFrame({"deployment_id": "d", "gpu_uuid": "GPU-1", "t_ns": t + 4_000_000, "power_w": 200.0}),
        ]
    )
    series = pictures.power_series(samples)
    assert len(series) == 50 and (series["power_w"] == 500.0).all()
    assert series["t_s"].iloc[1] - series["t_s"].iloc[0] == pytest.approx(0.1)
    jitter = samples.copy()  # GPU-1's 10th reading lands late, in the next bin: no gap and no double count
    jitter.loc[(jitter["gpu_uuid"] == "GPU-1") & (jitter["t_ns"] == 9 * 100_000_000 + 4_000_000), "t_ns"] += 99_000_000
    series = pictures.power_series(jitter)
    assert len(series) == 50 and (series["power_w"] == 500.0).all()


def test_a_tensor_parallel_deployment_shows_each_gpus_trace_under_its_total():
    """Per-GPU traces are the parts of the deployment's total, named by index; one-GPU deployments get none."""
    from wattbench.report import charts

    t = np.arange(0, 30) * 100_000_000
    samples = pd.concat(
        [
            pd.DataFrame(
                {"deployment_id": "tp2", "gpu_uuid": "GPU-aa", "gpu_index": 2, "t_ns": t + 1_000_000, "power_w": 400.0}
            ),
            pd.DataFrame(
                {"deployment_id": "tp2", "gpu_uuid": "GPU-bb", "gpu_index": 3, "t_ns": t + 3_000_000, "power_w": 250.0}
            ),
            pd.DataFrame(
                {"deployment_id": "tp1", "gpu_uuid": "GPU-cc", "gpu_index": 0, "t_ns": t + 2_000_000, "power_w": 300.0}
            ),
        ]
    )
    parts = pictures.power_series(samples, per_gpu=True)
    total = pictures.power_series(samples)
    tp2 = parts[parts["deployment_id"] == "tp2"]
    assert sorted(tp2["gpu"].unique()) == ["GPU 2", "GPU 3"]
    summed = tp2.groupby("t_s")["power_w"].sum().to_numpy()
    assert np.allclose(summed, total[total["deployment_id"] == "tp2"]["power_w"].to_numpy())
    windows = pd.DataFrame(columns=["deployment_id", "engine", "window_start_ns", "window_end_ns"])
    fig = pictures.fig_power_trace(samples, windows, "emulated")
    labels = {line.get_label() for ax in fig.axes for line in ax.get_lines()}
    assert {"GPU 2", "GPU 3"} <= labels and "GPU 0" not in labels
    spec = json.dumps(charts.power_chart(samples, windows, "emulated"))
    assert "power of this GPU (W)" in spec and "GPU 3" in spec and "GPU 0" not in spec


@pytest.fixture(scope="module")
def two_phases(tmp_path_factory):
    """One engine, c16 with three repeats of which one ran bunched and faster (a bimodal point), c64 with three
    spread repeats: the summaries, every repeat and the per-point table from a real warehouse."""
    tmp = tmp_path_factory.mktemp("phases")
    db = tmp / "w.duckdb"
    pts = []
    for r, (rps16, phase16) in enumerate(((8.0, "spread"), (8.2, "spread"), (10.0, "bunched")), start=1):
        pts.append(simple_point("c16", rps16, concurrency=16, output_tokens=16, repeat=r, phase_state=phase16))
        pts.append(simple_point("c64", 20.0 + r, concurrency=64, output_tokens=16, repeat=r, phase_state="spread"))
    write_run(db, tmp, "run", [Deployment("vllm", idle_w=(100.0, 100.0), points=pts)])
    with connect(db, read_only=True) as con:
        frames = render.report_frames(con, "run")
        figures = con.execute("SELECT * FROM v_point_figures WHERE run_id = 'run'").df()
    return frames, figures


def test_every_repeat_is_a_dot_and_a_point_in_two_phases_says_so(two_phases):
    """Each repeat is drawn as a dot at its own figures (a cross where it ran bunched), so a bimodal point shows as
    two groups; the point whose repeats fell in both phase states has dashed interval bars, a label saying its mean is
    not a typical figure, and the per-point table names the states."""
    frames, figures = two_phases
    points, repeats = frames["points"], frames["repeats"]
    c16 = points[points["point_label"] == "c16"].iloc[0]
    assert c16["phase_states"] == "spread x2, bunched x1" and bool(c16["mixed_phase"])
    c64 = points[points["point_label"] == "c64"].iloc[0]
    assert c64["phase_states"] == "spread x3" and not bool(c64["mixed_phase"])
    fig = pictures.fig_throughput_latency(points, "emulated", repeats)
    ax = fig.axes[0]
    dots = {c.get_gid(): c.get_offsets() for c in ax.collections if (c.get_gid() or "").startswith("repeats")}
    assert len(dots["repeats:vllm"]) == 5 and len(dots["repeats-bunched:vllm"]) == 1
    want = sorted(repeats["output_tok_s"])
    assert sorted([*dots["repeats:vllm"][:, 1], *dots["repeats-bunched:vllm"][:, 1]]) == pytest.approx(want)
    bunched_tok_s = repeats.loc[repeats["phase_state"] == "bunched", "output_tok_s"].iloc[0]
    assert dots["repeats-bunched:vllm"][0, 1] == pytest.approx(bunched_tok_s)
    mixed = [ln for ln in ax.lines if (ln.get_gid() or "").endswith(":mixed-phase")]
    assert len(mixed) == 1 and list(mixed[0].get_ydata()) == pytest.approx([c16["output_tok_s"]])
    dashed = [c for c in ax.collections if c.get_linestyle() and c.get_linestyle()[0][1] is not None]
    assert dashed, "the mixed point's interval bars are not dashed"
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "point-label"]
    assert any(t.startswith("c16") and "2 phases" in t for t in texts) and not any("c64 (" in t for t in texts)
    assert "dots: each repeat" in ax.get_title() and "two phase states" in ax.get_title()
    tpj = pictures.fig_tokens_per_joule(points, "emulated", repeats)
    assert any(len(c.get_offsets()) == 5 for c in tpj.axes[0].collections if c.get_gid() == "repeats:vllm")
    table = render.point_summary_table(figures, points)
    cells = dict(zip(table["workload:point"], table["phase of the repeats"]))
    assert cells["steady:c16"] == f"spread x2, bunched x1: {render.MIXED_PHASE_NOTE}"
    assert cells["steady:c64"] == "spread x3"


def test_interactive_charts_carry_every_repeat(two_phases):
    frames, _ = two_phases
    specs = render.interactive_charts(frames, "emulated")
    tl = specs["throughput vs latency"]
    dots = tl["layer"][3]  # under the points' markers, so that hovering a point shows its summary
    rows = dots["data"]["values"] if "values" in dots["data"] else tl["datasets"][dots["data"]["name"]]
    assert len(rows) == 6 and sorted(r["phase"] for r in rows).count("bunched") == 1
    tpj = specs["tokens per joule vs load"]
    values = tpj["datasets"][tpj["data"]["name"]] if "name" in tpj["data"] else tpj["data"]["values"]
    assert sum(1 for r in values if r["kind"] == "repeat") == 12  # six repeats, total and above idle
