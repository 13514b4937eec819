"""`wattbench telemetry ...`: sample GPUs to a JSONL file, record an NVML trace, write the synthetic trace."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from wattbench_agent.argtypes import finite_float


class JsonlSink:
    """Minimal stand-in for BundleWriter: gpu_samples -> FILE, energy_windows -> FILE's stem + .windows.jsonl."""

    def __init__(self, path: Path):
        self.paths = {"gpu_samples": path, "energy_windows": path.with_name(path.stem + ".windows.jsonl")}
        for p in self.paths.values():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("", encoding="utf-8")
        self.rows: dict[str, list[dict[str, Any]]] = {"gpu_samples": [], "energy_windows": []}

    def write(self, table: str, rows: list[dict[str, Any]]) -> int:
        with open(self.paths[table], "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
        self.rows[table].extend(rows)
        return len(rows)


def summarize(sink: JsonlSink, window: dict[str, Any], info: dict[str, Any]) -> str:
    lines = [
        f"telemetry: {info['telemetry_source']}"
        + (f" ({info['telemetry_error']})" if info.get("telemetry_error") else "")
        + f", {info['n_gpus'] or 0} GPU(s), driver {info['driver_version']}, "
        f"power limit {info['power_limit_w']} W, persistence {info['persistence_mode']}"
    ]
    by_gpu: dict[str, list[float]] = {}
    for row in sink.rows["gpu_samples"]:
        if row.get("power_w") is not None:
            by_gpu.setdefault(row["gpu_uuid"], []).append(row["power_w"])
    for uuid in info["gpu_uuids"]:
        p = by_gpu.get(uuid, [])
        e = window.get(uuid)
        lines.append(
            f"  {uuid}: {len(p)} samples, mean {sum(p) / len(p):.1f} W, peak {max(p):.1f} W, "
            f"energy {'NULL' if e is None else f'{e:.1f} J'}"
            if p
            else f"  {uuid}: no power samples, energy {'NULL' if e is None else f'{e:.1f} J'}"
        )
    tj, tr = window.get("total_j"), window.get("trace_j")
    lines.append(
        f"  window {window['seconds']:.2f} s: counter {'NULL' if tj is None else f'{tj:.1f} J'}, "
        f"trace {'NULL' if tr is None else f'{tr:.1f} J'}"
        + (
            f" ({window['trace_rel_diff'] * 100:+.2f} %{', FLAGGED > 2 %' if window['trace_flag'] else ''})"
            if window.get("trace_rel_diff") is not None
            else ""
        )
    )
    if info.get("sampler_cpu_share") is not None:
        lines.append(
            f"  sampler: {info['sampler_hz']} Hz, {info['sampler_ticks']} ticks "
            f"({info['sampler_missed_ticks']} missed), {info['sampler_cpu_share'] * 100:.1f} % of one core, "
            f"{info['sampler_call_ms']:.2f} ms per sample; window read {info['window_read_ms'] or 0:.2f} ms"
        )
    return "\n".join(lines)


def cmd_sample(args: argparse.Namespace) -> int:
    from wattbench_agent.telemetry import open_sampler

    sink = JsonlSink(Path(args.out))
    nvml = {"fake": args.fake_nvml} if args.fake_nvml else None
    with open_sampler(
        args.kind,
        gpu_uuids=args.gpu or None,
        url=args.url,
        hz=args.hz,
        out=sink,
        deployment_id=args.deployment_id,
        nvml=nvml,
        dcgm_url=args.url if args.kind == "dcgm" else None,
    ) as sampler:
        sampler.begin_window("cli")
        time.sleep(args.seconds)
        window = sampler.end_window("cli")
    info = sampler.info()
    print(summarize(sink, window, info))
    if args.json:
        print(json.dumps({"window": window, "info": info}, default=str))
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from wattbench_agent.telemetry.record import record

    nvml = {"fake": args.fake_nvml} if args.fake_nvml else None
    record(args.seconds, args.out, hz=args.hz, gpu_uuids=args.gpu or None, load=args.load, nvml_spec=nvml)
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from wattbench_agent.telemetry.fake_nvml import synthetic_h200_trace

    trace = synthetic_h200_trace(seconds=args.seconds, seed=args.seed)
    Path(args.out).write_text(json.dumps(trace, separators=(",", ":")), encoding="utf-8")
    print(f"wrote synthetic trace ({trace['provenance']}) -> {args.out}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "telemetry",
        help="GPU telemetry: sample, record an NVML trace",
        description="GPU power/energy telemetry through NVML (docs/TELEMETRY.md).",
    )
    sub = p.add_subparsers(dest="telemetry_command", metavar="ACTION")

    s = sub.add_parser("sample", help="sample GPUs for S seconds into FILE.jsonl and print a summary")
    s.add_argument("--kind", choices=("nvml", "dcgm", "emulated", "none"), default="nvml")
    s.add_argument(
        "--url",
        help="emulator base URL (kind emulated); dcgm-exporter URL, e.g. http://127.0.0.1:9400/metrics (kind dcgm)",
    )
    s.add_argument("--gpu", action="append", metavar="UUID", help="GPU UUID (repeatable; default: all GPUs)")
    s.add_argument("--hz", type=finite_float(0, 1000, strict_minimum=True), default=10.0)
    s.add_argument("--seconds", type=finite_float(0, 86400 * 7), required=True)
    s.add_argument("--out", required=True, help="gpu_samples rows (JSONL); windows go to FILE.windows.jsonl")
    s.add_argument("--deployment-id", default="cli")
    s.add_argument("--fake-nvml", metavar="TRACE", help="replay an NVML trace instead of the real NVML")
    s.add_argument("--json", action="store_true", help="also print the window and info as JSON")
    s.set_defaults(func=cmd_sample)

    r = sub.add_parser("record", help="record raw NVML returns with timing, for the fake NVML used in tests")
    r.add_argument("--seconds", type=finite_float(0, 86400 * 7), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--hz", type=finite_float(0, 1000, strict_minimum=True), default=10.0)
    r.add_argument("--gpu", action="append", metavar="UUID")
    r.add_argument(
        "--load",
        choices=("none", "matmul"),
        default="none",
        help="matmul: bf16 matmul loop (torch) on the first GPU for the middle half",
    )
    r.add_argument("--fake-nvml", metavar="TRACE", help=argparse.SUPPRESS)
    r.set_defaults(func=cmd_record)

    y = sub.add_parser("synth", help="write the synthetic H200-shaped trace (stand-in until a recording exists)")
    y.add_argument("--out", required=True)
    y.add_argument("--seconds", type=finite_float(0, 86400 * 7), default=24.0)
    y.add_argument("--seed", type=int, default=0)
    y.set_defaults(func=cmd_synth)

    def _help(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=_help)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wattbench")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
