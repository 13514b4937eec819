"""What the SLO capacity search costs against a fixed grid that finds the same capacity to the same tolerance
(run: python -m benchmarks.slo_search; also `make bench`). Writes results/slo_search.json and .md.

One emulated engine (`wattbench emulate`: a real HTTP server whose timing comes from the emulator's model), one SLO,
in one run:
- the search (agent/wattbench_agent/loadgen/search.py): bracket from `start` by x2, bisect in log-load to the
  tolerance, then repeated windows at the load found and one step below;
- a fixed grid: every load of a geometric grid whose step is the tolerance (min_load x (1 + tolerance)^k, whole
  streams) up to max_load, once each, as a plan's sweep measures it; then the same repeated windows at its answer and
  the grid load below it, so that its answer carries the same interval. Its capacity is decided by the search's own
  rules (search.decide) from its probes;
- the grid as far as its first miss: what an ascending grid that stops there costs and answers (its probes are the
  fixed grid's first ones, not measured again; as many repeats counted in its cost, not measured at its answer).
Each row: probes, seconds of measured windows, wall seconds, the capacity with its interval, and whether the two
capacities lie within one tolerance step of each other (the same capacity to the same tolerance).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EMULATED = ["--profile", "vllm-like", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--precision", "fp8"]


def _emulator():
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "emulate", "--port", "0", *EMULATED],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in proc.stderr:
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise RuntimeError("the emulator did not start")


def grid_loads(lo: float, hi: float, tolerance: float) -> list[float]:
    """Whole streams from lo to hi, each at most (1 + tolerance) x the one before (the grid's resolution)."""
    out, x = [], float(lo)
    while x < hi:
        out.append(float(round(x)))
        x = max(round(x) + 1, x * (1 + tolerance))
    out.append(float(hi))
    return sorted(set(out))


def _cost(probes) -> dict:
    return {
        "probes": len(probes),
        "window_s": round(sum(p.window_s for p in probes), 2),
        "wall_s": round(sum(p.time_s for p in probes), 2),
    }


def _capacity(result) -> dict:
    return {"value": result.value, "lo": result.lo, "hi": result.hi, "status": result.status}


def main(argv: list[str] | None = None) -> int:
    from wattbench_agent.loadgen import LoadSpec, run_load
    from wattbench_agent.loadgen.search import (
        SearchResult,
        SearchSpec,
        _neighbour_below,
        decide,
        measure_probe,
        probe_line,
        run_search,
    )

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results"), help="folder for slo_search.json and .md")
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--max-load", type=float, default=64.0)
    ap.add_argument("--duration", type=float, default=2.0)
    a = ap.parse_args(argv)

    search = SearchSpec(
        over="concurrency",
        slo={"ttft_ms": a.ttft_ms},
        start=4,
        min_load=1,
        max_load=a.max_load,
        tolerance=a.tolerance,
        repeats=3,
        max_probes=40,
        max_time_s=900,
    ).validate()
    proc, url = _emulator()
    began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load1 = os.getloadavg()[0]

    def measure(spec, probe, on_record=None, stop_event=None):
        return run_load(spec, slo=search.slo, on_record=on_record, stop_event=stop_event)

    try:
        base = LoadSpec(
            url=url,
            model="llama-3.1-8b",
            api="completions",
            shape="concurrency",
            concurrency=4,
            input_tokens=128,
            output_tokens=32,
            warmup_s=0.5,
            ramp_s=0.5,
            duration_s=a.duration,
        )
        print(f"search: {search.slo_text()}, tolerance {a.tolerance:g}", flush=True)
        found = run_search(base, search, measure, log=lambda line: print("  " + line, flush=True))
        grid = SearchResult(search=search, probes=[], status="found", shape="concurrency")
        print("fixed grid:", flush=True)
        for x in grid_loads(1, a.max_load, a.tolerance):
            p = measure_probe(base, search, measure, x, "grid", len(grid.probes) + 1, 1)
            grid.probes.append(p)
            print("  " + probe_line(p, search), flush=True)
        decide(grid)  # the grid's answer from its points alone, then the same repeated windows there and one below
        if grid.value is not None:
            met = [p.load for p in grid.probes if p.passed]
            below = _neighbour_below("concurrency", grid.value, a.tolerance, 1, met)
            for _ in range(search.repeats - 1):
                for x in [v for v in (below, grid.value) if v is not None]:
                    n = 1 + sum(1 for p in grid.probes if p.load == x)
                    p = measure_probe(base, search, measure, x, "repeat", len(grid.probes) + 1, n)
                    grid.probes.append(p)
                    print("  " + probe_line(p, search), flush=True)
        grid = decide(SearchResult(search=search, probes=grid.probes, status="found", shape="concurrency"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    repeats = [p for p in grid.probes if p.phase == "repeat"]
    fixed = [p for p in grid.probes if p.phase == "grid"]
    # an ascending grid that stops at its first miss: its answer from those points (its repeats, as many as the fixed
    # grid's, are counted in its cost but were not measured at its answer)
    first_miss = next((i for i, p in enumerate(fixed) if not p.passed), len(fixed) - 1)
    ascending = fixed[: first_miss + 1]
    stopped = decide(SearchResult(search=search, probes=list(ascending), status="found", shape="concurrency"))
    agree = (
        found.value is not None
        and grid.value is not None
        and abs(math.log(found.value / grid.value)) <= math.log(1 + a.tolerance) + 1e-9
    )
    doc = {
        "what": "SLO capacity search against a fixed grid of the same tolerance, one emulated engine, one run",
        "date": began,
        "host_load_1m_at_start": round(load1, 2),
        "engine": "wattbench emulate " + " ".join(EMULATED),
        "workload": {"input_tokens": 128, "output_tokens": 32, "warmup_s": 0.5, "duration_s": a.duration},
        "slo": search.slo,
        "attainment": search.attainment,
        "tolerance": a.tolerance,
        "bounds_streams": [1, a.max_load],
        "search": {**_cost(found.probes), "capacity": _capacity(found), "loads": [p.load for p in found.probes]},
        "fixed_grid": {**_cost(grid.probes), "capacity": _capacity(grid), "grid": [p.load for p in fixed]},
        "grid_to_first_miss": {
            **{k: v + _cost(repeats)[k] for k, v in _cost(ascending).items()},
            "capacity_before_repeats": _capacity(stopped),
            "first_miss_at": fixed[first_miss].load,
        },
        "same_capacity_within_tolerance": agree,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "slo_search.json").write_text(json.dumps(doc, indent=1) + "\n")
    rows = [
        ("search (bracket, bisect, repeats)", found.probes, found),
        ("fixed grid (every point, then the same repeats)", grid.probes, grid),
        ("grid stopped at its first miss (+ as many repeats, not measured)", ascending + repeats, stopped),
    ]
    lines = [
        f"# SLO capacity search against a fixed grid ({began}, 1-min load {load1:.2f} at start)",
        "",
        f"{doc['engine']}; 128 in / 32 out; windows of {a.duration:g} s after 0.5 s warm-up; {search.slo_text()}; "
        f"tolerance {a.tolerance:g}; streams 1-{a.max_load:g}.",
        "",
        "| method | probes | window-seconds | wall seconds | capacity [95% interval] |",
        "|---|---:|---:|---:|---|",
    ]
    for name, probes, res in rows:
        c = _cost(probes)
        hi = "-" if res.hi is None else f"{res.hi:g}"
        cap = "-" if res.value is None else f"{res.value:g} [{res.lo:g}, {hi}]"
        lines.append(f"| {name} | {c['probes']} | {c['window_s']:.1f} | {c['wall_s']:.1f} | {cap} streams |")
    lines += [
        "",
        f"Same capacity within one tolerance step (search and fixed grid): {'yes' if agree else 'NO'}. The grid "
        f"stopped at its first miss, {fixed[first_miss].load:g} streams, would have answered "
        f"{'-' if stopped.value is None else f'{stopped.value:g}'} streams from its points.",
    ]
    (out / "slo_search.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
