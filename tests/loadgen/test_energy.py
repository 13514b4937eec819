"""Energy and cost with `wattbench load` and `load --search` on their own (issue 39 item 4; loadgen/energy.py): the
emulator's own telemetry end to end (a real emulator process: a search's capacity answer with tok/J, J per request and
$ per 1M output tokens, each with its 95% interval, and its JSON and --out files imported as runs whose warehouse
figures are the same numbers), NVML through the project's fake NVML replaying a real H200 recording, and the one-line
refusals of telemetry that cannot be used."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from functools import partial

import pytest
import yaml

from tests.emulator.conftest import start_emulator, stop
from wattbench.warehouse import connect

from .conftest import ROOT, wattbench_load

TRACE = ROOT / "tests" / "telemetry" / "traces" / "h200_trace.json"
FIGURES = ("output_tok_s", "output_tokens_per_j", "j_per_request", "usd_per_1m_output_tokens")
PRICES = ["--gpu-hour-usd", "2.5", "--energy-kwh-usd", "0.1", "--pue", "1.2"]


load = partial(wattbench_load, timeout=300)


def wattbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def emulator():
    proc, url = start_emulator("--profile", "vllm-like", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    yield url
    stop(proc)


@pytest.fixture(scope="module")
def search(emulator, tmp_path_factory):
    """A concurrency search of the emulated vLLM-like 8B on one H100, with its own telemetry and prices: every load
    from 2 to 8 streams meets the loose SLO, so the answer is "at least 8 streams" with two windows there."""
    tmp = tmp_path_factory.mktemp("energy")
    p = load(
        "--url", emulator, "--backend", "openai", "--search", "concurrency", "--concurrency", "2",
        "--goodput", "ttft:5000", "tpot:500", "--input-tokens", "64", "--output-tokens", "32",
        "--duration", "1.5", "--warmup", "0.5", "--search-max", "8", "--search-repeats", "2",
        "--telemetry", "emulator", "--idle", "0.5", *PRICES, "--json", "--out", str(tmp / "r.jsonl"),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    (tmp / "search.json").write_text(p.stdout)
    return json.loads(p.stdout), p.stderr, tmp


def test_the_capacity_answer_carries_energy_and_cost_with_intervals(search):
    doc, said, _ = search
    cap = doc["capacity"]
    assert cap["bound"] == "at_least" and cap["value"] == 8 and cap["repeats_at_capacity"] == 2
    assert cap["energy_source"] == "emulated" and cap["telemetry"] == "emulated" and cap["n_gpus"] == 1
    for name in (*FIGURES, "energy_usd_per_1m_output_tokens", "j_per_request_above_idle"):
        f = cap[name]
        assert f["n"] == 2 and 0 < f["lo"] <= f["estimate"] <= f["hi"], (name, f)
    # the figures of each window are the window's own: its tokens over its energy, the price over its throughput
    for s in doc["probe_summaries"]:
        e = s["energy"]
        assert e["energy_j"] > 0 and e["source"] == "emulated"
        assert e["output_tokens_per_j"] == pytest.approx(s["output_tokens_in_window"] / e["energy_j"])
        assert e["j_per_request"] == pytest.approx(e["energy_j"] / s["finished_in_window"])
        tok_s = s["output_tokens_in_window"] / s["window_s"]
        assert e["usd_per_1m_output_tokens"] == pytest.approx(2.5 * 1 / (tok_s * 3600) * 1e6)
        assert e["energy_usd_per_1m_output_tokens"] == pytest.approx(
            e["energy_j"] / s["output_tokens_in_window"] * 1e6 / 3.6e6 * 0.1 * 1.2
        )
    # the mean over the capacity's windows and its t interval on the log scale (sql/views.sql log_mean_bound)
    at = [s["energy"]["output_tokens_per_j"] for s, b in zip(doc["probe_summaries"], doc["probes"]) if b["load"] == 8]
    m = sum(at) / 2
    sd = math.sqrt(sum((v - m) ** 2 for v in at))
    half = 12.706 * sd / (m * math.sqrt(2))
    assert (cap["output_tokens_per_j"]["lo"], cap["output_tokens_per_j"]["hi"]) == pytest.approx(
        (m * math.exp(-half), m * math.exp(half))
    )
    line = next(x for x in said.splitlines() if x.startswith("at the capacity"))
    assert "energy emulated, emulated telemetry on 1 GPU(s)" in line
    assert "tok/J" in line and "J per request" in line and "per 1M output tokens (GPU-hours)" in line
    assert "tok/J" in next(x for x in said.splitlines() if x.startswith("probe  1"))


@pytest.mark.parametrize("what", ["json", "out"])
def test_the_search_imports_as_a_run_with_the_same_figures(search, what, tmp_path):
    """`wattbench import` of the --json document (the probes' own statistics) and of the --out file (every request,
    its figures recomputed by the warehouse) files the search as a run: its capacity, and the warehouse's figures at
    it (slo_capacity over the probes at the capacity) are the answer's own, interval for interval."""
    doc, _, folder = search
    db = tmp_path / "w.duckdb"
    path = folder / ("search.json" if what == "json" else "r.jsonl")
    p = wattbench("import", str(path), "--db", str(db))
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.split(" as run ")[1].split()[0]
    with connect(db, read_only=True) as con:
        row = con.execute("SELECT * FROM slo_capacity WHERE run_id = ?", [run_id]).fetchdf().iloc[0]
        dep = con.execute("SELECT telemetry_source, n_gpus, gpu_name FROM deployments WHERE run_id = ?", [run_id])
        tel, n_gpus, gpu = dep.fetchone()
        src, price = con.execute("SELECT source, gpu_price_per_hour FROM runs WHERE run_id = ?", [run_id]).fetchone()
        probes = con.execute("SELECT count(*) FROM load_runs WHERE run_id = ? AND probe IS NOT NULL", [run_id])
        n_probes = probes.fetchone()[0]
    cap = doc["capacity"]
    assert (src, tel, n_gpus, price) == ("imported:wattbench", "emulated", 1, 2.5)
    assert gpu == "NVIDIA H100 80GB HBM3" and n_probes == len(doc["probes"])
    assert row["status"] == "at_least" and row["capacity"] == cap["value"] and row["repeats_at_capacity"] == 2
    for name in FIGURES:
        for end in ("estimate", "lo", "hi"):
            column = name if end == "estimate" else f"{name}_{end}"
            assert row[column] == pytest.approx(cap[name][end], rel=1e-6), (name, end)


def test_a_load_point_and_its_result_file_import_with_their_energy(emulator, tmp_path):
    """`wattbench load --json` (a summary) and `--save-result` (vLLM's keys) with telemetry: each imports as a run
    whose load point has the window's energy and the figures that follow from it."""
    out = tmp_path / "vllm.json"
    p = load(
        "--url", emulator, "--backend", "openai", "--concurrency", "4", "--input-tokens", "64", "--output-tokens",
        "32", "--duration", "1.5", "--warmup", "0.5", "--telemetry", "emulator", *PRICES, "--json", "--save-result",
        "--result-filename", str(out), "--no-progress",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    e = summary["energy"]
    assert e["energy_j"] > 0 and e["telemetry"] == "emulated" and "energy" in p.stderr
    (tmp_path / "summary.json").write_text(p.stdout)
    db = tmp_path / "w.duckdb"
    for path in (tmp_path / "summary.json", out):
        r = wattbench("import", str(path), "--db", str(db))
        assert r.returncode == 0, r.stderr
        run_id = r.stdout.split(" as run ")[1].split()[0]
        with connect(db, read_only=True) as con:
            pt = con.execute(
                "SELECT energy_j, output_tokens_per_j, j_per_request, usd_per_1m_output_tokens FROM v_load_points "
                "WHERE run_id = ?",
                [run_id],
            ).fetchone()
        assert pt[0] == pytest.approx(e["energy_j"]) and pt[1] == pytest.approx(e["output_tokens_per_j"])
        assert pt[2] == pytest.approx(e["j_per_request"]) and pt[3] == pytest.approx(e["usd_per_1m_output_tokens"])


def test_nvml_energy_on_the_gpus_named_through_the_fake_nvml(fast_server):
    """`--telemetry nvml --gpus 0` on a host whose NVML is the fake one replaying a real H200 recording: GPU 0 is the
    recorded board, the window's energy comes from its energy counter, and the figures follow from it."""
    facts = json.loads(TRACE.read_text())
    calls = facts["devices"][0]["calls"]
    name, limit_w = calls["nvmlDeviceGetName"][0][2], calls["nvmlDeviceGetEnforcedPowerLimit"][0][2] / 1000
    p = load(
        "--url", fast_server, "--model", "m", "--api", "completions", "--concurrency", "2", "--duration", "1",
        "--output-tokens", "8", "--telemetry", "nvml", "--gpus", "0", "--gpu-hour-usd", "3", "--json",
        env={"WATTBENCH_FAKE_NVML": str(TRACE)},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    e = s["energy"]
    assert (e["telemetry"], e["source"], e["n_gpus"], e["gpu_name"]) == ("nvml", "measured", 1, name)
    assert 0 < e["mean_power_w"] <= limit_w * 1.05 and e["energy_j"] == pytest.approx(e["mean_power_w"] * s["window_s"])
    assert e["output_tokens_per_j"] == pytest.approx(s["output_tokens_in_window"] / e["energy_j"])
    tok_s = s["output_tokens_in_window"] / s["window_s"]
    assert e["usd_per_1m_output_tokens"] == pytest.approx(3 / (tok_s * 3600) * 1e6)
    assert e["energy_usd_per_1m_output_tokens"] is None and "no $ per kWh" in e["note"]


@pytest.fixture(scope="module")
def exporter():
    """The recorded dcgm-exporter page of two H200s, served on loopback with each energy counter advancing at the
    board's recorded power (tests/telemetry/test_dcgm.py)."""
    import threading
    from http.server import ThreadingHTTPServer

    from tests.telemetry.test_dcgm import _Exporter

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()
    srv.server_close()


def test_dcgm_energy_on_the_gpu_named(fast_server, exporter):
    """`--telemetry dcgm=URL --gpus UUID`: the window's energy is that GPU's counter on the exporter's page, which
    advances at its recorded 77.5 W; the other board on the page is not counted. Prices from a plan (`--prices-from`),
    the flags winning over it."""
    from tests.telemetry.test_dcgm import GPU1

    p = load(
        "--url", fast_server, "--model", "m", "--api", "completions", "--concurrency", "2", "--duration", "1.5",
        "--output-tokens", "8", "--telemetry", f"dcgm={exporter}", "--gpus", GPU1, "--json",
        "--prices-from", str(ROOT / "plans" / "default.yaml"), "--pue", "1.1",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    e = s["energy"]
    assert (e["telemetry"], e["source"], e["n_gpus"], e["gpu_name"]) == ("dcgm", "measured", 1, "NVIDIA H200")
    assert e["mean_power_w"] == pytest.approx(77.512, rel=0.1)
    plan = yaml.safe_load((ROOT / "plans" / "default.yaml").read_text())["prices"]
    assert e["prices"] == {"gpu_hour_usd": plan["gpu_hour_usd"], "energy_kwh_usd": plan["energy_kwh_usd"], "pue": 1.1}
    assert e["energy_usd_per_1m_output_tokens"] == pytest.approx(
        e["energy_j"] / s["output_tokens_in_window"] * 1e6 / 3.6e6 * plan["energy_kwh_usd"] * 1.1
    )
    assert e["output_tokens_per_j"] == pytest.approx(s["output_tokens_in_window"] / e["energy_j"])


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--telemetry", "nvml", "--gpus", "3"], "--gpus 3: "),
        (["--telemetry", "dcgm=http://127.0.0.1:9/metrics"], "--telemetry dcgm: dcgm-exporter at http://127.0.0.1:9"),
        (["--telemetry", "watts"], "--telemetry 'watts': expected nvml"),
        (["--telemetry", "emulator"], "--telemetry emulator: emulator telemetry at"),
        (["--prices-from", "/no/such/plan.yaml"], "--prices-from /no/such/plan.yaml: cannot read it"),
    ],
)
def test_telemetry_that_cannot_be_used_is_one_line(fast_server, flags, says):
    p = load(
        "--url", fast_server, "--model", "m", "--concurrency", "1", "--duration", "0.5", *flags,
        env={"WATTBENCH_FAKE_NVML": str(TRACE)},
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("wattbench load: ") and says in lines[0], p.stderr
    assert "Traceback" not in p.stderr
