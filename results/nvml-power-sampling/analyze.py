#!/usr/bin/env python3
"""Analyse raw.json.gz from study.py: how often NVML's instant power and energy counter update, and how far the
integrated instant-power trace is from the counter per load phase, for samplers at 100/50/20/10/5 Hz.

    python results/nvml-power-sampling/analyze.py      # writes summary.json and power_square_wave.png here

A sampler at f Hz reads, at each tick, the value NVML holds at that moment; study.py kept every new value, so the
held value at any instant is the last one seen before it (zero-order hold). For each rate the ticks start at 20
phase offsets; the table gives the mean and the worst relative difference from the counter over the phase.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RATES_HZ = (100, 50, 20, 10, 5)
OFFSETS = 20


def main() -> None:
    raw = json.load(gzip.open(HERE / "raw.json.gz"))
    tr = raw["trace"]
    t = np.asarray(tr["host_ns"], dtype=np.float64) / 1e9
    p = np.asarray(tr["mw"], dtype=np.float64) / 1e3

    def held(tq: np.ndarray) -> np.ndarray:
        return p[np.clip(np.searchsorted(t, tq, side="right") - 1, 0, len(p) - 1)]

    span = t[-1] - t[0]
    reads = raw["counter_reads"]
    ct = np.array([(a + b) / 2e9 for a, b, _ in reads])
    summary = {
        "facts": raw["facts"],
        "instant_power": {
            "polls": tr["polls"],
            "poll_hz": tr["polls"] / span,
            "distinct_values": len(p),
            "change_interval_ms_p5_p50_p95": np.percentile(np.diff(t) * 1e3, [5, 50, 95]).round(1).tolist(),
        },
        "energy_counter": {
            "reads": raw["counter_reads_total"],
            "distinct_values": len(reads),
            "change_interval_ms_p50": float(np.median(np.diff(ct)) * 1e3),
            "read_ms_mean": float(np.mean([(b - a) / 1e6 for a, b, _ in reads])),
        },
        "phases": [],
    }
    for ph in raw["phases"]:
        s = (ph["start"][0] + ph["start"][1]) / 2e9
        e = (ph["end"][0] + ph["end"][1]) / 2e9
        counter_j = (ph["end"][2] - ph["start"][2]) / 1e3
        grid = np.linspace(s, e, 400_001)
        row = {
            "phase": ph["phase"],
            "seconds": e - s,
            "counter_j": counter_j,
            "counter_mean_w": counter_j / (e - s),
            "every_reading_rel_diff_pct": 100 * (np.trapezoid(held(grid), grid) / counter_j - 1),
        }
        for hz in RATES_HZ:
            diffs = []
            for k in range(OFFSETS):
                ticks = np.concatenate([[s], np.arange(s + k / (OFFSETS * hz), e, 1 / hz), [e]])
                diffs.append(100 * (np.trapezoid(held(ticks), ticks) / counter_j - 1))
            row[f"{hz}hz_mean_pct"] = float(np.mean(diffs))
            row[f"{hz}hz_worst_pct"] = float(max(diffs, key=abs))
        summary["phases"].append(row)
    (HERE / "summary.json").write_text(json.dumps(summary, indent=2))

    cols = ["every reading"] + [f"{hz} Hz" for hz in RATES_HZ]
    lines = [
        "| load phase | s | counter (J) | counter mean W | " + " | ".join(cols) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(cols),
    ]
    for r in summary["phases"]:
        cells = [f"{r['every_reading_rel_diff_pct']:+.2f}%"] + [
            f"{r[f'{hz}hz_mean_pct']:+.2f}% ({r[f'{hz}hz_worst_pct']:+.2f}%)" for hz in RATES_HZ
        ]
        lines.append(
            f"| {r['phase']} | {r['seconds']:.1f} | {r['counter_j']:,.0f} | {r['counter_mean_w']:.0f} | "
            + " | ".join(cells)
            + " |"
        )
    print("\n".join(lines))
    print(json.dumps({k: summary[k] for k in ("instant_power", "energy_counter")}, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, name in zip(axes, ("square_50_50ms", "bursts_2_60ms")):
        ph = next(x for x in raw["phases"] if x["phase"] == name)
        s = (ph["start"][0] + ph["start"][1]) / 2e9
        lo, hi = s + 2.0, s + 3.5
        grid = np.linspace(lo, hi, 3000)
        ax.step(grid - lo, held(grid), where="post", lw=1.2, label="NVML instant power (every new reading)")
        counter_w = next(r for r in summary["phases"] if r["phase"] == name)["counter_mean_w"]
        ax.axhline(counter_w, color="C3", ls="--", lw=1.2, label=f"energy counter: mean {counter_w:.0f} W")
        ax.set_title(
            f"{name} (GPU load toggles {'every 50 ms' if name.startswith('square') else 'at random, 2-60 ms'})",
            fontsize=9,
        )
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("power (W)")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle(
        f"{raw['facts']['name']}, driver {raw['facts']['driver']}: instant power is a new value every "
        f"~100 ms and misses what happens between",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(HERE / "power_square_wave.png", dpi=110)


if __name__ == "__main__":
    main()
