"""The step decomposition and host facts of every repeat in this folder's bundles, per GPU: decomposition.md (tables)
and steps_vs_throughput.png. Reads the bundles with the load generator's own code (`wattbench inspect BUNDLE`):

    .venv/bin/python results/h200-vllm-steps/analyse.py
"""

from __future__ import annotations

import json
import tarfile
import tempfile
import textwrap
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from wattbench_agent.loadgen.replay import bundle_summaries  # noqa: E402

HERE = Path(__file__).resolve().parent
SOURCE = "measured: vLLM 0.25.0, 1x H200 per run, Llama-3.1-8B shape (random weights, seed 0), 16 closed-loop streams"


def bundle_rows(path: Path) -> list[dict]:
    """One row per load window: the summary's figures, its steps and the window's host facts."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        folder = next(p for p in Path(tmp).iterdir() if p.is_dir())
        runs = {r["load_point_id"]: r for r in map(json.loads, (folder / "load_runs.jsonl").open())}
        deps = {d["deployment_id"]: d for d in map(json.loads, (folder / "deployments.jsonl").open())}
        out = []
        for s in bundle_summaries(folder):
            lr, st = runs[s["load_point_id"]], s["steps"]
            dep = deps[lr["deployment_id"]]
            engine, workload, rest = s["load_point_id"].split(":")
            out.append(
                {
                    "gpu": (dep.get("gpu_uuids") or ["?"])[0][:12],
                    "cpu": f"{dep.get('cpu_model')} ({dep.get('cpu_logical')} CPUs, {dep.get('hypervisor')})",
                    "engine": engine,
                    "workload": workload,
                    "repeat": int(rest.split("#")[1]),
                    "tok_s": s["output_token_throughput"],
                    "ttft_p50_ms": s["ttft_ms"]["p50"],
                    "d_ms": st["decode_step_ms"],
                    "f": st["stalled_gap_fraction"],
                    "s_ms": st["stall_ms_mean"],
                    "expected": st["expected_stalled_fraction"],
                    "phase": st["phase_state"],
                    "w": lr["energy_j"] / lr["window_s"] if lr.get("energy_j") else None,
                    "engine_cores": lr["engine_cpu_s"] / lr["window_s"] if lr.get("engine_cpu_s") else None,
                    "busy_cpus": lr.get("host_busy_cpus"),
                }
            )
        return out


def fmt(x: float | None, nd: int = 1) -> str:
    return "NULL" if x is None else f"{x:,.{nd}f}"


def corr(a: list[float], b: list[float]) -> str:
    return f"{np.corrcoef(a, b)[0, 1]:+.2f}" if len(a) > 2 and np.std(a) > 0 and np.std(b) > 0 else "n/a"


def main() -> None:
    rows = [r for p in sorted(HERE.glob("bundle-gpu*.tar.xz")) for r in bundle_rows(p)]
    lines = [f"# Step decomposition per repeat ({SOURCE})", "", "Made by analyse.py from this folder's bundles.", ""]
    lines += [
        "| GPU | engine | workload | repeats | tok/s mean (CV) | decode step d ms (CV) | stalled share f | stall s ms "
        "| phases | W | engine cores | r(tok/s, s) | r(tok/s, f) | r(s, engine CPU) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["gpu"], r["engine"], r["workload"]), []).append(r)
    for (gpu, engine, workload), g in sorted(groups.items()):
        t, d = np.array([r["tok_s"] for r in g]), np.array([r["d_ms"] for r in g])
        f, s = [r["f"] for r in g], [r["s_ms"] for r in g]
        cores = [r["engine_cores"] for r in g if r["engine_cores"] is not None]
        phases = ", ".join(f"{k} x{v}" for k, v in sorted(_count(r["phase"] for r in g).items()))
        lines.append(
            f"| {gpu} | {engine} | {workload} | {len(g)} | {t.mean():,.0f} ({t.std(ddof=1) / t.mean():.1%}) "
            f"| {d.mean():.2f} ({d.std(ddof=1) / d.mean():.1%}) | {min(f):.1%}-{max(f):.1%} "
            f"| {min(s):.1f}-{max(s):.1f} "
            f"| {phases} | {np.mean([r['w'] for r in g]):.0f} | {fmt(np.mean(cores) if cores else None, 2)} "
            f"| {corr(list(t), s)} | {corr(list(t), f)} | {corr(s, [r['engine_cores'] for r in g])} |"
        )
    lines += ["", "Host per GPU: " + "; ".join(sorted({f"{r['gpu']}: {r['cpu']}" for r in rows})), ""]
    lines += ["## Every repeat", ""]
    lines += ["| GPU | point | tok/s | TTFT p50 ms | d ms | f | s ms | phase | W | engine cores |"]
    lines += ["|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['gpu']} | {r['engine']}:{r['workload']}#{r['repeat']} | {r['tok_s']:,.0f} | {r['ttft_p50_ms']:.1f} "
            f"| {r['d_ms']:.2f} | {r['f']:.1%} | {r['s_ms']:.1f} | {r['phase'] or 'NULL'} | {fmt(r['w'], 0)} "
            f"| {fmt(r['engine_cores'], 2)} |"
        )
    (HERE / "decomposition.md").write_text("\n".join(lines) + "\n")

    gpus = sorted({r["gpu"] for r in rows})
    fig, axes = plt.subplots(1, len(gpus), figsize=(6 * len(gpus), 4.5), squeeze=False, sharey=True)
    for ax, gpu in zip(axes[0], gpus):
        for (engine, workload), color, marker in _series():
            g = [r for r in rows if (r["gpu"], r["engine"], r["workload"]) == (gpu, engine, workload)]
            ax.scatter(
                [r["s_ms"] for r in g], [r["tok_s"] for r in g], c=color, marker=marker, label=f"{engine} {workload}"
            )
        ax.set_title(f"GPU {gpu}")
        ax.set_xlabel("mean stall length s (ms): a step carrying a prefill")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("output tok/s (one dot per repeat)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(textwrap.fill(SOURCE, 90), fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / "steps_vs_throughput.png", dpi=110)


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v or "NULL"] = out.get(v or "NULL", 0) + 1
    return out


def _series():
    for engine, color in (("vllm-bf16", "#1f77b4"), ("vllm-fp8", "#d62728")):
        for workload, marker in (("fixed16", "o"), ("spread16", "^")):
            yield (engine, workload), color, marker


if __name__ == "__main__":
    main()
