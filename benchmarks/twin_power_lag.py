"""Does the H200's power follow the prefills, or stay high after them? (run: python -m benchmarks.twin_power_lag)

Measured (source: measured): every closed-loop load point of the 8B bundles (results/h200-vllm/bundle-light*.tar.xz,
bundle-steady.tar.xz and, where present, results/h200-vllm-sweep/bundle-*.tar.xz): each GPU sample in the point's
window (NVML power, 10 Hz in the first bundles, 20 Hz in the sweep) is binned by the time since the engine's last
prefill ended (the last first token streamed before the sample). If power stayed high after prefill spikes, the
samples long after a prefill would sit well above those of a point with no prefills near them; if power follows the
work, it falls back to the decode level within the sampler's own averaging (one or two samples).

Reported per point: the mean power per bin of time since the last prefill (W, with the number of samples), the
decode-only level (samples >= 150 ms after a prefill: no prefill in the NVML averaging window) and the point's mean.
Writes results/h200-vllm/twin_power_lag.json and .md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = (ROOT / "results" / "h200-vllm", ROOT / "results" / "h200-vllm-sweep")
PATTERNS = ("bundle-light*.tar.xz", "bundle-steady.tar.xz", "bundle-sweep*.tar.xz", "bundle-decode*.tar.xz")
BINS_MS = (0, 50, 100, 150, 250, 400, 700, 10**9)
DECODE_ONLY_MS = 150.0  # a sample this long after the last prefill holds no prefill in NVML's averaging window
OUT = ROOT / "results" / "h200-vllm" / "twin_power_lag.json"


def _jsonl(path: Path):
    """The rows of a bundle's table file: <table>.jsonl, or version 3's <table>.csv beside it (the agent's reader)."""
    if not path.exists() and path.with_suffix(".csv").exists():
        from wattbench_agent.bundle import read_rows

        yield from (row for _, row in read_rows(path.with_suffix(".csv")))
        return
    with path.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def analyse_folder(folder: Path) -> list[dict[str, Any]]:
    """Per load point (repeat): power binned by the time since the last prefill ended."""
    (lp_file,) = folder.glob("load_runs.jsonl")
    runs = {r["load_point_id"]: r for r in _jsonl(lp_file)}
    first_tokens: dict[str, list[int]] = defaultdict(list)
    for r in _jsonl(folder / "requests.jsonl"):
        if r.get("first_token_ns"):
            first_tokens[r["load_point_id"]].append(int(r["first_token_ns"]))
    samples: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for s in _jsonl(folder / "gpu_samples.jsonl"):
        if s.get("power_w") is not None:
            samples[s["deployment_id"]].append((int(s["t_ns"]), float(s["power_w"])))
    for v in samples.values():
        v.sort()
    out = []
    for lp, run in sorted(runs.items()):
        if run.get("shape") != "concurrency" or run.get("status") != "ok":
            continue
        ev = sorted(first_tokens.get(lp, ()))
        lo, hi = run["window_start_ns"], run["window_end_ns"]
        win = [(t, p) for t, p in samples.get(run["deployment_id"], ()) if lo <= t < hi]
        if not win or not ev:
            continue
        bins: dict[int, list[float]] = defaultdict(list)
        decode_only: list[float] = []
        for t, p in win:
            i = bisect.bisect_right(ev, t) - 1
            if i < 0:
                continue
            ms = (t - ev[i]) / 1e6
            k = max(j for j in range(len(BINS_MS) - 1) if BINS_MS[j] <= ms)
            bins[k].append(p)
            if ms >= DECODE_ONLY_MS:
                decode_only.append(p)
        in_window = [e for e in ev if lo <= e < hi]
        out.append(
            {
                "load_point_id": lp,
                "engine": run["deployment_id"],
                "workload": run["workload"],
                "point": run["point_label"],
                "repeat": run["repeat"],
                "streams": run.get("concurrency"),
                "output_tokens": run.get("output_tokens"),
                "prefills_per_s": len(in_window) / ((hi - lo) / 1e9),
                "samples": len(win),
                "mean_w": sum(p for _t, p in win) / len(win),
                "decode_only_w": (sum(decode_only) / len(decode_only)) if decode_only else None,
                "decode_only_samples": len(decode_only),
                "bins": [
                    {
                        "from_ms": BINS_MS[k],
                        "to_ms": None if BINS_MS[k + 1] >= 10**9 else BINS_MS[k + 1],
                        "mean_w": sum(v) / len(v),
                        "samples": len(v),
                    }
                    for k, v in sorted(bins.items())
                ],
            }
        )
    return out


def analyse(bundles: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for b in bundles:
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(b) as tf:
                tf.extractall(tmp, filter="data")
            for folder in sorted(p.parent for p in Path(tmp).rglob("load_runs.jsonl")):
                for r in analyse_folder(folder):
                    rows.append({"bundle": str(b.relative_to(ROOT)), **r})
    return rows


def points(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The repeats of each (bundle, engine, workload, point) pooled: means of the per-repeat figures."""
    by: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by[(r["bundle"], r["engine"], r["workload"], r["point"])].append(r)
    out = []
    for (bundle, engine, wl, pt), rs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[1][0]["streams"] or 0)):
        dec = [r["decode_only_w"] for r in rs if r["decode_only_w"] is not None]
        bins: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for r in rs:
            for b in r["bins"]:
                bins[b["from_ms"]].append((b["mean_w"] * b["samples"], b["samples"]))
        out.append(
            {
                "bundle": bundle,
                "engine": engine,
                "point": f"{wl}:{pt}",
                "streams": rs[0]["streams"],
                "output_tokens": rs[0]["output_tokens"],
                "repeats": len(rs),
                "prefills_per_s": sum(r["prefills_per_s"] for r in rs) / len(rs),
                "mean_w": sum(r["mean_w"] for r in rs) / len(rs),
                "decode_only_w": (sum(dec) / len(dec)) if dec else None,
                "decode_only_samples": sum(r["decode_only_samples"] for r in rs),
                "bins": {
                    k: {"mean_w": sum(a for a, _n in v) / sum(n for _a, n in v), "samples": sum(n for _a, n in v)}
                    for k, v in sorted(bins.items())
                },
            }
        )
    return out


def markdown(pts: list[dict[str, Any]]) -> str:
    heads = [f"{a}-{b if b < 10**9 else ''} ms" for a, b in zip(BINS_MS, BINS_MS[1:])]
    lines = [
        "Measured power (W, NVML samples in the window, repeats pooled) by the time since the engine's last prefill "
        "ended; decode-only: samples >= 150 ms after it. (n) = samples.",
        "",
        "| engine | point | streams | out | prefills/s | mean W | decode-only W | " + " | ".join(heads) + " |",
        "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(heads),
    ]
    for p in pts:
        cells = []
        for a in BINS_MS[:-1]:
            b = p["bins"].get(a)
            cells.append(f"{b['mean_w']:.0f} ({b['samples']})" if b else "-")
        dec = f"{p['decode_only_w']:.0f} ({p['decode_only_samples']})" if p["decode_only_w"] is not None else "-"
        lines.append(
            f"| {p['engine']} | {p['point']} | {p['streams']} | {p['output_tokens']} | {p['prefills_per_s']:.1f} | "
            f"{p['mean_w']:.0f} | {dec} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.twin_power_lag", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv or [])
    bundles = sorted({b for f in FOLDERS for pat in PATTERNS for b in f.glob(pat)})
    rows = analyse(bundles)
    pts = points(rows)
    out = Path(args.out)
    out.write_text(
        json.dumps({"source": "measured", "what": __doc__.split("\n\n")[1], "points": pts, "repeats": rows}, indent=1)
        + "\n"
    )
    md = markdown(pts)
    out.with_suffix(".md").write_text(md)
    print(md)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
