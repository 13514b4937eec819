#!/usr/bin/env python3
"""How fast must NVML's instant power be sampled for its integral to agree with the GPU's energy counter?

Run on a GPU node (torch and nvidia-ml-py; nothing of wattbench needed):
    python3 results/nvml-power-sampling/study.py --out DIR

A sampler process polls NVML_FI_DEV_POWER_INSTANT as fast as one field-values call allows (~100 kHz) and keeps each new
reading, while this process drives the GPU through load phases chosen to be hard on a 10 Hz sampler: steady compute,
steady HBM copies, random on/off bursts (like continuous batching), and square waves whose period beats with 10 Hz. At
every phase edge this process reads the energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ). It also reads the
counter back to back under load, to see how often it updates. analyze.py then decimates the full-rate trace to 10, 20,
50, 100 ... Hz at many phase offsets and compares each integral with the counter.

Writes DIR/raw.json.gz (samples, phase edges, counter reads) and prints a short summary.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import random
import time
from pathlib import Path

FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT, mW


def _field_value(fv):
    member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[fv.valueType]
    return getattr(fv.value, member)


def sampler(index: int, stop, conn) -> None:
    import pynvml as nvml

    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    # the call answers in microseconds (the driver caches the value), so polls run at ~100 kHz: keep only the
    # polls where the reading changed (its first sight), and count the rest
    host_ns, nvml_us, mw = [], [], []
    polls = 0
    last = None
    conn.send("ready")
    while not stop.is_set():
        t0 = time.perf_counter_ns()
        fv = nvml.nvmlDeviceGetFieldValues(h, [FI_POWER_INSTANT])[0]
        t1 = time.perf_counter_ns()
        polls += 1
        if fv.nvmlReturn == 0:
            value = int(_field_value(fv))  # (its timestamp is the call's own time, new at every poll)
            if value != last:
                last = value
                host_ns.append((t0 + t1) // 2)
                nvml_us.append(int(fv.timestamp))
                mw.append(value)
    conn.send({"host_ns": host_ns, "nvml_us": nvml_us, "mw": mw, "polls": polls})
    nvml.nvmlShutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="phase durations x this")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import pynvml as nvml
    import torch

    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(args.gpu)
    facts = {
        "name": nvml.nvmlDeviceGetName(h),
        "driver": nvml.nvmlSystemGetDriverVersion(),
        "power_limit_mw": nvml.nvmlDeviceGetEnforcedPowerLimit(h),
        "torch": torch.__version__,
        "nvidia_ml_py": getattr(nvml, "__version__", None),
    }
    dev = torch.device(f"cuda:{args.gpu}")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    src = torch.empty(2 * 2**30, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    torch.cuda.synchronize()

    def energy() -> tuple[int, int, int]:
        t0 = time.perf_counter_ns()
        mj = nvml.nvmlDeviceGetTotalEnergyConsumption(h)
        return t0, time.perf_counter_ns(), int(mj)

    def compute(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            torch.matmul(a, b)
            torch.cuda.synchronize()

    def copy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            dst.copy_(src)
            torch.cuda.synchronize()

    def square(on_s: float, off_s: float, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            compute(on_s)
            time.sleep(off_s)

    rng = random.Random(0)

    def bursts(seconds: float) -> None:  # continuous batching: busy and idle stretches of 2-60 ms
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            compute(rng.uniform(0.002, 0.060))
            time.sleep(rng.uniform(0.002, 0.060))

    s = args.scale
    phases = [
        ("idle", lambda: time.sleep(4 * s)),
        ("compute_steady", lambda: compute(10 * s)),
        ("hbm_copy_steady", lambda: copy(8 * s)),
        ("bursts_2_60ms", lambda: bursts(20 * s)),
        ("square_50_50ms", lambda: square(0.050, 0.050, 12 * s)),
        ("square_37_37ms", lambda: square(0.037, 0.037, 12 * s)),
        ("square_250_250ms", lambda: square(0.25, 0.25, 12 * s)),
        ("idle_after", lambda: time.sleep(4 * s)),
    ]
    stop = mp.get_context("spawn").Event()
    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=sampler, args=(args.gpu, stop, child), daemon=True)
    proc.start()
    assert parent.recv() == "ready"
    time.sleep(1.0)
    edges = []
    for name, run in phases:
        e0 = energy()
        run()
        torch.cuda.synchronize()
        e1 = energy()
        edges.append({"phase": name, "start": e0, "end": e1})
        print(f"{name}: {(e1[2] - e0[2]) / 1e3:.1f} J over {(e1[0] - e0[0]) / 1e9:.2f} s", flush=True)
    # the counter read back to back under steady compute: how often does it change?
    counter_reads, n_counter_reads = [], 0
    end = time.perf_counter() + 3 * s
    while time.perf_counter() < end:
        torch.matmul(a, b)
        read = energy()
        n_counter_reads += 1
        if not counter_reads or read[2] != counter_reads[-1][2]:
            counter_reads.append(read)  # only reads where the counter moved
    torch.cuda.synchronize()
    print(f"energy counter: {n_counter_reads} reads in 3 s, {len(counter_reads)} distinct values")
    stop.set()
    trace = parent.recv()
    proc.join(10)
    n = len(trace["mw"])
    span = (trace["host_ns"][-1] - trace["host_ns"][0]) / 1e9
    print(
        f"sampler: {trace['polls']} polls ({trace['polls'] / span:.0f} Hz), {n} distinct readings over "
        f"{span:.1f} s (one every {1e3 * span / n:.2f} ms)"
    )
    raw = {
        "facts": facts,
        "phases": edges,
        "trace": trace,
        "counter_reads": counter_reads,
        "counter_reads_total": n_counter_reads,
        "recorded_unix": time.time(),
    }
    with gzip.open(out / "raw.json.gz", "wt") as f:
        json.dump(raw, f)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
