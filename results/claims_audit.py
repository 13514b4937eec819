"""Every quantitative claim of README.md, docs/RESULTS.md, docs/MEASUREMENT.md and results/*/README.md about committed
data, recomputed from the committed bundles' per-request records (results/claims_audit.md has the table and what was
corrected):

    python results/claims_audit.py              # recompute, print the audit table
    python results/claims_audit.py --write      # and write it into results/claims_audit.md
    python results/claims_audit.py --check      # exit 1 where results/claims_audit.md is not what the data give
    python results/claims_audit.py --tables     # the docs' result tables made again from the bundles

Every figure is recomputed here, not read from the summaries the agent stored or the warehouse's views
(benchmarks/filed_predictions.py bundle_windows: tokens whose events arrived in the window, counter energy, the
latencies of the successful requests sent in the window, the step decomposition as filed, the GPU samples' clock
reasons); intervals are docs/MEASUREMENT.md's (the mean of the repeats with a t interval on the log scale; a latency
percentile the mean of each repeat's own; engines paired by repeat, the geometric mean of per-repeat ratios). A few
claims rest on what only the engine's /metrics or a benchmark file holds; they name the file or view they read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from wattbench.twin.evaluate import LABEL as LABELS  # the twin's names of its figures

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from the repository root: benchmarks/ is not installed

AUDIT = ROOT / "results" / "claims_audit.md"
BEGIN, END = "<!-- claims_audit: begin (python results/claims_audit.py --write) -->", "<!-- claims_audit: end -->"
# the committed real-hardware bundles, one folder (transformers serve) kept unpacked
# (results/gpu-choice's H100 bundles came after this audit: their README's figures are the warehouse's, made again by
# the commands it lists; adding them here would move the audit's "every committed bundle" counts)
BUNDLES = [
    *sorted(b for b in (ROOT / "results").glob("*/bundle-*.tar.xz") if b.parent.name != "gpu-choice"),
    ROOT / "results" / "h200-transformers" / "bundle",
]
# 16 closed-loop streams of 512 in / 128 out on the 8B model, one entry a run (board, server start, date)
C16 = [
    ("h200-vllm-steady", "steady"),
    ("h200-vllm-8b-unit", ["steady16", "ref16u"]),
    ("h200-vllm-8b-sweep-decode", "ref16"),
    ("h200-vllm-8b-sweep-decode-fp8", "ref16"),
    ("h200-vllm-8b-board", "steady16"),
    ("h200-vllm-steps-gpu1", "fixed16"),
]


# The warehouse's figures with the interval of the mean within the run's one server start (every committed run had
# one: schema 12's point_figures gives each figure's interval for another start, and its within-start sd, from which
# the within-start interval is m x exp(-+ t(0.975, k - 1) x w / sqrt(k))), the interval the claims quote.
WITHIN_START_FIGURES = (
    "SELECT run_id, engine, workload, point_label, metric, estimate, "
    "CASE WHEN lo IS NOT NULL THEN estimate * exp(-t975(repeats - 1) * within_start_sd / sqrt(repeats)) END, "
    "CASE WHEN hi IS NOT NULL THEN estimate * exp(t975(repeats - 1) * within_start_sd / sqrt(repeats)) END "
    "FROM v_point_figures"
)


def t_log(values: list[float]) -> tuple[float, float | None, float | None]:
    """The mean and its 95% t interval on the log scale within the run's one server start (m x exp(-+ t s / (m sqrt
    n)); docs/MEASUREMENT.md's one_start scope: it says nothing of another start)."""
    v = np.asarray(values, dtype=float)
    m = float(v.mean())
    if len(v) < 2:
        return m, None, None
    h = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / (m * np.sqrt(len(v)))
    return m, m * float(np.exp(-h)), m * float(np.exp(h))


def paired(num: list[float], den: list[float]) -> tuple[float, float | None, float | None]:
    """The geometric mean of per-repeat ratios with a t interval on their logs."""
    x = np.log(np.asarray(num, dtype=float) / np.asarray(den, dtype=float))
    m = float(x.mean())
    if len(x) < 2:
        return float(np.exp(m)), None, None
    h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(np.exp(m)), float(np.exp(m - h)), float(np.exp(m + h))


def num(x: float | None, nd: int = 0) -> str:
    return "NULL" if x is None else f"{x:,.{nd}f}"


def ci(est: tuple, nd: int = 0) -> str:
    """'m [lo, hi]' (no interval: 'm, no interval')."""
    m, lo, hi = est[:3]
    return f"{num(m, nd)} [{num(lo, nd)}, {num(hi, nd)}]" if lo is not None else f"{num(m, nd)} (no interval)"


def span(values, nd: int = 2, unit: str = "") -> str:
    v = [x for x in values if x is not None]
    lo, hi = num(min(v), nd), num(max(v), nd)
    sep = " to " if lo.startswith("-") or hi.startswith("-") else "-"
    return (lo if lo == hi else f"{lo}{sep}{hi}") + unit


# the plan each results folder names (its README), for the warehouse's run fields
PLANS = {
    "h200-vllm": "h200-vllm.yaml",
    "h200-vllm-14b": "h200-vllm-14b.yaml",
    "h200-vllm-board": "h200-vllm-board.yaml",
    "h200-vllm-fp8ckpt": "h200-vllm-fp8ckpt.yaml",
    "h200-vllm-steps": "h200-vllm-steps.yaml",
    "h200-vllm-sweep": "h200-vllm-sweep.yaml",
    "h200-vllm-unit": "h200-vllm-unit.yaml",
    "h200-transformers": "h200-transformers.yaml",
}


@dataclass
class Data:
    """Every committed window, recomputed (windows_from); each bundle's idle windows (the GPU samples in them); the
    gap shapes of the board run's 4- and 16-stream windows; and, where only the engine's /metrics hold a figure,
    the warehouse's views over the same bundles (ingested into a scratch warehouse)."""

    windows: list[dict]
    idle: list[dict]
    gap_shapes: list[dict]
    views: dict[str, list[tuple]]

    @classmethod
    def load(cls) -> Data:
        import tempfile

        from benchmarks.filed_predictions import bundle_tables, windows_from
        from wattbench.plan import load_plan, plan_run_fields
        from wattbench.warehouse import connect, ingest_bundle, set_run_fields
        from wattbench_agent.bundle import read_manifest, unpacked

        windows, idle, shapes = [], [], []
        with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "audit.duckdb") as con:
            for b in BUNDLES:
                plan_path = ROOT / "plans" / PLANS[b.parent.name]
                plan, sha = load_plan(plan_path)
                with unpacked(b) as folder:
                    run_id = read_manifest(folder)["run_id"]
                    tables = bundle_tables(folder)
                    ingest_bundle(con, folder)
                    set_run_fields(con, run_id, plan_run_fields(plan, plan_path, sha))
                for w in windows_from(tables, run_id, b.name):
                    for fig in ("ttft_ms", "tpot_ms"):  # each repeat's own p50, to pair engines on
                        w[fig[:4] + "_p50"] = float(np.percentile(w[fig], 50)) if w[fig] else None
                    windows.append(w)
                idle += idle_windows(tables, run_id)
                if run_id == "h200-vllm-8b-board":
                    shapes += gap_shapes(tables)
            views = {
                "client_vs_server": con.execute(
                    "SELECT v.run_id, v.deployment_id, l.workload, l.point_label, l.concurrency, v.family, "
                    "avg(v.client_minus_server_ms) FROM v_client_vs_server v JOIN load_runs l "
                    "USING (run_id, deployment_id, load_point_id) GROUP BY ALL"
                ).fetchall(),
                "ttft_split": con.execute(
                    "SELECT v.run_id, l.concurrency, v.queue_ms, v.prefill_ms, v.to_scheduled_ms FROM "
                    "v_engine_ttft_split v JOIN load_runs l USING (run_id, deployment_id, load_point_id)"
                ).fetchall(),
                "point_figures": con.execute(WITHIN_START_FIGURES).fetchall(),
            }
        return cls(windows, idle, shapes, views)

    def sel(self, run: str | list[str] | None = None, **where) -> list[dict]:
        runs = [run] if isinstance(run, str) else run
        out = []
        for w in self.windows:
            if runs is not None and w["run_id"] not in runs:
                continue
            if all(w.get(k) in (v if isinstance(v, list) else [v]) for k, v in where.items()):
                out.append(w)
        return sorted(out, key=lambda w: (w["run_id"], w["engine"], w["workload"], str(w["point"]), w["repeat"] or 0))

    def fig(self, fig: str, run=None, **where) -> tuple:
        """A throughput-like figure over the selected windows: mean [95% t interval on the log scale]."""
        return t_log([w[fig] for w in self.sel(run, **where)])

    def pct(self, fig: str, q: float, run=None, **where) -> tuple:
        """A latency percentile: the mean of each repeat's own (linear interpolation), a t interval on the log scale
        where every repeat has ten requests beyond it (docs/MEASUREMENT.md), else none."""
        ws = self.sel(run, **where)
        per = [float(np.percentile(w[fig], q)) for w in ws]
        m, lo, hi = t_log(per)
        if min(len(w[fig]) for w in ws) * (1 - q / 100) < 10:
            lo = hi = None
        return m, lo, hi

    def ratio(self, fig: str, run, num_engine: str, den_engine: str = "vllm-bf16", **where) -> tuple:
        """num / den engine, paired by repeat."""
        a = {w["repeat"]: w[fig] for w in self.sel(run, engine=num_engine, **where)}
        b = {w["repeat"]: w[fig] for w in self.sel(run, engine=den_engine, **where)}
        reps = sorted(set(a) & set(b))
        return paired([a[r] for r in reps], [b[r] for r in reps])

    def pairs(self, closed_8b: bool = True) -> list[dict]:
        """Every fp8 / bf16 pair of the 8B runs (each run's bf16 and fp8 at the same point), with its run and GPU."""
        out = []
        keys = sorted({(w["run_id"], w["workload"], w["point"]) for w in self.windows if w["engine"] == "vllm-fp8"})
        for run, wl, pt in keys:
            if not self.sel(run, engine="vllm-bf16", workload=wl, point=pt) or "14b" in run:
                continue
            closed = (self.sel(run, engine="vllm-fp8", workload=wl, point=pt)[0]["concurrency"] or 0) > 0
            if closed_8b and not closed:
                continue
            one = self.sel(run, engine="vllm-fp8", workload=wl, point=pt)[0]
            out.append(
                {
                    "run": run,
                    "point": f"{wl}:{pt}",
                    "gpu": one["gpu"][4:12],
                    "streams": one["concurrency"],
                    "tok_s": self.ratio("tok_s", run, "vllm-fp8", workload=wl, point=pt),
                    "tok_j": self.ratio("tok_j", run, "vllm-fp8", workload=wl, point=pt),
                }
            )
        return out

    def c16(self, precision: str) -> list[tuple[str, list[dict]]]:
        """The 16-stream 512/128 runs of the 8B model: (run, its windows of `precision`)."""
        out = []
        for run, wl in C16:
            ws = self.sel(run, workload=wl, point="c16", precision=precision)
            if ws:
                out.append((run, ws))
        return out


def cv(values) -> float:
    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / v.mean())


def idle_windows(tables: dict, run_id: str) -> list[dict]:
    """Each idle window of a bundle (energy_windows idle_*, once per GPU and time), with its samples' highest power
    and utilisation and its counter W."""
    seen, out = set(), []
    for e in tables["energy_windows"]:
        key = (e["gpu_uuid"], e["start_ns"], e["end_ns"])
        if not str(e.get("window_name", "")).startswith("idle") or key in seen:
            continue
        seen.add(key)
        s = [
            x
            for x in tables["gpu_samples"]
            if x["gpu_uuid"] == e["gpu_uuid"] and e["start_ns"] <= x["t_ns"] <= e["end_ns"]
        ]
        out.append(
            {
                "run_id": run_id,
                "window": e["window_name"],
                "max_w": max((x["power_w"] for x in s if x.get("power_w") is not None), default=None),
                "max_util": max((x["util_gpu_pct"] for x in s if x.get("util_gpu_pct") is not None), default=None),
                "w": e["energy_j"] / ((e["end_ns"] - e["start_ns"]) / 1e9) if e.get("energy_j") else None,
            }
        )
    return out


def gap_shapes(tables: dict) -> list[dict]:
    """Per 4- and 16-stream window: the share of gaps (per token) within 20% of the median, between 1.4x and 2x
    it, and the stalls' range in medians (docs/MEASUREMENT.md, "Why 1.5 x the median")."""
    from wattbench_agent.loadgen.steps import request_gaps

    out = []
    for lr in tables["load_runs"]:
        if lr.get("concurrency") not in (4, 16):
            continue
        start, end = lr["window_start_ns"], lr["window_end_ns"]
        recs = [
            r
            for r in tables["requests"]
            if r.get("load_point_id") == lr["load_point_id"]
            and r.get("deployment_id") == lr["deployment_id"]
            and r.get("error_kind") is None
            and start <= (r.get("sent_ns") or -1) <= end
        ]
        parts = [np.repeat(g / n, n) for g, n in map(request_gaps, recs) if len(g)]
        g = np.concatenate(parts)
        x = g / np.median(g)
        stalls = x[x > 1.5]
        out.append(
            {
                "point": lr["load_point_id"],
                "near_median": float(np.mean(np.abs(x[x <= 1.5] - 1) <= 0.2)),
                "valley": float(np.mean((x > 1.4) & (x < 2.0))),
                "stall_p5_p95": (float(np.percentile(stalls, 5)), float(np.percentile(stalls, 95))),
            }
        )
    return out


# --- the claims ---------------------------------------------------------------------------------------------------


@dataclass
class Claim:
    """One claim: where it stood, its words, the figure recomputed here, and the verdict (holds / corrected to ... /
    withdrawn because ... / not checked because ...)."""

    id: str
    where: str
    words: str
    recomputed: str
    verdict: str


def board_runs(D: Data, precision: str) -> list[tuple[str, list[dict]]]:
    """The 16-stream 512/128 windows of `precision` per board run (one server start each: the unit run's two
    protocols together), as (GPU, windows)."""
    out: dict[str, list[dict]] = {}
    for run, wl in C16:
        for w in D.sel(run, workload=wl, point="c16", precision=precision):
            out.setdefault(w["gpu"][4:12], []).append(w)
    return list(out.items())


def d_spread(D: Data, precision: str) -> tuple[list[float], float, list[float]]:
    """Per board run the mean decode step, the CV of those means, and each run's within-start CV."""
    runs = board_runs(D, precision)
    means = [float(np.mean([w["d"] for w in ws])) for _, ws in runs]
    return means, cv(means), [cv([w["d"] for w in ws]) for _, ws in runs]


def readme_claims(D: Data) -> list[Claim]:
    pairs = D.pairs()
    mid = [p for p in pairs if p["streams"] in (8, 16, 32) and "long" not in p["point"]]
    gamma = [p for p in D.pairs(closed_8b=False) if not p["streams"]]
    runs = {p["run"] for p in pairs}
    gpus = {p["gpu"] for p in pairs}
    b14 = ["h200-vllm-14b-light", "h200-vllm-14b-heavy"]
    r14 = [D.ratio(f, b14, "vllm-fp8", workload=wl, point=pt) for f in ("tok_s", "tok_j") for wl, pt in _P14]
    (bf, bcv, bw), (fp, fcv, fw) = d_spread(D, "bf16"), d_spread(D, "fp8")
    steps = D.sel("h200-vllm-steps-gpu1")
    tcv = [cv([w["tok_s"] for w in steps if w["engine"] == e and w["workload"] == wl]) for e, wl in _STEPS]
    r = [_r(steps, e, wl, "tok_s", "s") for e, wl in _STEPS]
    return [
        Claim(
            "R1",
            "README.md, results table, fp8 against bf16",
            "1.27-1.46x the tok/s and 1.26-1.58x the tok/J from 1 to 256 streams ... (no difference under gamma "
            "arrivals at 8 req/s)",
            f"closed loops, {len(pairs)} paired points in {len(runs)} runs on {len(gpus)} H200s: tok/s "
            f"{span([p['tok_s'][0] for p in pairs])}x, tok/J {span([p['tok_j'][0] for p in pairs])}x; 8-32 streams "
            f"of 512/128: {span([p['tok_s'][0] for p in mid])}x; gamma tok/s "
            + ", ".join(f"{ci(p['tok_s'], 2)} ({p['point'].split(':')[1]})" for p in gamma),
            "corrected to 1.17-1.47x tok/s and 1.29-1.59x tok/J over every committed closed-loop pair (the first "
            "run's 1.27-1.46x is one run; at 8-32 streams the runs give 1.17-1.30x, and two runs' paired intervals "
            "at 16 streams do not overlap: board, host, server start and date differ between runs); gamma holds",
        ),
        Claim(
            "R2",
            "README.md, results table, 14.5B model",
            "1.33-1.48x tok/s, 1.38-1.66x tok/J",
            f"tok/s {span([x[0] for x in r14[:5]])}x, tok/J {span([x[0] for x in r14[5:]])}x (two runs, two H200s)",
            "holds; scope added (two runs on two H200s)",
        ),
        Claim(
            "R3",
            "README.md, results table, do H200 boards differ?",
            "the decode step does not (5.14 ms bf16, 3.67 ms fp8 at 16 streams, CV 0.3-1.9% within a server start); "
            "tok/s moves 3.5-10% between repeats with the host's stall length (r -0.81 to -0.98)",
            f"16-stream decode step, the means of {len(bf)} runs on {len(bf)} H200s: bf16 {span(bf)} ms (CV of the "
            f"means {100 * bcv:.1f}%; within a start {span([100 * x for x in bw], 2)}%: {bcv / max(bw):.1f}-"
            f"{bcv / min(bw):.1f}x), fp8 {span(fp)} ms ({100 * fcv:.1f}%; {span([100 * x for x in fw], 2)}%: "
            f"{fcv / max(fw):.1f}-{fcv / min(fw):.1f}x); steps run tok/s CV {span([100 * x for x in tcv], 1)}%, "
            f"r(tok/s, s) {span(r)}",
            "withdrawn ('does not differ'): the decode step differs between runs by up to 5.6% (bf16) and 4.5% (fp8), "
            "several times its within-start spread; which of board, host, server start or weights moves it cannot "
            "be told apart, each run changed all four; r(tok/s, s) follows from mean gap = (1-f) d + f s and shows "
            "no mechanism",
        ),
        Claim(
            "R4",
            "README.md, results table, TensorRT-LLM-like against vLLM-like (emulated)",
            "1.83x the tok/s, 1.38x the tok/J; under an interactive SLO 16 against 11 streams",
            f"docs/RESULTS.md's table: 1 / 0.547 = {1 / 0.547:.2f}, 1 / 0.723 = {1 / 0.723:.2f}",
            "not checked against data: the default plan's emulated run is not committed (make run makes it again); "
            "consistent with docs/RESULTS.md",
        ),
        Claim(
            "R5",
            "README.md, results table, GPUs for 40 req/s steady, 100 at peak (emulated)",
            "32 (TensorRT-LLM-like) or 48 (vLLM-like)",
            "docs/RESULTS.md: 32.87 and 17.83 req/s per replica (8 GPUs) at the 95% lower bound: ceil(100 / 32.87) x "
            "8 = "
            f"{int(np.ceil(100 / 32.87)) * 8}, ceil(100 / 17.83) x 8 = {int(np.ceil(100 / 17.83)) * 8}",
            "not checked against data (emulated run not committed); consistent with docs/RESULTS.md",
        ),
        _twin_readme_claim(),
        _json_claim(
            "R7",
            "README.md, results table, a million-request run's load time",
            "6.9 s and 1,051 MB on 2 quiet cores (25.8 s before the token store), 15.9 s with both cores busy",
            _warehouse_scale(),
            "holds (benchmark files: results/warehouse_scale.json; the busy-cores run: results/ingest_profile.md)",
        ),
        _json_claim(
            "R8",
            "README.md, results table, the client against AIPerf",
            "TPOT and E2E p50 within 0.3%; TTFT p50 4-5 ms above AIPerf's",
            _aiperf(),
            "corrected: holds for the closed loops (8 and 32 streams); the Poisson row differs by 2.2-2.3% in TPOT "
            "and E2E and wattbench's TTFT p50 is 0.7 ms below AIPerf's there (each client drew its own arrivals)",
        ),
    ]


P2 = ("bf16", "fp8")
_P14 = [("light", "c1"), ("light", "c4"), ("steady", "c16"), ("steady", "c64"), ("long-prompt", "c32")]
_STEPS = [("vllm-bf16", "fixed16"), ("vllm-bf16", "spread16"), ("vllm-fp8", "fixed16"), ("vllm-fp8", "spread16")]


def _r(ws: list[dict], engine: str, workload: str, x: str, y: str) -> float:
    g = [w for w in ws if w["engine"] == engine and w["workload"] == workload]
    return float(np.corrcoef([w[x] for w in g], [w[y] for w in g])[0, 1])


def _json_claim(id_: str, where: str, words: str, recomputed: str, verdict: str) -> Claim:
    return Claim(id_, where, words, recomputed, verdict)


def _warehouse_scale() -> str:
    d = json.loads((ROOT / "results" / "warehouse_scale.json").read_text())
    one = d["sizes"]["1m"]["ingest"][0]
    busy = "15.9 s" in (ROOT / "results" / "ingest_profile.md").read_text()
    return (
        f"1M: ingest {one['ingest_s']:.1f} s, peak {one['peak_rss_mb']:,.0f} MB; before "
        f"{one['before']['ingest_s']:.1f} s; "
        f"busy cores 15.9 s {'in' if busy else 'not in'} results/ingest_profile.md"
    )


def _aiperf() -> str:
    d = json.loads((ROOT / "results" / "peer_aiperf.json").read_text())
    out = []
    for load in ("8 streams", "32 streams", "6 req/s Poisson"):
        w = next(r for r in d["rows"] if r["load"] == load and r["client"] == "wattbench")
        a = next(r for r in d["rows"] if r["load"] == load and r["client"] == "aiperf")
        out.append(
            f"{load}: TPOT p50 {100 * (w['tpot_ms']['p50'] / a['tpot_ms']['p50'] - 1):+.1f}%, E2E p50 "
            f"{100 * (w['e2e_ms']['p50'] / a['e2e_ms']['p50'] - 1):+.1f}%, TTFT p50 "
            f"{w['ttft_ms']['p50'] - a['ttft_ms']['p50']:+.1f} ms"
        )
    return "; ".join(out)


def _sweep_comparison() -> dict:
    return json.loads((ROOT / "results" / "h200-vllm-sweep" / "comparison.json").read_text())


def _twin_readme_claim() -> Claim:
    s = _sweep_comparison()["summary"]
    return Claim(
        "R6",
        "README.md, results table, the twin's figures filed before a run",
        "W within 10% at 10 of 10 held-out points, tok/s at 5, TPOT p50 at 6, TTFT p50 within 25% at 7",
        "results/h200-vllm-sweep/comparison.json (benchmarks/filed_predictions.py): "
        + ", ".join(f"{k} {v['within_goal']}/{v['points']}" for k, v in s.items()),
        "holds; scope corrected: 8 of the 10 points are stream counts or lengths the twin never saw, 2 (ref16) "
        "repeat a configuration it was fitted on (16 streams of 512/128) on another board",
    )


def _f(D: Data, fig: str, run, engine: str, nd: int = 0, **k) -> str:
    return ci(D.fig(fig, run, engine=engine, **k), nd)


def _p(D: Data, fig: str, q: float, run, engine: str, nd: int = 1, **k) -> str:
    return ci(D.pct(fig, q, run, engine=engine, **k), nd)


def results_claims_8b(D: Data) -> list[Claim]:
    """docs/RESULTS.md, the first 8B run and the 14.5B model."""
    light, steady, long_ = "h200-vllm-light", "h200-vllm-steady", "h200-vllm-long-bursty"
    first = [p for p in D.pairs() if p["run"] in (light, steady, long_, "h200-vllm-light-long")]
    later = [p for p in D.pairs() if p not in first and p["streams"] in (8, 16, 32) and "long" not in p["point"]]
    light_pts = [p for p in first if p["streams"] in (1, 4)]
    idle = [x for w in D.sel([light, "h200-vllm-light-long"]) for x in w["idle_w"]]
    kv = "h200-vllm-kv8"
    b14 = ["h200-vllm-14b-light", "h200-vllm-14b-heavy"]
    return [
        Claim(
            "S1",
            "docs/RESULTS.md, the 8B table (real vLLM, bf16 against fp8)",
            "e.g. 16 streams bf16 2,404 [2,260, 2,548]; gamma bf16 1,149 [676, 1,623], fp8 1,156 [681, 1,631], tok/J "
            "2.20 [1.56, 2.83] and 2.78 [1.95, 3.61]; 1 stream of 2K prompts 1.36 [1.33, 1.39]",
            f"means and paired ratios as claimed; intervals (t on the log scale): 16 streams bf16 "
            f"{_f(D, 'tok_s', steady, 'vllm-bf16', workload='steady', point='c16')}; gamma bf16 "
            f"{_f(D, 'tok_s', long_, 'vllm-bf16', workload='bursty')}, fp8 "
            f"{_f(D, 'tok_s', long_, 'vllm-fp8', workload='bursty')}, "
            f"tok/J {_f(D, 'tok_j', long_, 'vllm-bf16', 2, workload='bursty')} and "
            f"{_f(D, 'tok_j', long_, 'vllm-fp8', 2, workload='bursty')}; 1 stream of 2K prompts "
            f"{ci(D.ratio('tok_s', 'h200-vllm-light-long', 'vllm-fp8', point='c1'), 2)}; the rows come from three "
            f"H200s ({', '.join(sorted({w['gpu'][4:12] for w in D.sel([light, steady, long_])}))})",
            "corrected: every interval made again as docs/MEASUREMENT.md defines it (the table's were t intervals on "
            "the raw scale; gamma's lower bounds move most, 676 -> 761 tok/s); the three boards named",
        ),
        Claim(
            "S2",
            "docs/RESULTS.md, after the 8B table",
            "fp8 gives ... 1.27-1.46x from one stream to 256 (the H200 is at its 700 W limit from 16 streams up)",
            f"the first run's points: {span([p['tok_s'][0] for p in first])}x; later runs at 8-32 streams of 512/128: "
            f"{span([p['tok_s'][0] for p in later])}x; power-capped share of samples at 16-256 streams "
            f"{span([w['power_capped_share'] for w in D.sel(steady)], 2)}",
            "corrected: 1.27-1.46x is the first run's; later runs give 1.17-1.30x at 8-32 streams (every pair: "
            "1.17-1.47x)",
        ),
        Claim(
            "S3",
            "docs/RESULTS.md, after the 8B table",
            "one stream ... gains 1.36x, not 2x (time per output token 4.64 ms bf16, 3.31 ms fp8)",
            f"{ci(D.ratio('tok_s', light, 'vllm-fp8', point='c1'), 2)}; TPOT p50 "
            f"{_p(D, 'tpot_ms', 50, light, 'vllm-bf16', 2, point='c1')} and "
            f"{_p(D, 'tpot_ms', 50, light, 'vllm-fp8', 2, point='c1')} ms",
            "holds",
        ),
        Claim(
            "S4",
            "docs/RESULTS.md, after the 8B table",
            "the GPU drew 472 W [469, 476] with bf16 and 409 W [406, 411] with fp8 (... idle 129-134 W)",
            f"{_f(D, 'w', light, 'vllm-bf16', point='c1')} and {_f(D, 'w', light, 'vllm-fp8', point='c1')} W; idle "
            f"(the light runs' deployments, before and after) {span(idle, 1)} W",
            "corrected: idle 128-135 W; the W figures hold",
        ),
        Claim(
            "S5",
            "docs/RESULTS.md, after the 8B table",
            "at light load tokens per joule gain more from fp8 (1.46-1.58x)",
            f"1 and 4 streams: tok/J {span([p['tok_j'][0] for p in light_pts])}x",
            "holds",
        ),
        Claim(
            "S6",
            "docs/RESULTS.md (after the 8B table), docs/MEASUREMENT.md (the engine's own view)",
            "the client saw TTFT 3.6-14.7 ms above vLLM's own histograms and the same inter-token gaps within 0.25 ms "
            "(up to 64 streams)",
            _client_vs_server(D),
            "corrected: the range is the first run's (16 and 64 streams, 2K prompts, gamma); over every committed "
            "run up to 64 streams the point means span the recomputed range",
        ),
        Claim(
            "S7",
            "docs/RESULTS.md, after the 8B table; results/h200-vllm/README.md",
            "`vllm bench serve` against the same engine: means within 0.3-1.9% of wattbench's",
            _vllm_bench(),
            "holds",
        ),
        Claim(
            "S8",
            "docs/RESULTS.md, after the 8B table",
            "The emulator's prediction of every figure, made before it saw these runs: median |error| 22% (bf16 "
            "throughput within 4%, fp8 throughput +41-43%, TTFT off by far more)",
            _twin_vs_measured(),
            "corrected: bf16 within 4% at 512-token prompts and gamma only (-13.7% at 2K prompts); the figures are "
            "the emulator of then fitted to nothing measured here, computed after the run (out of sample, not "
            "filed before it); the file now holds a later in-sample fit, the record is its version at commit d849df4",
        ),
        Claim(
            "S9",
            "docs/RESULTS.md, fp8 KV cache paragraph",
            "at 256 streams 1.007x the tok/s of fp8 alone [0.94, 1.08] and 1.04x the tok/J [0.95, 1.15]; at 32 "
            "streams of 2K prompts 1.009x [1.002, 1.016] and 1.035x [1.024, 1.046]; 1.47x [1.41, 1.53] at 256 streams, "
            "1.27x [1.26, 1.29] at 2K prompts; bf16 at 256 streams 5,512 tok/s [5,365, 5,659]",
            f"{ci(D.ratio('tok_s', kv, 'vllm-fp8-kv8', 'vllm-fp8', workload='kv8'), 3)}, "
            f"{ci(D.ratio('tok_j', kv, 'vllm-fp8-kv8', 'vllm-fp8', workload='kv8'), 3)}; "
            f"{ci(D.ratio('tok_s', kv, 'vllm-fp8-kv8', 'vllm-fp8', workload='kv8-long'), 3)}, "
            f"{ci(D.ratio('tok_j', kv, 'vllm-fp8-kv8', 'vllm-fp8', workload='kv8-long'), 3)}; "
            f"{ci(D.ratio('tok_s', kv, 'vllm-fp8', workload='kv8'), 2)}, "
            f"{ci(D.ratio('tok_s', kv, 'vllm-fp8', workload='kv8-long'), 2)}; "
            f"{_f(D, 'tok_s', kv, 'vllm-bf16', workload='kv8')}",
            "holds to the rounding shown (the bf16 interval moves by 2 tok/s with the log scale)",
        ),
        Claim(
            "S10",
            "docs/RESULTS.md, the 14.5B table; results/h200-vllm-14b/README.md",
            "16 streams bf16 1,300 [1,233, 1,366]; 64 streams 2,962 [2,564, 3,360]; ratios 1.48, 1.42, 1.38, 1.33, "
            "1.35",
            f"16 streams {_f(D, 'tok_s', b14, 'vllm-bf16', workload='steady', point='c16')}; 64 streams "
            f"{_f(D, 'tok_s', b14, 'vllm-bf16', workload='steady', point='c64')}; ratios "
            + ", ".join(f"{D.ratio('tok_s', b14, 'vllm-fp8', workload=wl, point=pt)[0]:.2f}" for wl, pt in _P14),
            "corrected: intervals on the log scale; means and ratios hold",
        ),
        Claim(
            "S11",
            "docs/RESULTS.md, after the 14.5B table",
            "fp8's gain at one stream is larger than with the 8B model (1.48x against 1.36x) ...; one bf16 stream "
            "draws "
            "548 W (8B: 472 W)",
            f"{D.ratio('tok_s', b14, 'vllm-fp8', point='c1')[0]:.2f} against "
            f"{D.ratio('tok_s', light, 'vllm-fp8', point='c1')[0]:.2f}; {_f(D, 'w', b14, 'vllm-bf16', point='c1')} "
            f"against {_f(D, 'w', light, 'vllm-bf16', point='c1')} W, on H200s "
            f"{D.sel(b14, point='c1')[0]['gpu'][4:12]} and {D.sel(light, point='c1')[0]['gpu'][4:12]}",
            "holds; the two models ran on different H200s, which the comparison now says",
        ),
    ]


def _client_vs_server(D: Data) -> str:
    rows = [r for r in D.views["client_vs_server"] if (r[4] or 0) <= 64 and "transformers" not in r[0]]
    first = [r for r in rows if r[0] in ("h200-vllm-steady", "h200-vllm-long-bursty")]

    def rng(rs, fam):
        return span([r[6] for r in rs if r[5] == fam], 2)

    return (
        f"v_client_vs_server, point means: the first run TTFT {rng(first, 'ttft')} ms, inter-token {rng(first, 'itl')} "
        f"ms; every committed run up to 64 streams TTFT {rng(rows, 'ttft')} ms, inter-token {rng(rows, 'itl')} ms"
    )


def _vllm_bench() -> str:
    v = json.loads((ROOT / "tests" / "data" / "imports" / "vllm-bench-serve-0.25.0.json").read_text())
    w = json.loads((ROOT / "results" / "h200-vllm" / "peer" / "wattbench-load.json").read_text())
    w = w.get("summary", w)
    out = []
    for name, vk, wk in (
        ("TTFT", "mean_ttft_ms", "ttft_ms"),
        ("TPOT", "mean_tpot_ms", "tpot_ms"),
        ("E2E", "mean_e2el_ms", "e2e_ms"),
    ):
        out.append(f"{name} mean {100 * abs(w[wk]['mean'] / v[vk] - 1):.1f}%")
    return "; ".join(out)


def _twin_vs_measured() -> str:
    """The emulator's out-of-sample figures for the first run, as committed with them (d849df4; the file was later
    overwritten by an in-sample fit)."""
    import subprocess

    try:
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", "d849df4:results/h200-vllm/twin_vs_measured.json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "not available (needs the git history: commit d849df4)"
    rows = json.loads(text)["rows"]
    med = float(np.median([abs(r["error"]) for r in rows]))
    tok = {(r["engine"], r["workload"], r["point"]): r["error"] for r in rows if r["figure"] == "output_tok_s"}
    bf = [v for (e, wl, _), v in tok.items() if e == "vllm-bf16" and wl != "long-prompt"]
    fp = [v for (e, wl, _), v in tok.items() if e == "vllm-fp8" and wl != "bursty"]
    return (
        f"results/h200-vllm/twin_vs_measured.json at d849df4 ({len(rows)} figures): median |error| {100 * med:.1f}%; "
        f"bf16 tok/s {span([100 * x for x in bf], 1)}% at 512-token prompts and gamma, "
        f"{100 * tok[('vllm-bf16', 'long-prompt', 'c32')]:+.1f}% at 2K prompts; fp8 closed loops "
        f"{span([100 * x for x in fp], 1)}%"
    )


def results_claims_runs(D: Data) -> list[Claim]:
    """docs/RESULTS.md: the steps run, the twin's sweep, the pre-quantized checkpoint, one configuration on several
    H200s."""
    steps = D.sel("h200-vllm-steps-gpu1")
    fixed = [w for w in steps if w["workload"] == "fixed16"]
    d_cv = {p: cv([w["d"] for w in fixed if w["precision"] == p]) for p in ("bf16", "fp8")}
    d_m = {p: np.mean([w["d"] for w in fixed if w["precision"] == p]) for p in ("bf16", "fp8")}
    tcv = {(e, wl): cv([w["tok_s"] for w in steps if (w["engine"], w["workload"]) == (e, wl)]) for e, wl in _STEPS}
    r_ts = [_r(steps, e, wl, "tok_s", "s") for e, wl in _STEPS]
    r_sc = [_r(steps, e, wl, "s", "engine_cores") for e, wl in _STEPS]
    clocks = [w["sm_clock_mhz"] for w in steps]
    sw = _sweep_comparison()["summary"]
    dec = ["h200-vllm-8b-sweep-decode", "h200-vllm-8b-sweep-decode-fp8"]
    ck = "h200-vllm-8b-fp8ckpt"
    return [
        Claim(
            "S12",
            "docs/RESULTS.md, what the GPU does and what the host does; results/h200-vllm-steps/README.md",
            "decode step 5.14 ms bf16 (CV 0.3%) and 3.67 ms fp8 (CV 1.9%) at every repeat. Throughput moved 3.5-10% "
            "between repeats ..., following the length of the steps that carry a prefill (r -0.81 to -0.98), which "
            "followed the engine's CPU time (r +0.84 to +0.94): the host. No repeat fell into the bunched phase (0 of "
            "12) ...; CV 6.0% and 10.2% against 3.5% and 4.9%; 22 of 24 windows carried the power-cap clock-event "
            "reason at clocks within 2% of the maximum",
            f"fixed16 d {d_m['bf16']:.2f} ms (CV {100 * d_cv['bf16']:.1f}%), {d_m['fp8']:.2f} ms (CV "
            f"{100 * d_cv['fp8']:.1f}%); tok/s CV "
            + ", ".join(f"{e[5:]} {wl} {100 * v:.1f}%" for (e, wl), v in tcv.items())
            + f"; r(tok/s, s) {span(r_ts)}; r(s, engine cores) {span(r_sc)}; bunched (f < 7.9%) "
            f"{sum(bool(w['bunched']) for w in fixed)} of {len(fixed)}; >= 10% of samples clock-lowered in "
            f"{sum(w['throttled_share'] >= 0.1 for w in steps)} of {len(steps)}; window clocks {span(clocks, 0)} MHz "
            f"({100 * (1 - min(clocks) / 1980):.1f}% below 1,980 at most)",
            "corrected: the numbers hold (clocks within 2.1%, not 2%); 'tok/s moved 3.5-10%' is the CV (3.5-10.2%); "
            "'the host' is withdrawn as a finding: r(tok/s, s) follows from mean gap = (1-f) d + f s with d fixed, "
            "and r(s, engine CPU) does not say which drives which",
        ),
        Claim(
            "S13",
            "docs/RESULTS.md, the twin's predictions filed before a run; results/h200-vllm-sweep/README.md",
            "within goal (of 10): W 10, tok/s 5, TPOT p50 6, tok/J 7, TTFT p50 7, TTFT p99 2; largest errors +9.7%, "
            "+29.8%, -21.7%, +19.1%, -74.6%, -60.3%; 55 of 60 inside the band",
            "comparison.json: "
            + ", ".join(f"{LABELS[k]} {v['within_goal']} ({100 * v['max_abs_error']:.1f}%)" for k, v in sw.items())
            + f"; inside the band {sum(v['inside_band'] for v in sw.values())} of "
            f"{sum(v['points'] for v in sw.values())}",
            "holds; 'held out' corrected: the 2 ref16 points repeat a configuration the twin was fitted on",
        ),
        Claim(
            "S14",
            "docs/RESULTS.md and results/h200-vllm-sweep/README.md, decode16 against ref16",
            "bf16 559.7 W [535.4, 584.0] against 558.8 W [556.2, 561.5], fp8 515.6 W [446.7, 584.5] against 511.1 W "
            "[496.6, 525.6]",
            f"bf16 {_f(D, 'w', dec, 'vllm-bf16', 1, workload='ref16')} against "
            f"{_f(D, 'w', dec, 'vllm-bf16', 1, workload='decode16')}"
            f", fp8 {_f(D, 'w', dec, 'vllm-fp8', 1, workload='ref16')} against "
            f"{_f(D, 'w', dec, 'vllm-fp8', 1, workload='decode16')}"
            f"; bf16 and fp8 on H200s {D.sel(dec, engine='vllm-bf16')[0]['gpu'][4:12]} and "
            f"{D.sel(dec, engine='vllm-fp8')[0]['gpu'][4:12]}, one engine loaded each",
            "corrected: intervals on the log scale; the finding (no difference) holds",
        ),
        Claim(
            "S15",
            "docs/RESULTS.md, the pre-quantized checkpoint table; results/h200-vllm-fp8ckpt/README.md",
            "checkpoint / online - 1: 2 streams +4.3% tok/s, TPOT -5.3%, TTFT +4.7%; 8: +12.8%, -10.4%, -14.7%; 32: "
            "-3.2%, +9.5%, -37.0%; tokens per joule the same within the 95% intervals at every point",
            "; ".join(
                f"c{c}: tok/s {ci(D.ratio('tok_s', ck, 'vllm-fp8-ckpt', 'vllm-fp8', point=f'c{c}'), 3)}, tok/J "
                f"{ci(D.ratio('tok_j', ck, 'vllm-fp8-ckpt', 'vllm-fp8', point=f'c{c}'), 3)}, TPOT p50 "
                f"{ci(D.ratio('tpot_p50', ck, 'vllm-fp8-ckpt', 'vllm-fp8', point=f'c{c}'), 3)}, TTFT p50 "
                f"{ci(D.ratio('ttft_p50', ck, 'vllm-fp8-ckpt', 'vllm-fp8', point=f'c{c}'), 3)}"
                for c in (2, 8, 32)
            ),
            "corrected: the latency columns were pooled percentiles (now the mean of each repeat's own), and the "
            "table gives the paired ratios with their intervals; tok/J: no significant difference at any point holds",
        ),
    ]


def cross_run_rows(D: Data) -> list[dict]:
    """The 16-stream 512/128 point of the 8B model per run: tok/s, W and tok/J per precision, each a mean over the
    run's repeats [95% t interval on the log scale], and the run's GPU."""
    out = []
    for run, wl in [(r, w) for r, ws in C16 for w in (ws if isinstance(ws, list) else [ws])]:
        for prec in ("bf16", "fp8"):
            ws = D.sel(run, workload=wl, point="c16", precision=prec)
            if not ws:
                continue
            out.append(
                {
                    "run": run,
                    "workload": wl,
                    "precision": prec,
                    "gpu": ws[0]["gpu"][4:12],
                    **{f: t_log([w[f] for w in ws]) for f in ("tok_s", "w", "tok_j", "d", "s")},
                    "s_range": (min(w["s"] for w in ws), max(w["s"] for w in ws)),
                    "d_range": (min(w["d"] for w in ws), max(w["d"] for w in ws)),
                    "clock": [w["sm_clock_mhz"] for w in ws],
                }
            )
    return out


def results_claims_cross(D: Data) -> list[Claim]:
    """docs/RESULTS.md: one configuration on several H200s, the 60 s window, the transformers run."""
    rows = cross_run_rows(D)
    steady = [r for r in rows if r["workload"] != "ref16u"]  # one figure a run: the unit run's steady protocol
    unit = "h200-vllm-8b-unit"

    def apart(fig: str, prec: str, rs=steady) -> float:
        v = [r[fig][0] for r in rs if r["precision"] == prec]
        return max(v) / min(v) - 1

    s_by_gpu = {}
    for r in rows:
        lo, hi = s_by_gpu.get(r["gpu"], (1e9, 0))
        s_by_gpu[r["gpu"]] = (min(lo, r["s_range"][0]), max(hi, r["s_range"][1]))
    sweep32 = D.sel("h200-vllm-8b-sweep-sweep", point="c32")
    c32 = D.sel("h200-vllm-8b-unit-c32long")
    return [
        Claim(
            "S16",
            "docs/RESULTS.md and results/h200-vllm-unit/README.md, two protocols on one GPU",
            "bf16 2,322 [2,243, 2,401] against 2,276 [1,860, 2,691] tok/s (unit README: fp8 2,793 [2,641, 2,945] and "
            "2,722 [2,423, 3,021])",
            f"bf16 {_f(D, 'tok_s', unit, 'vllm-bf16', workload='steady16')} against "
            f"{_f(D, 'tok_s', unit, 'vllm-bf16', workload='ref16u')}; fp8 "
            f"{_f(D, 'tok_s', unit, 'vllm-fp8', workload='steady16')}"
            f" and {_f(D, 'tok_s', unit, 'vllm-fp8', workload='ref16u')}",
            "corrected: intervals on the log scale; the finding holds",
        ),
        Claim(
            "S17",
            "docs/RESULTS.md, the table of one configuration on several H200s; results/h200-vllm-unit/README.md; "
            "results/h200-vllm-board/README.md",
            "5054e8bf 2,404 / 634 / 3.79 / 3,076 / 574 / 5.36; e2799006 2,322 / 572 / 4.06 / 2,793 / 500 / 5.58; "
            "2031f56b / f99132a9 2,089 / 560 / 3.73 / 2,687 / 516 / 5.21; 31a864a8 2,508 / 635 / 3.95 / 3,258 / 577 / "
            "5.65; 'the machines were 20-21% apart in tok/s and 13-17% in W'",
            "; ".join(
                f"{r['gpu']} {r['precision']} {num(r['tok_s'][0])} / {num(r['w'][0])} / {num(r['tok_j'][0], 2)}"
                for r in steady
            )
            + f"; apart: tok/s {100 * apart('tok_s', 'bf16'):.0f}% and {100 * apart('tok_s', 'fp8'):.0f}%, W "
            f"{100 * apart('w', 'bf16'):.0f}% and {100 * apart('w', 'fp8'):.0f}%",
            "holds for the four rows; corrected: the steps run (c1cd3a5a) added, intervals given, W 13-16% apart, "
            "and every row is a different board, host, server start and date",
        ),
        Claim(
            "S18",
            "docs/RESULTS.md, after that table; results/h200-vllm-unit, -board and -steps READMEs",
            "the step decomposition ... gives every GPU the same decode step within +-3% (5.05-5.35 ms bf16, 3.59-3.78 "
            "ms fp8 at 16 streams)",
            "window d per run: "
            + "; ".join(
                f"{r['gpu']} {r['precision']} {r['workload']} {span(r['d_range'], 3)}"
                for r in rows
                if r["precision"] == "bf16"
            )
            + "; fp8 "
            + ", ".join(f"{r['gpu']} {span(r['d_range'], 3)}" for r in rows if r["precision"] == "fp8"),
            "withdrawn ('the same'): the run means differ by 5.6% (bf16) and 4.5% (fp8), several times the "
            "within-start spread (R3); corrected ranges 4.99-5.35 ms bf16, 3.58-3.78 ms fp8",
        ),
        Claim(
            "S19",
            "docs/RESULTS.md; results/h200-vllm-unit and -board READMEs",
            "what moved was how long a step carrying a prefill took, the host's launch time ... (12-25 ms by machine "
            "and "
            "window); unit README: 'the stall length each window's TPOT implies was 13.6-16.4 ms on 5054e8bf's host, "
            "16-25 ms on e2799006's and 21-24 ms on 2031f56b's'; board README: '12.8-13.3 ms here'",
            "measured mean stall s per run (both precisions): "
            + ", ".join(f"{g} {span(v, 1)} ms" for g, v in s_by_gpu.items()),
            "corrected to the measured stall s (12.3-26.1 ms by run and window) instead of a TPOT-implied one; that it "
            "is the host's launch time is a reading no run isolated (board, host, server start and weights changed "
            "together)",
        ),
        Claim(
            "S20",
            "docs/RESULTS.md; results/h200-vllm-unit/README.md, 32 streams over a long window",
            "Over a 60 s window 32 equal-length streams reached TTFT p50 273 ms (bf16) and 228 ms (fp8), against "
            "93-147 "
            "ms over the sweep's 10 s windows; TTFT p50 per 10 s stayed 255-348 ms (bf16); throughput and power agree "
            "with the sweep's 10 s windows within 5% (bf16 3,580 against 3,449 tok/s)",
            f"60 s: {', '.join(num(np.percentile(w['ttft_ms'], 50)) for w in c32)} ms; the sweep's windows: "
            f"{span([np.percentile(w['ttft_ms'], 50) for w in sweep32], 0)} ms; bf16 per 10 s of the 60 s window "
            f"{span(_per10s(c32[0]), 0)} ms; tok/s {num(c32[0]['tok_s'])} against "
            f"{num(np.mean([w['tok_s'] for w in sweep32 if w['precision'] == 'bf16']))}; H200s {c32[0]['gpu'][4:12]} "
            "and "
            f"{sweep32[0]['gpu'][4:12]}",
            "corrected: the sweep's 10 s windows range 93-260 ms (its point means 114 and 162 ms); the two runs are on "
            "different H200s",
        ),
    ]


def _per10s(w: dict) -> list[float]:
    """TTFT p50 of the requests sent in each 10 s of a window."""
    t, x = np.asarray(w["ttft_sent_s"]), np.asarray(w["ttft_ms"])
    return [float(np.percentile(x[(t >= a) & (t < a + 10)], 50)) for a in range(0, int(w["window_s"]), 10)]


def results_claims_other(D: Data) -> list[Claim]:
    """docs/RESULTS.md: transformers serve, the power-sampling study, the emulator's calibration, the twin's held-out
    counts, and the benchmarks kept as files."""
    tf = D.sel("h200-transformers-2026-12-02")
    vllm = [w for w in D.windows if w["engine"].startswith("vllm")]
    spread = []
    for k in {(w["run_id"], w["engine"], w["workload"], w["point"]) for w in vllm}:
        t = [w["tok_s"] for w in vllm if (w["run_id"], w["engine"], w["workload"], w["point"]) == k]
        if len(t) > 1:
            spread.append(((max(t) - min(t)) / np.mean(t), k))
    worst = max(spread)
    closed = max(x for x in spread if (D.sel(x[1][0], engine=x[1][1], workload=x[1][2])[0]["concurrency"] or 0) > 0)
    nvml = {
        p["phase"]: p for p in json.loads((ROOT / "results/nvml-power-sampling/summary.json").read_text())["phases"]
    }
    cal = json.loads((ROOT / "results" / "emulator_calibration.json").read_text())["rows"]
    big = max(cal, key=lambda r: abs(r["error"]))
    return [
        Claim(
            "S21",
            "docs/RESULTS.md and results/h200-transformers/README.md, transformers serve on one H200",
            "tok/s 59 / 698 / 1,699 / 1,510; tok/J 0.44 / 4.8 / 9.3 / 7.2; W (counter) 136 / 147 / 182 / 209 (the "
            "results README's 'mean W (GPU)': 135.7 / 146.2 / 181.7 / 202.6); TTFT p50 19.3 / 65.9 / 256 / 885 ms; "
            "counter against the 10 Hz trace within 0.31% up to 64 streams, -2.75% at 256; against Zeus 0.000%",
            "; ".join(
                f"c{w['concurrency']}: {w['tok_s']:,.1f} tok/s, {w['tok_j']:.3f} tok/J, {w['w']:.1f} W counter "
                f"({w['energy_trace_j'] / w['window_s']:.1f} W trace, "
                f"{100 * (w['energy_trace_j'] / w['energy_j'] - 1):+.2f}%; "
                f"Zeus {100 * (w['energy_crosscheck_j'] / w['energy_j'] - 1):+.3f}%), TTFT p50 "
                f"{np.percentile(w['ttft_ms'], 50):.1f} ms"
                for w in sorted(tf, key=lambda w: w["concurrency"])
            ),
            "holds in docs/RESULTS.md; corrected in the results README: its 'mean W (GPU)' column was the 10 Hz "
            "trace's mean (202.6 W at 256 streams), now the counter's W as everywhere else",
        ),
        Claim(
            "S22",
            "docs/RESULTS.md, the transformers section",
            "(the vLLM runs above varied up to 9.5% between repeats)",
            f"largest (max - min) / mean of a point's tok/s over its repeats: {100 * worst[0]:.1f}% "
            f"({' '.join(map(str, worst[1]))}, each repeat its own arrivals); closed loops {100 * closed[0]:.1f}% "
            f"({' '.join(map(str, closed[1]))})",
            "corrected to 'up to 28% under closed loops (31% under gamma arrivals, each repeat its own arrivals)'",
        ),
        Claim(
            "S23",
            "docs/RESULTS.md, docs/MEASUREMENT.md, results/nvml-power-sampling/README.md",
            "integrating every reading missed the counter by -5.19% (random 2-60 ms bursts) and -10.35% (50 ms square "
            "wave), no better than a 10 Hz sampler (-5.21%, -10.45%); under steady load both agree within 0.05%",
            f"summary.json: bursts {nvml['bursts_2_60ms']['every_reading_rel_diff_pct']:.2f}% / "
            f"{nvml['bursts_2_60ms']['10hz_mean_pct']:.2f}%, square 50 ms "
            f"{nvml['square_50_50ms']['every_reading_rel_diff_pct']:.2f}% / "
            f"{nvml['square_50_50ms']['10hz_mean_pct']:.2f}%, steady every reading "
            f"{nvml['compute_steady']['every_reading_rel_diff_pct']:+.2f}% and "
            f"{nvml['hbm_copy_steady']['every_reading_rel_diff_pct']:+.2f}%",
            "holds",
        ),
        Claim(
            "S24",
            "docs/RESULTS.md, emulator calibration",
            "All 18 ML.ENERGY leaderboard v3 figures ... are within +-25% (the largest: 70B tok/s at batch 128, 21% "
            "high)",
            f"results/emulator_calibration.json: {sum(r['within'] for r in cal)} of {len(cal)} within; largest "
            f"{big['point']} {big['metric']} {100 * big['error']:+.1f}%",
            "holds (it read 25% before the twin's recalibration of 2026-12-06, and 21% before that)"
            if round(100 * big["error"]) == 21
            else f"corrected: the largest is {100 * big['error']:+.1f}%",
        ),
        _twin_counts_claim(),
    ]


def _twin_counts_claim() -> Claim:
    rows = json.loads((ROOT / "results" / "twin" / "cross_validation.json").read_text())["rows"]
    out = []
    for proto in ("by board", "by workload", "held-out runs", "held-out model"):
        rs = [r for r in rows if r["protocol"] == proto]
        counts = []
        for fig in ("output_tok_s", "tpot_p50_ms", "counter_w_per_gpu", "output_tokens_per_j", "ttft_p50_ms"):
            f = [r for r in rs if r["figure"] == fig]
            counts.append(f"{LABELS[fig]} {sum(bool(r['meets_goal']) for r in f)}/{len(f)}")
        boards = len({r["board"] for r in rs})
        out.append(f"{proto} ({boards} boards): " + ", ".join(counts))
    return Claim(
        "S25",
        "docs/RESULTS.md, emulator calibration (the twin's cross-validated and held-out counts)",
        "cross-validated by board (50 points on eight H200s) tok/s 45, TPOT 43, W 38, tok/J 36, TTFT p50 34 of 50; by "
        "workload 45, 43, 42, 37, 33; held out: the sweep run 9, 10, 10, 10, 7 of 10, the 14.5B model 10, 9, 10, 10, 5",
        "results/twin/cross_validation.json: " + "; ".join(out),
        "holds as results/twin records it (the twin recalibrated with a held-out list and prediction intervals; "
        "cross-validation reported as cross-validation)",
    )


def measurement_claims(D: Data) -> list[Claim]:
    """docs/MEASUREMENT.md's claims about committed data (its definitions are not audited here)."""
    split = [r for r in D.views["ttft_split"] if r[0] == "h200-vllm-8b-sweep-sweep"]

    def rng(c: int, i: int) -> str:
        return span([r[i] for r in split if r[1] == c], 2)

    idle: dict[tuple, float] = {}
    for w in D.idle:
        if "transformers" not in w["run_id"] and "steps" not in w["run_id"]:
            key = (w["run_id"], w["window"])
            idle[key] = max(idle.get(key, 0.0), w["max_w"] or 0.0)
    board = D.sel("h200-vllm-8b-board")
    c16 = [w for w in D.windows if w["concurrency"] == 16 and w["output_lengths"] == [128] and w["f"] is not None]
    c256 = [w for w in D.windows if w["concurrency"] == 256 and w["engine"].startswith("vllm")]
    drift = [abs(a - b) / ((a + b) / 2) for a, b in (w["halves"] for w in c256)]
    first = [abs(a - b) / ((a + b) / 2) for a, b in (w["halves"] for w in c256 if w["run_id"] == "h200-vllm-steady")]
    shapes = D.gap_shapes
    nv = json.loads((ROOT / "results/nvml-power-sampling/summary.json").read_text())["instant_power"]
    return [
        Claim(
            "M1",
            "docs/MEASUREMENT.md, where TTFT goes",
            "the engine's queue was 0 ms up to 32 streams, prefill 28-31 ms at 2 streams and 49-162 ms at 32, the part "
            "before scheduling 9-11 ms at 2 streams and 43-99 ms at 32",
            f"v_engine_ttft_split, the sweep's windows: queue {rng(2, 2)} ms at 2, {rng(8, 2)} at 8, {rng(32, 2)} at "
            "32; "
            f"prefill {rng(2, 3)} and {rng(32, 3)}; before scheduling {rng(2, 4)} and {rng(32, 4)}",
            "corrected: the queue is 0.01 ms up to 8 streams and reaches 11.3 ms in one 32-stream window; the rest "
            "holds",
        ),
        Claim(
            "M2",
            "docs/MEASUREMENT.md, idle baseline",
            "Without the wait, the measured H200 bundles' idle windows held samples with utilisation above 0 and 12 of "
            "15 one above 200 W (up to 716 W): idle read up to ~8 W high",
            f"the {len(idle)} idle windows of the vLLM bundles measured before the wait (all but the steps run): "
            f"{sum(v > 200 for v in idle.values())} hold a sample above 200 W (in "
            f"{len({k[0] for k, v in idle.items() if v > 200})} of {len({k[0] for k in idle})} bundles), the highest "
            f"{max(idle.values()):.0f} W",
            "corrected to '19 of 30 idle windows, in 14 of 15 bundles, up to 770 W'; 'up to ~8 W high' not checked "
            "(it needs the "
            "settled idle those runs never measured)",
        ),
        Claim(
            "M3",
            "docs/MEASUREMENT.md, the step table of board 31a864a8",
            "bf16 c4 4.84 / 3.3-3.4% / 11.8-13.1; c16 5.21-5.24 / 11.7-12.2% / 13.1-15.0; c64 7.18-8.11 / 31.0-40.2% / "
            "17.8-20.0, spread x2, bunched; fp8 c4 3.43-3.44 / 4.1-5.2% / 10.0-10.3; c16 3.69-3.70 / 11.5-12.6% / "
            "12.3-13.3; c64 5.27-5.34 / 22.6-25.6% / 19.5-20.6, bunched x3",
            "; ".join(
                f"{e[5:]} c{c} {span([w['d'] for w in g], 2)} / {span([100 * w['f'] for w in g], 1)}% / "
                f"{span([w['s'] for w in g], 1)}, bunched {sum(bool(w['bunched']) for w in g)} of {len(g)}"
                for e in ("vllm-bf16", "vllm-fp8")
                for c in (4, 16, 64)
                for g in [[w for w in board if w["engine"] == e and w["concurrency"] == c]]
            ),
            "holds",
        ),
        Claim(
            "M4",
            "docs/MEASUREMENT.md, why 1.5 x the median",
            "gaps are bimodal at 4 and 16 streams: decode steps within 20% of the median, stalls at 2-4x, under 1% of "
            "gaps between 1.4x and 2x",
            "board 31a864a8, 12 windows: gaps at or under 1.5x within 20% of the median "
            f"{span([100 * x['near_median'] for x in shapes], 0)}%; "
            f"stalls' 5th-95th percentile {span([x['stall_p5_p95'][0] for x in shapes], 1)}x to "
            f"{span([x['stall_p5_p95'][1] for x in shapes], 1)}x; between 1.4x and 2x "
            f"{span([100 * x['valley'] for x in shapes], 1)}%",
            "corrected: 82-96% of the decode gaps within 20% of the median, stalls mostly 1.6-5.6x, 0.3-2.0% of gaps "
            "between 1.4x and 2x (under 1% in 5 of 12 windows)",
        ),
        Claim(
            "M5",
            "docs/MEASUREMENT.md, phase_state",
            "256 streams of 128 tokens on the H200 read 8-18%",
            f"every 256-stream window: f {span([100 * w['f'] for w in c256], 1)}%",
            "holds",
        ),
        Claim(
            "M6",
            "docs/MEASUREMENT.md, a point whose repeats fall in both phase states",
            "On H200s at 16 closed-loop streams of 512 in / 128 out, one server and one GPU ran some repeats spread "
            "(about 11% of gaps stalled) and others bunched (2-5%), 14-28% apart in tok/s; the state persisted through "
            "a 12 s window and neither the 2 s ramp nor the 5 s warm-up set it",
            f"every committed 16-stream window of 128-token outputs ({len(c16)}): f "
            f"{span([100 * w['f'] for w in c16], 1)}%, "
            f"bunched (f < 7.9%) {sum(bool(w['bunched']) for w in c16)}",
            "withdrawn: no committed bundle holds a bunched 16-stream window; the mixed points committed are at 64 "
            "streams, bf16: board 31a864a8 (bunched 1 of 3, within 1% in tok/s) and the 14.5B model (bunched 1 of 3, "
            "9% slower)",
        ),
        Claim(
            "M7",
            "docs/MEASUREMENT.md, steady state by rule",
            "vLLM at 256 streams on the H200 showed 47-49%",
            f"halves of a window apart, the first run's 256-stream windows {span([100 * x for x in first], 1)}%; every "
            f"256-stream window {span([100 * x for x in drift], 1)}%",
            "corrected: 47-49% in the first run's worst windows, up to 55% in the kv8 run",
        ),
        Claim(
            "M8",
            "docs/MEASUREMENT.md, host facts",
            "on a 16-core H200 host, 15 busy processes cost a 64-stream point 14% of its tok/s and took its TTFT p50 "
            "from 94 to 344 ms; at 4 streams no effect",
            "no committed bundle runs a 64-stream point beside busy processes",
            "withdrawn: no committed data measured it",
        ),
        Claim(
            "M9",
            "docs/MEASUREMENT.md, facts measured on an H200",
            "1,063 readings in 86 s, median 100.0 ms apart",
            f"results/nvml-power-sampling/summary.json: {nv['distinct_values']:,} readings, "
            f"{nv['polls'] / nv['poll_hz']:.0f} s, median {nv['change_interval_ms_p5_p50_p95'][1]:.1f} ms",
            "holds",
        ),
        Claim(
            "M10",
            "docs/MEASUREMENT.md, step decomposition, the emulator at 256-token prompts",
            "stalls of 1.2-1.3 steps; counted 2.6% of 11.1% expected",
            "emulated: no committed file",
            "not checked: an emulator run, not committed data",
        ),
    ]


def results_readme_claims(D: Data) -> list[Claim]:
    """results/*/README.md, beyond what docs/RESULTS.md repeats (S-claims name the READMEs they hold for too)."""
    steady = D.sel("h200-vllm-steady")
    capped = {}
    for w in steady:
        capped.setdefault((w["engine"], w["point"]), []).append(w)
    trace = [
        abs(w["energy_trace_j"] / w["energy_j"] - 1)
        for w in D.sel(["h200-vllm-steady", "h200-vllm-long-bursty"])
        if w["energy_trace_j"]
    ]
    c256 = D.sel("h200-vllm-steady", engine="vllm-bf16", point="c256")
    lifetimes = [
        w["window_s"] and 5.0 / (np.median(w["e2e_ms"]) / 1000) for w in D.sel("h200-vllm-steady", point="c256")
    ]
    b14 = ["h200-vllm-14b-light", "h200-vllm-14b-heavy"]
    t14 = {
        (e, pt): D.pct("ttft_ms", 50, b14, engine=e, point=pt)[0]
        for e in ("vllm-bf16", "vllm-fp8")
        for pt in ("c32", "c64")
    }
    spread14 = [
        (max(t) - min(t)) / np.mean(t)
        for e in ("vllm-bf16", "vllm-fp8")
        for pt in ("c16", "c64")
        for t in [[w["tok_s"] for w in D.sel(b14, engine=e, point=pt)]]
    ]
    board = json.loads((ROOT / "results/h200-vllm-board/comparison.json").read_text())["rows"]
    bt = [r for r in board if r["figure"] == "ttft_p50_ms"]
    sweep = json.loads((ROOT / "results/h200-vllm-sweep/comparison.json").read_text())["rows"]
    sw = {(r["engine"], r["point"], r["figure"]): r["error"] for r in sweep}
    ckpt = json.loads((ROOT / "results/h200-vllm-fp8ckpt/predictions.json").read_text())["points"]
    pred = {(p["engine"], p["point"]): p["figures"]["output_tok_s"]["predicted"] for p in ckpt}
    fp8_8 = [w["tok_s"] for w in D.sel("h200-vllm-8b-sweep-sweep", engine="vllm-fp8", point="c8")]
    return [
        Claim(
            "X1",
            "results/h200-vllm/README.md, the first run's table and its light-load table",
            "latency as 'percentile of the pooled requests, two-stage bootstrap', e.g. bf16 c16 TTFT p50 39 [37, 41], "
            "TPOT p50 6.31 [6.20, 6.49]; light bf16 1 stream TTFT p50 27.22 [23.65, 29.71]",
            "docs/MEASUREMENT.md's definitions: bf16 c16 TTFT p50 "
            f"{_p(D, 'ttft_ms', 50, 'h200-vllm-steady', 'vllm-bf16', 1, point='c16')}, "
            f"TPOT p50 {_p(D, 'tpot_ms', 50, 'h200-vllm-steady', 'vllm-bf16', 2, point='c16')}; light bf16 1 stream "
            f"TTFT p50 {_p(D, 'ttft_ms', 50, 'h200-vllm-light', 'vllm-bf16', 2, point='c1')}",
            "corrected: the tables made again by the definitions the project now uses (the two-stage bootstrap "
            "covered far less than 95%, docs/MEASUREMENT.md); a p50 over fewer than 20 requests a repeat has no "
            "interval",
        ),
        Claim(
            "X2",
            "results/h200-vllm/README.md, power and capping",
            "power-capped in 80-100% of samples; SM clock 1,520-1,960 MHz against 1,980 (16-256 streams); per point "
            "0.96 / 1.00 / 0.99 / 0.80 / 1.00 / 0.95 and 1,917 / 1,663 / 1,521 / 1,959 / 1,771 / 1,606 MHz",
            "; ".join(
                f"{e[5:]} {pt} {np.mean([w['power_capped_share'] for w in g]):.2f} "
                f"{np.mean([w['sm_clock_mhz'] for w in g]):,.0f} MHz"
                for (e, pt), g in sorted(capped.items())
            ),
            "holds",
        ),
        Claim(
            "X3",
            "results/h200-vllm/README.md, power and capping",
            "Energy counter against the integrated 10 Hz trace: within 2% in every window (largest gap 1.92%, mean "
            "0.59%)",
            f"the first run's {len(trace)} windows: largest {100 * max(trace):.2f}%, mean {100 * np.mean(trace):.2f}%",
            "holds",
        ),
        Claim(
            "X4",
            "results/h200-vllm/README.md, prefill waves at 256 streams",
            "TTFT p50 was 803, 1,941 and 2,074 ms in bf16's three repeats ...; (warm-up) 1.1-1.4 lifetimes at 256 "
            "streams",
            f"TTFT p50 {', '.join(num(np.percentile(w['ttft_ms'], 50)) for w in c256)} ms; 5 s warm-up / median E2E "
            f"{span(lifetimes, 2)}",
            "corrected: 0.96-1.35 lifetimes; the TTFT p50s hold",
        ),
        Claim(
            "X5",
            "results/h200-vllm/README.md, light load",
            "that board at 2 streams draws 535 W, above this board's 500 W at 4 streams",
            f"{_f(D, 'w', 'h200-vllm-8b-sweep-sweep', 'vllm-bf16', 1, point='c2')} W against "
            f"{_f(D, 'w', 'h200-vllm-light', 'vllm-bf16', 1, point='c4')} W",
            "corrected: 533 W",
        ),
        Claim(
            "X6",
            "results/h200-vllm-14b/README.md",
            "bf16's TTFT p50 is 2.3x fp8's (635 ms against 272 ms) at 32 streams of 2K prompts; at 64 streams fp8's is "
            "higher (179 ms against 127 ms); repeat spread up to 9%",
            f"{t14[('vllm-bf16', 'c32')]:.0f} against {t14[('vllm-fp8', 'c32')]:.0f} ms "
            f"({t14[('vllm-bf16', 'c32')] / t14[('vllm-fp8', 'c32')]:.1f}x); {t14[('vllm-fp8', 'c64')]:.0f} against "
            f"{t14[('vllm-bf16', 'c64')]:.0f} ms; (max - min) / mean at 16 and 64 streams "
            f"{span([100 * x for x in spread14], 1)}%",
            "corrected to the mean of each repeat's p50 (589 against 272 ms, 2.2x; 181 against 121 ms); the repeat "
            "spread holds (up to 9.4%)",
        ),
        Claim(
            "X7",
            "results/h200-vllm-board/README.md",
            "59 of the 60 figures fell inside the band (outside: bf16 TTFT p50 at 64 streams, +121%); TTFT p50 ... "
            "+16% to +121%",
            f"comparison.json: inside the band {sum(r['inside_band'] for r in board)} of {len(board)}; TTFT p50 errors "
            f"{span([100 * r['error'] for r in bt], 1)}%",
            "corrected: +113.8% (the README's table already said so; its prose kept the pooled-percentile figure)",
        ),
        Claim(
            "X8",
            "results/h200-vllm-sweep/README.md",
            "bf16 speed held: tok/s +0.3..+5.3%, TPOT -3.6..+1.5%, tok/J -1.4..+4.8%; TTFT p50 right at 2 streams "
            "(+2%); "
            "its 8-stream repeats fell 1,686 -> 1,611 -> 1,533 tok/s",
            "bf16 sweep points: tok/s "
            + span([100 * sw[("vllm-bf16", f"sweep:c{c}", "output_tok_s")] for c in (2, 8, 32)], 1)
            + "%, TPOT "
            + span([100 * sw[("vllm-bf16", f"sweep:c{c}", "tpot_p50_ms")] for c in (2, 8, 32)], 1)
            + "%, tok/J "
            + span([100 * sw[("vllm-bf16", f"sweep:c{c}", "output_tokens_per_j")] for c in (2, 8, 32)], 1)
            + f"%; TTFT p50 at 2 streams {100 * sw[('vllm-bf16', 'sweep:c2', 'ttft_p50_ms')]:+.1f}% (bf16), "
            f"{100 * sw[('vllm-fp8', 'sweep:c2', 'ttft_p50_ms')]:+.1f}% (fp8); fp8 8 streams "
            + " -> ".join(num(x) for x in fp8_8),
            "corrected: TPOT -3.7..+1.3%; TTFT p50 at 2 streams +3.9% bf16 and -15.7% fp8; the repeats hold",
        ),
        Claim(
            "X9",
            "results/h200-vllm-fp8ckpt/README.md",
            "the twin ... predicted the checkpoint 42-46% faster than online fp8",
            "predictions.json, checkpoint / online tok/s: "
            + ", ".join(
                f"c{c} {pred[('vllm-fp8-ckpt', f'sweep:c{c}')] / pred[('vllm-fp8', f'sweep:c{c}')]:.2f}"
                for c in (2, 8, 32)
            ),
            "corrected to 33-46%",
        ),
        Claim(
            "X10",
            "results/h200-vllm-steps/README.md, the predictions scored",
            "P1 holds (for fixed16), P2 not seen, P3 does not hold, P4 holds (means 23.5 and 23.1 ms), P5 half",
            "benchmarks/filed_predictions.py on criteria.json: "
            + ", ".join(f"{p['id']} {p['verdict']}" for p in _steps_criteria())
            + "; s mean over each precision's 12 windows "
            + " and ".join(f"{np.mean([w['s'] for w in D.sel('h200-vllm-steps-gpu1', precision=x)]):.1f}" for x in P2)
            + " ms",
            "corrected: each verdict by its filed words (P1, P3, P5 fail; P2, P4 not measured, the second GPU never "
            "ran; Q1-Q5 not measured); s means 23.9 and 23.2 ms",
        ),
    ]


def more_readme_claims(D: Data) -> list[Claim]:
    pairs = D.pairs()
    b14 = ["h200-vllm-14b-light", "h200-vllm-14b-heavy"]
    r14 = [D.ratio("tok_s", b14, "vllm-fp8", workload=wl, point=pt)[0] for wl, pt in _P14]
    ck = "h200-vllm-8b-fp8ckpt"
    ll = D.sel("h200-vllm-light-long", point="c4")
    c16 = [
        r
        for r in cross_run_rows(D)
        if r["run"]
        in ("h200-vllm-steady", "h200-vllm-8b-unit", "h200-vllm-8b-sweep-decode", "h200-vllm-8b-sweep-decode-fp8")
    ]
    return [
        Claim(
            "X11",
            "docs/RESULTS.md, emulator calibration",
            "The real H200 runs already answer the first claim for vLLM on one GPU (1.27-1.48x, not 1.8-2.1x)",
            f"every closed-loop pair, 8B and 14.5B: {span([p['tok_s'][0] for p in pairs] + r14)}x",
            "corrected to 1.17-1.48x",
        ),
        Claim(
            "X12",
            "results/h200-vllm-fp8ckpt/README.md and docs/RESULTS.md",
            "the checkpoint's time to first token is 15-37% shorter at 8 and 32 streams",
            "checkpoint / online TTFT p50, paired: "
            + ", ".join(
                f"c{c} {ci(D.ratio('ttft_p50', ck, 'vllm-fp8-ckpt', 'vllm-fp8', point=f'c{c}'), 3)}" for c in (8, 32)
            ),
            "corrected: 15% shorter at 8 streams (significant); at 32 streams 39% shorter on the mean, but the "
            "paired interval includes no difference",
        ),
        Claim(
            "X13",
            "results/h200-vllm/README.md, light load",
            "at 2K-token prompts and 4 streams every sample is flagged power capped (bf16 and fp8)",
            "power-capped share of samples: "
            + ", ".join(f"{w['engine'][5:]} #{w['repeat']} {w['power_capped_share']:.2f}" for w in ll),
            "holds",
        ),
        Claim(
            "X14",
            "results/h200-vllm-sweep/README.md",
            "W within 10% at all six points (largest +9.7%, fp8 at 8 streams, whose repeats spread 443-514 W)",
            "fp8 8 streams, W per repeat: "
            + ", ".join(num(w["w"]) for w in D.sel("h200-vllm-8b-sweep-sweep", engine="vllm-fp8", point="c8")),
            "corrected to 463-491 W",
        ),
        Claim(
            "X15",
            "results/h200-vllm-unit/README.md",
            "NVML's SM clock (1,916-1,975 MHz mean in these windows; the fastest unit ran the lowest)",
            "mean SM clock per window: " + ", ".join(f"{r['gpu']} {r['precision']} {span(r['clock'], 0)}" for r in c16),
            "holds (the points' means; windows 1,908-1,979 MHz)",
        ),
    ]


def _steps_criteria() -> list[dict]:
    return json.loads((ROOT / "results/h200-vllm-steps/comparison.json").read_text())["criteria"]


# --- the result tables of the docs, made again ---------------------------------------------------------------------

_FIRST_RUN = [
    ("1 stream, 512/128", "h200-vllm-light", "light", "c1"),
    ("4 streams", "h200-vllm-light", "light", "c4"),
    ("16 streams, 512/128", "h200-vllm-steady", "steady", "c16"),
    ("64 streams", "h200-vllm-steady", "steady", "c64"),
    ("256 streams", "h200-vllm-steady", "steady", "c256"),
    ("32 streams, 2K prompts", "h200-vllm-long-bursty", "long-prompt", "c32"),
    ("gamma, 8 req/s", "h200-vllm-long-bursty", "bursty", "gamma-r8-b0.25"),
    ("1 stream, 2K prompts", "h200-vllm-light-long", "light-long", "c1"),
    ("4 streams, 2K prompts", "h200-vllm-light-long", "light-long", "c4"),
]
_14B = [
    ("1 stream, 512/128", "light", "c1"),
    ("4 streams", "light", "c4"),
    ("16 streams", "steady", "c16"),
    ("64 streams", "steady", "c64"),
    ("32 streams, 2K prompts", "long-prompt", "c32"),
]


def _ratio_cell(est: tuple, nd: int = 2) -> str:
    text = ci(est, nd)
    return text + ": no significant difference" if est[1] is not None and est[1] <= 1 <= est[2] else text


def table_8b(D: Data) -> str:
    lines = [
        "| point | H200 | output tok/s bf16 | output tok/s fp8 | fp8 / bf16 (paired) | tok/J bf16 | tok/J fp8 | fp8 "
        "/ bf16 tok/J |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, run, wl, pt in _FIRST_RUN:
        k = {"workload": wl, "point": pt}
        lines.append(
            f"| {label} | {D.sel(run, **k)[0]['gpu'][4:12]} | {_f(D, 'tok_s', run, 'vllm-bf16', **k)} | "
            f"{_f(D, 'tok_s', run, 'vllm-fp8', **k)} | {_ratio_cell(D.ratio('tok_s', run, 'vllm-fp8', **k))} | "
            f"{_f(D, 'tok_j', run, 'vllm-bf16', 3, **k)} | {_f(D, 'tok_j', run, 'vllm-fp8', 3, **k)} | "
            f"{_ratio_cell(D.ratio('tok_j', run, 'vllm-fp8', **k))} |"
        )
    return "\n".join(lines)


def table_14b(D: Data) -> str:
    runs = ["h200-vllm-14b-light", "h200-vllm-14b-heavy"]
    lines = [
        "| point | output tok/s bf16 | output tok/s fp8 | fp8 / bf16 (paired) | tok/J bf16 | tok/J fp8 | fp8 / bf16 "
        "tok/J | W bf16 | W fp8 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, wl, pt in _14B:
        k = {"workload": wl, "point": pt}
        lines.append(
            f"| {label} | {_f(D, 'tok_s', runs, 'vllm-bf16', **k)} | {_f(D, 'tok_s', runs, 'vllm-fp8', **k)} | "
            f"{_ratio_cell(D.ratio('tok_s', runs, 'vllm-fp8', **k))} | {_f(D, 'tok_j', runs, 'vllm-bf16', 3, **k)} | "
            f"{_f(D, 'tok_j', runs, 'vllm-fp8', 3, **k)} | {_ratio_cell(D.ratio('tok_j', runs, 'vllm-fp8', **k))} | "
            f"{_f(D, 'w', runs, 'vllm-bf16', **k)} | {_f(D, 'w', runs, 'vllm-fp8', **k)} |"
        )
    return "\n".join(lines)


def table_14b_readme(D: Data) -> str:
    runs = ["h200-vllm-14b-light", "h200-vllm-14b-heavy"]
    lines = [
        "| engine | point | output tok/s | W (energy counter) | tok/J | TTFT p50 (ms) | TPOT p50 (ms) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for label, wl, pt in _14B:
        for e in ("vllm-bf16", "vllm-fp8"):
            k = {"workload": wl, "point": pt}
            lines.append(
                f"| {e[5:]} | {label} | {_f(D, 'tok_s', runs, e, 1, **k)} | {_f(D, 'w', runs, e, 1, **k)} | "
                f"{_f(D, 'tok_j', runs, e, 3, **k)} | {_p(D, 'ttft_ms', 50, runs, e, 1, **k)} | "
                f"{_p(D, 'tpot_ms', 50, runs, e, 2, **k)} |"
            )
    return "\n".join(lines)


def table_cross(D: Data) -> str:
    rows = cross_run_rows(D)

    def get(run: str, wl: str, prec: str) -> dict:
        return next(r for r in rows if r["run"] == run and r["workload"] == wl and r["precision"] == prec)

    pairs = [
        (
            "h200-vllm-steady steady",
            get("h200-vllm-steady", "steady", "bf16"),
            get("h200-vllm-steady", "steady", "fp8"),
        ),
        *[
            (f"h200-vllm-8b-unit {wl}", get("h200-vllm-8b-unit", wl, "bf16"), get("h200-vllm-8b-unit", wl, "fp8"))
            for wl in ("steady16", "ref16u")
        ],
        (
            "h200-vllm-8b-sweep-decode(-fp8) ref16, one engine loaded",
            get("h200-vllm-8b-sweep-decode", "ref16", "bf16"),
            get("h200-vllm-8b-sweep-decode-fp8", "ref16", "fp8"),
        ),
        (
            "h200-vllm-8b-board steady16",
            get("h200-vllm-8b-board", "steady16", "bf16"),
            get("h200-vllm-8b-board", "steady16", "fp8"),
        ),
        (
            "h200-vllm-steps-gpu1 fixed16",
            get("h200-vllm-steps-gpu1", "fixed16", "bf16"),
            get("h200-vllm-steps-gpu1", "fixed16", "fp8"),
        ),
    ]
    lines = [
        "| H200 | run | bf16 tok/s | bf16 W | bf16 tok/J | fp8 tok/s | fp8 W | fp8 tok/J | decode step d bf16 / fp8 "
        "(ms) "
        "| stall s (ms) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, b, f in pairs:
        gpus = b["gpu"] if b["gpu"] == f["gpu"] else f"{b['gpu']} (bf16), {f['gpu']} (fp8)"
        s_lo, s_hi = min(b["s_range"][0], f["s_range"][0]), max(b["s_range"][1], f["s_range"][1])
        lines.append(
            f"| {gpus} | {label} | {ci(b['tok_s'])} | {ci(b['w'])} | {ci(b['tok_j'], 2)} | {ci(f['tok_s'])} | "
            f"{ci(f['w'])} | {ci(f['tok_j'], 2)} | {b['d'][0]:.2f} / {f['d'][0]:.2f} | {s_lo:.1f}-{s_hi:.1f} |"
        )
    return "\n".join(lines)


def table_ckpt(D: Data) -> str:
    ck = "h200-vllm-8b-fp8ckpt"
    lines = [
        "| streams | tok/s | TPOT p50 | W | tok/J | TTFT p50 |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c in (2, 8, 32):
        cells = [
            _ratio_cell(D.ratio(f, ck, "vllm-fp8-ckpt", "vllm-fp8", point=f"c{c}"), 3)
            for f in ("tok_s", "tpot_p50", "w", "tok_j", "ttft_p50")
        ]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_ckpt_readme(D: Data) -> str:
    ck = "h200-vllm-8b-fp8ckpt"
    lines = [
        "| point | figure | online fp8 [95% CI] | pre-quantized [95% CI] | checkpoint / online, paired [95% CI] |",
        "|---|---|---:|---:|---:|",
    ]
    figs = [
        ("tok/s", "tok_s", None, 1),
        ("TPOT p50", "tpot_ms", 50, 3),
        ("W", "w", None, 1),
        ("tok/J", "tok_j", None, 3),
        ("TTFT p50", "ttft_ms", 50, 2),
        ("TTFT p99", "ttft_ms", 99, 1),
    ]
    for c in (2, 8, 32):
        for label, fig, q, nd in figs:
            k = {"point": f"c{c}"}
            if q is None:
                a, b = _f(D, fig, ck, "vllm-fp8", nd, **k), _f(D, fig, ck, "vllm-fp8-ckpt", nd, **k)
                r = D.ratio(fig, ck, "vllm-fp8-ckpt", "vllm-fp8", **k)
            else:
                a, b = _p(D, fig, q, ck, "vllm-fp8", nd, **k), _p(D, fig, q, ck, "vllm-fp8-ckpt", nd, **k)
                r = D.ratio(f"{fig[:4]}_p50", ck, "vllm-fp8-ckpt", "vllm-fp8", **k) if q == 50 else None
            lines.append(f"| {c} streams | {label} | {a} | {b} | {_ratio_cell(r, 3) if r else 'n/a'} |")
    return "\n".join(lines)


def table_first_run(D: Data) -> str:
    """results/h200-vllm/README.md's table: every point of the first run, mean of its three repeats."""
    lines = [
        "| engine | point | output tok/s | tok/J | tok/J above idle | W (counter) | TTFT p50 (ms) | TTFT p99 (ms) | "
        "TPOT p50 (ms) | $ / 1M output tok |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, run, wl, pt in _FIRST_RUN[2:7]:
        for e in ("vllm-bf16", "vllm-fp8"):
            k = {"workload": wl, "point": pt}
            ws = D.sel(run, engine=e, **k)
            above = t_log([w["tokens"] / (w["energy_j"] - w["idle_power_w"] * w["window_s"]) for w in ws])
            tok = D.fig("tok_s", run, engine=e, **k)
            usd = tuple(None if x is None else 3.5 / (x * 3600) * 1e6 for x in (tok[0], tok[2], tok[1]))
            lines.append(
                f"| {e} | {label} | {ci(tok)} | {_f(D, 'tok_j', run, e, 2, **k)} | {ci(above, 2)} | "
                f"{_f(D, 'w', run, e, **k)} | {_p(D, 'ttft_ms', 50, run, e, 0, **k)} | "
                f"{_p(D, 'ttft_ms', 99, run, e, 0, **k)} | {_p(D, 'tpot_ms', 50, run, e, 2, **k)} | {ci(usd, 3)} |"
            )
    return "\n".join(lines)


TABLES = {
    "docs/RESULTS.md, the 8B table": table_8b,
    "docs/RESULTS.md, the 14.5B table": table_14b,
    "docs/RESULTS.md, one configuration on several H200s": table_cross,
    "docs/RESULTS.md, the pre-quantized checkpoint (checkpoint / online, paired)": table_ckpt,
    "results/h200-vllm/README.md, every point": table_first_run,
    "results/h200-vllm-14b/README.md, figures": table_14b_readme,
    "results/h200-vllm-fp8ckpt/README.md, measured": table_ckpt_readme,
}


# --- the audit record ------------------------------------------------------------------------------------------------


def claims(D: Data) -> list[Claim]:
    return [
        *readme_claims(D),
        *results_claims_8b(D),
        *results_claims_runs(D),
        *results_claims_cross(D),
        *results_claims_other(D),
        *measurement_claims(D),
        *results_readme_claims(D),
        *more_readme_claims(D),
        *benchmark_claims(),
    ]


def agreement(D: Data) -> str:
    """How far this recomputation is from the warehouse's own SQL (v_point_figures) over the same bundles."""
    metric = {
        "output_tok_s": ("tok_s", None),
        "counter_w_per_gpu": ("w", None),
        "output_tokens_per_j": ("tok_j", None),
        "ttft_p50_ms": ("ttft_ms", 50),
        "tpot_p50_ms": ("tpot_ms", 50),
    }
    worst, n, where = 0.0, 0, ""
    for run, engine, wl, pt, m, est, lo, hi in D.views["point_figures"]:
        if m not in metric or est is None or "transformers" in run:
            continue
        fig, q = metric[m]
        mine = (
            D.fig(fig, run, engine=engine, workload=wl, point=pt)
            if q is None
            else D.pct(fig, q, run, engine=engine, workload=wl, point=pt)
        )
        for a, b, bound in zip(mine, (est, lo, hi), ("estimate", "interval bound", "interval bound"), strict=True):
            if a is not None and b is not None and abs(a / b - 1) > worst:
                worst, where = abs(a / b - 1), f"{LABELS[m]} {bound}"
        n += 1
    same = sum(w["tokens"] == w["stored_tokens"] for w in D.windows)
    return (
        f"The recomputed output tokens equal the agent's stored count in {same} of {len(D.windows)} windows. "
        f"The recomputation agrees with the warehouse's own SQL (v_point_figures over the same bundles): {n} point "
        f"figures (tok/s, W, tok/J, TTFT and TPOT p50 with their intervals), largest relative difference {worst:.1e} "
        f"(a {where})."
    )


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def audit_markdown(cs: list[Claim]) -> str:
    kinds = {k: sum(c.verdict.startswith(k) for c in cs) for k in ("holds", "corrected", "withdrawn", "not checked")}
    lines = [
        f"{len(cs)} claims checked: {kinds['holds']} hold, {kinds['corrected']} corrected, {kinds['withdrawn']} "
        f"withdrawn, {kinds['not checked']} not checked (why: in the row).",
        "",
        "| # | where | the words (as they stood) | recomputed from the committed data | verdict |",
        "|---|---|---|---|---|",
    ]
    for c in cs:
        lines.append(f"| {c.id} | {_cell(c.where)} | {_cell(c.words)} | {_cell(c.recomputed)} | {_cell(c.verdict)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table into results/claims_audit.md")
    ap.add_argument("--check", action="store_true", help="exit 1 where results/claims_audit.md differs")
    ap.add_argument("--tables", action="store_true", help="print the docs' result tables made again")
    args = ap.parse_args(argv)
    data = Data.load()
    if args.tables:
        for name, fn in TABLES.items():
            print(f"### {name}\n\n{fn(data)}\n")
        return 0
    table = agreement(data) + "\n\n" + audit_markdown(claims(data))
    text = AUDIT.read_text()
    if BEGIN not in text or END not in text:
        print(f"claims_audit: {AUDIT} has no {BEGIN} ... {END} markers; expected the audit record", file=sys.stderr)
        return 2
    head, rest = text.split(BEGIN, 1)
    new = f"{head}{BEGIN}\n\n{table}\n\n{END}{rest.split(END, 1)[1]}"
    if args.check:
        if new != text:
            print(f"claims_audit: {AUDIT} is not what the committed data give; run with --write", file=sys.stderr)
            return 1
        print("claims_audit: results/claims_audit.md matches the committed data")
        return 0
    if args.write:
        AUDIT.write_text(new)
    print(table)
    return 0


def benchmark_claims() -> list[Claim]:
    """docs/RESULTS.md's tables of benchmarks kept as files (results/*.json): the numbers as the files hold them."""

    def load(name: str) -> dict:
        return json.loads((ROOT / "results" / name).read_text())

    lg = load("loadgen_fidelity.json")["rows"]
    cli = load("cli_startup.json")["warehouses"]
    rs = load("report_scale.json")["queries"]
    vs = load("validation_scale.json")["sizes"]
    ws = load("warehouse_scale.json")["sizes"]
    ai = load("peer_aiperf.json")["rows"]
    return [
        Claim(
            "B1",
            "docs/RESULTS.md, load generator fidelity table",
            "wattbench TTFT error p50 / p99 +0.22 / +0.63, +0.38 / +2.49, +3.23 / +21.94 ms at 32, 128, 512 streams; "
            "99.7%, 99.4%, 98.3% of the ideal rate; aiohttp +8.18 / +21.46, +20.98 / +49.67, +220.87 / +337.88 ms",
            "results/loadgen_fidelity.json: "
            + "; ".join(
                f"{r['streams']} {r['client']} {r['ttft_err_p50_ms']:+.2f} / {r['ttft_err_p99_ms']:+.2f} ms, "
                f"{100 * r['rate_ratio']:.1f}%"
                for r in lg
            ),
            "holds",
        ),
        Claim(
            "B2",
            "docs/RESULTS.md, CLI start-up table",
            "sql select 1 0.31 / 0.25 / 0.27 s; sql load_points 0.33 / 0.30 / 0.30 s; report 0.43 / 0.32 / 0.47 s; "
            "load --help 0.18 s (medians: one synthetic run, five H200 runs, 10M requests)",
            "results/cli_startup.json medians: "
            + "; ".join(
                f"{c} " + " / ".join(f"{w['commands'][c]['median_s']:.2f}" for w in cli.values() if c in w["commands"])
                for c in ("sql select 1", "sql load_points", "report", "load --help")
            ),
            "holds",
        ),
        Claim(
            "B3",
            "docs/RESULTS.md, AIPerf table",
            "TTFT p50 52.9 / 47.5, 55.8 / 51.5, 48.9 / 49.6 ms; TPOT p50 17.03 / 17.03, 22.19 / 22.18, 18.06 / "
            "18.46 ms (wattbench / AIPerf at 8 streams, 32 streams, 6 req/s Poisson)",
            "results/peer_aiperf.json: "
            + "; ".join(f"{r['load']} {r['client']} {r['ttft_ms']['p50']:.1f} / {r['tpot_ms']['p50']:.2f}" for r in ai),
            "holds",
        ),
        Claim(
            "B4",
            "docs/RESULTS.md and README.md, warehouse at scale",
            "100,000: 2.4 s, 601 MB, before 5.0 s, 721 MB; 1,000,000: 6.9 s, 1,051 MB, before 25.8 s, 1,166 MB; 10M GX "
            "suites 13.4 s, 1,313 MB; 1M 1.5 s, 1,052 MB against 22.0 s, 2,224 MB; slowest report over 10M 0.077 s",
            "results/warehouse_scale.json: "
            + "; ".join(
                f"{k} {x['ingest'][0]['ingest_s']:.1f} s, {x['ingest'][0]['peak_rss_mb']:,.0f} MB, before "
                f"{x['ingest'][0]['before']['ingest_s']:.1f} s, {x['ingest'][0]['before']['peak_rss_mb']:,.0f} MB"
                for k, x in ws.items()
            )
            + "; validation_scale.json: "
            + "; ".join(
                f"{k} {x['validation']['validation_s']:.1f} s, {x['validation']['peak_rss_mb']:,.0f} MB"
                for k, x in vs.items()
            )
            + f"; report_scale.json v_engine_contrasts cold {rs['v_engine_contrasts']['cold_s']:.3f} s",
            "holds",
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
