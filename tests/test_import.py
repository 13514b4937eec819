"""`wattbench import`: real result files of AIPerf and guidellm (tests/data/imports/README.md says how each was
made), vLLM's result layout, and wattbench's own --save-result, into a real DuckDB warehouse; imported runs in
v_load_points (the load_points query) and in `wattbench report --compare`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main
from wattbench.warehouse import connect

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "imports"
AIPERF_C4 = DATA / "aiperf-0.13.0-c4"
AIPERF_R8 = DATA / "aiperf-0.13.0-poisson-r8"
GUIDELLM = DATA / "guidellm-0.8.1-concurrent-2-4.json"
VLLM_CONSTRUCTED = DATA / "vllm-bench-serve-constructed.json"
VLLM_REAL = DATA / "vllm-bench-serve-0.25.0.json"


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "wh.duckdb"
    monkeypatch.setenv("WATTBENCH_DB", str(path))
    return path


def points(db, run_id=None) -> list[dict]:
    with connect(db, read_only=True) as con:
        df = con.execute(
            "SELECT * FROM v_load_points" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY load_point_id",
            [run_id] if run_id else [],
        ).df()
    return [
        {k: (None if v != v else v) if isinstance(v, float) else v for k, v in r.items()} for r in df.to_dict("records")
    ]


def imported(capsys, *args) -> list[str]:
    assert main(["import", *args]) == 0
    out = capsys.readouterr().out
    return [line.split(" as run ")[1].split()[0] for line in out.splitlines() if " as run " in line]


def test_aiperf_export_with_records(db, capsys):
    agg = json.loads((AIPERF_C4 / "profile_export_aiperf.json").read_text())
    [run_id] = imported(capsys, str(AIPERF_C4))
    with connect(db, read_only=True) as con:
        src, plan = con.execute("SELECT source, plan_name FROM runs WHERE run_id = ?", [run_id]).fetchone()
        n_req = con.execute("SELECT count(*) FROM requests WHERE run_id = ?", [run_id]).fetchone()[0]
    assert src == "imported:aiperf" and "profile_export_aiperf.json" in plan and n_req == 24
    [p] = points(db, run_id)
    assert p["point_label"] == "c4" and p["shape"] == "concurrency" and p["concurrency"] == 4
    assert p["model"] == "llama-3.1-8b" and p["completed"] == 24 and p["failed"] == 0
    assert p["window_s"] == pytest.approx(agg["benchmark_duration"]["avg"])
    # recomputed from AIPerf's own per-request records, the percentiles are AIPerf's
    for ours, tag in (
        ("ttft", "time_to_first_token"),
        ("tpot", "inter_token_latency"),
        ("e2e", "request_latency"),
        ("itl", "inter_chunk_latency"),
    ):
        for q in ("p50", "p90", "p99"):
            assert p[f"{ours}_{q}_ms"] == pytest.approx(agg[tag][q], rel=1e-6), (ours, q)
    assert p["output_tok_s"] == pytest.approx(agg["total_output_tokens"]["avg"] / agg["benchmark_duration"]["avg"])
    # AIPerf's own throughput divides by a slightly different span; within 2 %
    assert p["output_tok_s"] == pytest.approx(agg["output_token_throughput"]["avg"], rel=0.02)
    assert p["energy_j"] is None and p["output_tokens_per_j"] is None  # nothing measured, nothing made up


def test_aiperf_poisson_and_the_same_run_given_twice(db, capsys):
    ids = imported(
        capsys, str(AIPERF_R8 / "profile_export.jsonl"), str(AIPERF_R8), str(AIPERF_R8 / "profile_export_aiperf.json")
    )
    assert len(ids) == 1  # the records file, the folder and the export are one run
    [p] = points(db, ids[0])
    agg = json.loads((AIPERF_R8 / "profile_export_aiperf.json").read_text())
    assert p["point_label"] == "poisson-r8" and p["shape"] == "poisson" and p["rate"] == 8.0
    assert p["completed"] == 16 and p["ttft_p50_ms"] == pytest.approx(agg["time_to_first_token"]["p50"], rel=1e-6)


def test_guidellm_benchmarks_become_load_points(db, capsys):
    data = json.loads(GUIDELLM.read_text())
    [run_id] = imported(capsys, str(GUIDELLM))
    pts = {p["point_label"]: p for p in points(db, run_id)}
    assert set(pts) == {"c2", "c4"} and {p["source"] for p in pts.values()} == {"imported:guidellm"}
    for b in data["benchmarks"]:
        p = pts[f"c{b['config']['strategy']['streams']}"]
        m = b["metrics"]
        assert p["workload"] == "guidellm-in64-out16" and p["completed"] == m["request_totals"]["successful"] == 8
        assert p["window_s"] == pytest.approx(b["duration"])
        assert p["output_tok_s"] == pytest.approx(m["output_token_count"]["successful"]["total_sum"] / b["duration"])
        # means do not depend on how percentiles are interpolated: they must be guidellm's
        assert p["ttft_mean_ms"] == pytest.approx(m["time_to_first_token_ms"]["successful"]["mean"], rel=1e-6)
        assert p["tpot_mean_ms"] == pytest.approx(m["inter_token_latency_ms"]["successful"]["mean"], rel=1e-6)
        # E2E to the last token: at most guidellm's request latency (which runs to the end of the response)
        assert p["e2e_mean_ms"] <= m["request_latency"]["successful"]["mean"] * 1e3
        assert p["itl_p50_ms"] is None  # guidellm reports no chunk gaps: NULL, not a guess


def test_vllm_result_with_details(db, capsys):
    d = json.loads(VLLM_CONSTRUCTED.read_text())
    [run_id] = imported(capsys, str(VLLM_CONSTRUCTED))
    [p] = points(db, run_id)
    assert p["source"] == "imported:vllm" and p["model"] == d["model_id"] and p["point_label"] == "c2"
    assert p["completed"] == 5 and p["failed"] == 1 and p["window_s"] == pytest.approx(d["duration"])
    assert p["requests_s"] == pytest.approx(d["request_throughput"])
    assert p["output_tok_s"] == pytest.approx(d["output_throughput"])
    for m, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        assert p[f"{ours}_p50_ms"] == pytest.approx(d[f"median_{m}_ms"], rel=1e-6), m
        assert p[f"{ours}_p90_ms"] == pytest.approx(d[f"p90_{m}_ms"], rel=1e-6), m
        assert p[f"{ours}_mean_ms"] == pytest.approx(d[f"mean_{m}_ms"], rel=1e-6), m
    with connect(db, read_only=True) as con:
        bad = con.execute(
            "SELECT error_kind, error_text FROM requests WHERE run_id = ? AND error_kind IS NOT NULL", [run_id]
        ).fetchall()
    assert bad == [("imported_error", "Bad Request")]


def test_vllm_result_without_details_uses_vllms_statistics(db, capsys, tmp_path):
    d = json.loads(VLLM_CONSTRUCTED.read_text())
    for k in (
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "latencies",
        "start_times",
        "queue_times",
        "generated_texts",
        "errors",
    ):
        d.pop(k)
    f = tmp_path / "plain.json"
    f.write_text(json.dumps(d))
    [run_id] = imported(capsys, str(f))
    [p] = points(db, run_id)
    assert p["ttft_p99_ms"] == d["p99_ttft_ms"] and p["e2e_p50_ms"] == d["median_e2el_ms"]
    assert p["itl_p90_ms"] == d["p90_itl_ms"] and p["tpot_mean_ms"] == d["mean_tpot_ms"]
    assert p["ttft_p95_ms"] is None  # vLLM did not report it
    assert p["requests_s"] == pytest.approx(d["request_throughput"])
    assert p["goodput_requests_s"] == pytest.approx(d["request_goodput"])


def test_real_vllm_result_imports(db, capsys):
    if not VLLM_REAL.exists():
        pytest.skip(f"{VLLM_REAL.name} not in tests/data/imports yet (a real vLLM 0.25 result on an H200)")
    from wattbench.importers import read_json

    data = read_json(VLLM_REAL)
    docs = data if isinstance(data, list) else [data]
    [run_id] = imported(capsys, str(VLLM_REAL))
    pts = points(db, run_id)
    assert len(pts) == len(docs)
    for d, p in zip(docs, pts):
        assert p["completed"] == d["completed"] and p["window_s"] == pytest.approx(d["duration"])
        assert p["output_tok_s"] == pytest.approx(d["output_throughput"], rel=1e-6)
        for m, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
            if f"p99_{m}_ms" in d:
                assert p[f"{ours}_p99_ms"] == pytest.approx(d[f"p99_{m}_ms"], rel=1e-3), m
            if f"mean_{m}_ms" in d:
                assert p[f"{ours}_mean_ms"] == pytest.approx(d[f"mean_{m}_ms"], rel=1e-3), m


def test_wattbench_save_result_imports_as_vllm(db, capsys, tmp_path):
    from wattbench_agent.loadgen.testserver import server_process

    with server_process(ttft_ms=5, itl_ms=2) as url:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.cli",
                "load",
                "--url",
                url,
                "--model",
                "m",
                "--max-concurrency",
                "2",
                "--num-prompts",
                "10",
                "--output-tokens",
                "5",
                "--save-result",
                "--save-detailed",
                "--result-filename",
                str(tmp_path / "r.json"),
                "--no-progress",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    [run_id] = imported(capsys, str(tmp_path / "r.json"))
    [pt] = points(db, run_id)
    assert pt["completed"] == 10 and pt["requests_s"] == pytest.approx(r["request_throughput"])
    assert pt["ttft_p99_ms"] == pytest.approx(r["p99_ttft_ms"]) and pt["itl_p99_ms"] == pytest.approx(r["p99_itl_ms"])


def test_reimport_replaces_and_compare_pairs_imported_runs(db, capsys):
    a = imported(capsys, str(AIPERF_C4), "--run-id", "aiperf-a")
    b = imported(capsys, str(AIPERF_C4), "--run-id", "aiperf-b")
    again = imported(capsys, str(AIPERF_C4), "--run-id", "aiperf-b")
    assert (a, b, again) == (["aiperf-a"], ["aiperf-b"], ["aiperf-b"])
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM requests WHERE run_id = 'aiperf-b'").fetchone()[0] == 24
    assert main(["report", "--compare", "aiperf-a", "aiperf-b"]) == 0
    out = capsys.readouterr().out
    assert "A = run aiperf-a" in out and "imported:aiperf" in out
    assert "aiperf aiperf-in64-out16:c4" in out and "ttft_p99_ms" in out and "+0.0%" in out
    assert "0 regression(s), 0 improvement(s)" in out
    # a guidellm run against the AIPerf one: nothing to pair, its points are listed as not in run A
    [g] = imported(capsys, str(GUIDELLM))
    assert main(["report", "--compare", "aiperf-a", g]) == 0
    out = capsys.readouterr().out
    assert "guidellm guidellm-in64-out16:c2" in out and "not in run A" in out
    # and the load_points query shows an imported run
    assert main(["sql", "load_points", "--run", "aiperf-a"]) == 0
    assert "imported:aiperf" in capsys.readouterr().out


def test_bad_files_load_nothing_and_say_why(db, capsys, tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps({"hello": 1}))
    cut = tmp_path / "cut.json"
    cut.write_text(VLLM_CONSTRUCTED.read_text()[:200])
    assert main(["import", str(AIPERF_C4), str(junk)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(
            f"wattbench import: {junk}: not a result file wattbench can import; expected one of: vllm bench serve:"
        )
        and "AIPerf" in err
        and "guidellm" in err
    )
    assert main(["import", str(cut)]) == 2
    assert capsys.readouterr().err.startswith(f"wattbench import: {cut}: not JSON (")
    assert main(["import", str(GUIDELLM), "--tool", "vllm"]) == 2
    assert "not a vllm result file" in capsys.readouterr().err
    with connect(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # the good file was not loaded either


@pytest.mark.parametrize("detailed", [False, True])
def test_wattbench_save_result_round_trips_a_steady_state_window(db, capsys, tmp_path, detailed):
    """A steady-state window (warm-up, then a fixed duration, requests finishing in the drain): the file's throughput,
    goodput and output throughput are over one window and one set of requests, and `wattbench import` of it gives
    back the same figures, with or without the per-request lists."""
    from wattbench_agent.loadgen.testserver import server_process

    out = tmp_path / "r.json"
    args = ["--concurrency", "6", "--warmup", "0.5", "--duration", "1.5", "--output-tokens", "20"]
    args += ["--goodput", "ttft:60", "--result-filename", str(out), "--save-result", "--no-progress"]
    with server_process(ttft_ms=30, itl_ms=4) as url:
        p = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "load", "--url", url, "--model", "m", *args]
            + (["--save-detailed"] if detailed else []),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["request_goodput"] <= r["request_throughput"]
    assert r["request_throughput"] == pytest.approx(r["completed"] / r["duration"])
    assert r["output_throughput"] == pytest.approx(r["total_output_tokens"] / r["duration"])
    assert r["wattbench"]["completed_all"] > r["completed"]  # warm-up and drain completions are not in the window
    [run_id] = imported(capsys, str(out))
    [pt] = points(db, run_id)
    assert pt["window_s"] == pytest.approx(r["duration"])
    assert pt["requests_s"] == pytest.approx(r["request_throughput"], rel=1e-9)
    assert pt["goodput_requests_s"] == pytest.approx(r["request_goodput"], rel=1e-9)
    assert pt["output_tok_s"] == pytest.approx(r["output_throughput"], rel=1e-9)
    assert pt["ttft_p99_ms"] == pytest.approx(r["p99_ttft_ms"], rel=1e-6)


def _constructed(tmp_path, name: str, detailed: bool = True, **change) -> Path:
    d = json.loads(VLLM_CONSTRUCTED.read_text())
    if not detailed:
        for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors"):
            d.pop(key, None)
    d.update(change)
    path = tmp_path / name
    path.write_text(json.dumps(d))  # Python writes NaN as the bare token NaN, as some tools do
    return path


@pytest.mark.parametrize(
    ("name", "detailed", "change", "says"),
    [
        ("neg-ttft.json", False, {"p50_ttft_ms": -4.0}, "ttft_ms.p50 = -4.0; expected a finite number >= 0"),
        ("neg-completed.json", False, {"completed": -400}, "completed = -400; expected >= 0"),
        ("nan-window.json", False, {"duration": float("nan")}, "window_s = nan; expected a finite number"),
        ("neg-request-ttft.json", True, {"ttfts": [-0.005] + [0.04] * 5}, "request 0000000: ttft_ms = -5.0;"),
    ],
)
def test_imports_meet_the_ingest_rules_and_name_the_field(db, capsys, tmp_path, name, detailed, change, says):
    """`wattbench import` checked nothing: a negative TTFT, completed -400 and a NaN window went into the warehouse.
    The rules of a bundle's rows apply, and the one line names the file, the load point (and request), field, value."""
    path = _constructed(tmp_path, name, detailed, **change)
    assert main(["import", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"wattbench import: {path}: load point ") and says in err and "nothing was imported" in err
    with connect(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_imported_token_times_that_go_backwards_are_refused(db, capsys, tmp_path):
    """A negative inter-token gap in a file's per-request lists would average into ITL p50 -4.4 ms: refused, named."""
    d = json.loads(VLLM_CONSTRUCTED.read_text())
    itls = [list(x) for x in d["itls"]]
    itls[1][2] = -0.0044
    path = _constructed(tmp_path, "back.json", itls=itls)
    assert main(["import", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "request 0000001: chunk_ns[3] = " in err and "expected token times that never go backwards" in err


def test_an_import_never_replaces_a_measured_run(db, capsys, tmp_path):
    """Before: `wattbench import FILE --run-id R`, R a measured and ingested run, replaced it (its requests became the
    file's) and left its GPU samples and its token file behind, named by no row. Now it is refused with one line
    naming the run and how to pick another id, and nothing changes; an import still replaces an import."""
    from tests.reports.synth import Deployment, simple_point, write_run

    write_run(db, tmp_path, "r", [Deployment("d", points=[simple_point("c1", 2.0)])], source="measured")
    tables = ("runs", "deployments", "load_runs", "requests", "gpu_samples", "point_stats")

    def state():
        with connect(db, read_only=True) as con:
            rows = {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = 'r'").fetchone()[0] for t in tables}
            source = con.execute("SELECT source FROM requests WHERE run_id = 'r' LIMIT 1").fetchone()
        return rows, source, sorted(p.name for p in Path(f"{db}.tokens").iterdir())

    before = state()
    assert before[0]["requests"] == 20 and before[1] == ("measured",) and len(before[2]) == 1
    assert main(["import", str(VLLM_REAL), "--run-id", "r"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "run r is already in the warehouse as a measured run (status complete); an import never replaces it" in err
    assert "give another --run-id, or none" in err and "imported-vllm-" in err
    assert state() == before
    assert main(["import", str(VLLM_REAL), "--run-id", "mine"]) == 0
    assert main(["import", str(VLLM_REAL), "--run-id", "mine"]) == 0  # the same import again replaces itself


def test_imported_runs_read_plainly(db, capsys, tmp_path, monkeypatch):
    """Issue 39 item 7: `wattbench runs` said "(no runs)" beside imported runs; `sql load_points` printed every one of
    its ~90 columns, most NULL for an imported run; `--format json` printed JSON lines that json.load cannot read;
    the head-to-head said an imported run's startup "did not become healthy"."""
    ids = imported(capsys, str(AIPERF_C4)) + imported(capsys, str(GUIDELLM))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "(no runs)" not in out and all(i in out for i in ids) and "imported:aiperf" in out

    assert main(["sql", "load_points", "--run", ids[0]]) == 0
    captured = capsys.readouterr()
    header = captured.out.splitlines()[0]
    assert "output_tok_s" in header and "ttft_p99_ms" in header and "itl_p50_ms_hi" not in header
    assert "--all shows every one" in captured.err
    assert main(["sql", "load_points", "--run", ids[0], "--all"]) == 0
    assert "itl_p50_ms_hi" in capsys.readouterr().out.splitlines()[0]

    assert main(["sql", "load_points", "--run", ids[1], "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and len(rows) == 2 and rows[0]["engine"] == "guidellm"
    assert main(["sql", "load_points", "--run", ids[1], "--format", "jsonl", "--all"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and "itl_p50_ms_hi" in lines[0]

    assert main(["sql", "head_to_head", "--run", ids[0], "--format", "json"]) == 0
    [startup] = [r for r in json.loads(capsys.readouterr().out) if r["figure"] == "startup to healthy"]
    assert startup["note"] == "imported: the tool did not measure startup"


def _aiperf_with_gpu_telemetry(tmp_path: Path, watts=(300.0, 250.0), scrapes: bool = True) -> tuple[Path, float]:
    """The real c4 export with AIPerf's GPU telemetry added (CONSTRUCTED: two GPUs scraped every 100 ms in the layout
    of AIPerf's gpu_telemetry_export.jsonl, their energy counters (MJ) rising at constant power, so the energy over any
    span is known), or, without the scrapes, the export's telemetry summary (each counter's rise over the phase)."""
    import shutil

    folder = tmp_path / "aiperf-gpu"
    shutil.copytree(AIPERF_C4, folder)
    recs = [json.loads(line) for line in (folder / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    start = min(r["metadata"]["request_start_ns"] for r in recs if r["metadata"]["benchmark_phase"] == "profiling")
    agg = json.loads((folder / "profile_export_aiperf.json").read_text())
    duration = agg["benchmark_duration"]["avg"]
    if scrapes:
        lines = []
        for k in range(-20, int(duration * 10) + 20):
            t = start + k * 100_000_000 + 3_000_000  # scrapes off the window's edges: the counter is interpolated
            for i, w in enumerate(watts):
                energy_mj = (5.0e6 + w * (t - start) / 1e9) / 1e6  # counter since the driver loaded, MJ
                lines.append(
                    {
                        "timestamp_ns": t,
                        "dcgm_url": "http://127.0.0.1:9401/metrics",
                        "gpu_index": i,
                        "gpu_uuid": f"GPU-{i}",
                        "gpu_model_name": "NVIDIA H100 80GB HBM3",
                        "hostname": "node",
                        "telemetry_data": {"gpu_power_usage": w, "energy_consumption": energy_mj},
                    }
                )
        (folder / "gpu_telemetry_export.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        return folder, sum(watts) * duration
    phase_s = 2.0  # AIPerf's phase, longer than benchmark_duration
    agg["telemetry_data"]["endpoints"] = {
        "http://127.0.0.1:9401/metrics": {
            "gpus": {
                f"gpu_{i}": {
                    "gpu_index": i,
                    "gpu_name": "NVIDIA H100 80GB HBM3",
                    "gpu_uuid": f"GPU-{i}",
                    "hostname": "node",
                    "metrics": {
                        "gpu_power_usage": {"unit": "W", "avg": w},
                        "energy_consumption": {"unit": "MJ", "avg": w * phase_s / 1e6},
                    },
                }
                for i, w in enumerate(watts)
            }
        }
    }
    (folder / "profile_export_aiperf.json").write_text(json.dumps(agg))
    return folder, sum(watts) * phase_s


@pytest.mark.parametrize("scrapes", [True, False])
def test_aiperf_gpu_telemetry_is_the_runs_energy(db, capsys, tmp_path, scrapes):
    """Issue 39 item 8: AIPerf's --gpu-telemetry export was dropped; it is now the run's energy (J over the window,
    summed over the GPUs), its deployment's telemetry source says it was imported from AIPerf's DCGM scrapes, and
    every energy figure follows from it."""
    folder, joules = _aiperf_with_gpu_telemetry(tmp_path, scrapes=scrapes)
    assert main(["import", str(folder)]) == 0
    out = capsys.readouterr().out
    run_id = out.split(" as run ")[1].split()[0]
    [p] = points(db, run_id)
    assert p["energy_j"] == pytest.approx(joules, rel=1e-6)
    assert p["output_tokens_per_j"] == pytest.approx(p["output_tok_s"] * p["window_s"] / joules, rel=1e-6)
    assert p["j_per_request"] == pytest.approx(joules / p["completed"], rel=1e-6)
    assert p["n_gpus"] == 2 and p["gpu_name"] == "NVIDIA H100 80GB HBM3"
    with connect(db, read_only=True) as con:
        tel = con.execute("SELECT telemetry_source FROM deployments WHERE run_id = ?", [run_id]).fetchone()[0]
    assert tel == "imported:aiperf-dcgm"
    assert ("AIPerf's GPU telemetry" if scrapes else "profiling phase") in out


def _set(field: str, index: int, value, gap: int | None = None):
    def change(data: dict) -> None:
        if gap is None:
            data[field][index] = value
        else:
            data[field][index][gap] = value

    return change


@pytest.mark.parametrize(
    "change, index, says",
    [
        (_set("output_lens", 1, 2**40), 1, "output_lens = 1099511627776; expected an integer up to 2,147,483,647"),
        (_set("output_lens", 1, "16"), 1, "output_lens = '16'; expected an integer up to 2,147,483,647"),
        (
            _set("start_times", 0, "1000.0"),
            0,
            "start_times = '1000.0'; expected a number of seconds no larger than 4e+09",
        ),
        (_set("start_times", 0, 1e300), 0, "start_times = 1e+300; expected a number of seconds no larger than 4e+09"),
        (_set("ttfts", 2, 1e300), 2, "ttfts = 1e+300; expected a number of seconds no larger than 1e+06"),
        (_set("itls", 1, 1e300, gap=3), 1, "itls = 1e+300; expected a number of seconds no larger than 1e+06"),
        (_set("itls", 1, "abc"), 1, "itls = 'abc'; expected a list of the request's inter-token gaps in seconds"),
    ],
)
def test_a_vllm_result_with_a_value_out_of_bounds_is_one_line(db, capsys, tmp_path, change, index, says):
    """Before: output_lens 2^40 was DuckDB's conversion traceback, start times as strings a TypeError, 1e300 s an
    OverflowError (each a traceback; itls 'abc' was taken as no gaps). Every per-request value is a number within
    its bound: one line naming the result, the request, the field and the value; nothing is imported."""
    data = json.loads(VLLM_CONSTRUCTED.read_text())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["import", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"wattbench import: {path}: result 1, request {index}: {says}, or null; nothing was imported"
    if db.exists():  # nothing imported
        with connect(db, read_only=True) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
