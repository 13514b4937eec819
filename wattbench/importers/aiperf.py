"""NVIDIA AIPerf's profile export: `profile_export_aiperf.json` (the run's statistics and its input config) and,
beside it, `profile_export.jsonl` (one record per request). Give either file or the artifact folder.

Names and units as AIPerf 0.13 writes them (schema_version 1.4, checked on real exports in tests/data/imports/):
statistics are {unit, avg, p1..p99, min, max, std}; `time_to_first_token` (ms) -> ttft_ms,
`inter_token_latency` (ms; per request (latency - TTFT) / (output tokens - 1)) -> tpot_ms,
`inter_chunk_latency` (ms; gaps between chunks) -> itl_ms, `request_latency` (ms) -> e2e_ms; avg -> mean, std ->
stdev; AIPerf reports no p99.9. `benchmark_duration` (s, first request sent -> last response) is the window, as
vLLM's `duration`. AIPerf's own throughputs divide by the profiling phase's wall time instead (`start_time` ->
`end_time`, which also holds the time before the first send and after the last answer): measured on the files in
tests/data/imports, 0.741 s against 0.738 s at 4 streams (its 518.3 tok/s, ours 520.7) but 2.090 s against
1.846 s at 8 req/s Poisson (122.5 against 138.7 tok/s, -12%). Its figures stay in load_runs.summary.imported.
Records: metadata.request_start_ns (wall clock, ns), benchmark_phase (warmup | profiling: only profiling records
are in the window), metrics.{time_to_first_token, request_latency, inter_token_latency, inter_chunk_latency (list),
input_sequence_length, output_sequence_length}; chunk arrival times are rebuilt from the start, TTFT and the
inter-chunk gaps, on AIPerf's clock.

GPU telemetry (`aiperf profile --gpu-telemetry`, read from DCGM exporters or pynvml) becomes the run's energy, its
deployment's telemetry_source `imported:aiperf-<dcgm|pynvml|...>`. AIPerf's layout (aiperf/common/models/
telemetry_models.py TelemetryRecord, export_models.py TelemetryExportData): `gpu_telemetry_export.jsonl` beside the
export, one line per GPU per scrape: {timestamp_ns (wall clock), dcgm_url, gpu_index, gpu_uuid, gpu_model_name,
hostname, telemetry_data: {gpu_power_usage (W), energy_consumption (MJ, the counter since the driver loaded), ...}};
and in the export, telemetry_data.endpoints.<url>.gpus.<gpu>.metrics.energy_consumption {unit: MJ, avg: the
counter's rise over the profiling phase} (a counter summarised as a gauge, with min and max: max - min). The energy is
the counter's rise over wattbench's window (first send to last answer, AIPerf's benchmark_duration), read from the
scrapes, linearly between the two around each edge, summed over GPUs; without the scrapes, the export's rise over
AIPerf's profiling phase (a little longer than the window: the note says so). A counter that went backwards, or
scrapes that do not cover the window, leave the energy NULL with a note.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

from wattbench.importers.imported import (
    ImportedPoint,
    ImportedRun,
    ImportFileError,
    file_sha256,
    point_label,
    read_json,
)

TOOL = "aiperf"
EXPECTED = (
    "AIPerf: profile_export_aiperf.json (with profile_export.jsonl beside it for per-request rows), or its folder"
)
AGGREGATE = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"
TELEMETRY = "gpu_telemetry_export.jsonl"
_ENERGY_UNITS = {"MJ": 1e6, "kJ": 1e3, "J": 1.0, "mJ": 1e-3}
_MAP = {
    "time_to_first_token": "ttft_ms",
    "inter_token_latency": "tpot_ms",
    "inter_chunk_latency": "itl_ms",
    "request_latency": "e2e_ms",
}
_PCTS = ("p50", "p90", "p95", "p99")


def _is_aggregate(d: Any) -> bool:
    return isinstance(d, dict) and "aiperf_version" in d and "input_config" in d


def _is_records(d: Any) -> bool:
    return (
        isinstance(d, list)
        and bool(d)
        and isinstance(d[0], dict)
        and "metrics" in d[0]
        and isinstance(d[0].get("metadata"), dict)
        and "benchmark_phase" in d[0]["metadata"]
    )


def detect(path: Path, data: Any) -> bool:
    if path.is_dir():
        return (path / AGGREGATE).exists() or any(path.rglob(AGGREGATE))
    return (
        _is_aggregate(data)
        or _is_records(data)
        or (isinstance(data, dict) and "metrics" in data and "metadata" in data and path.suffix == ".jsonl")
    )


def _files(path: Path) -> tuple[Path, Path | None]:
    if path.is_dir():
        found = sorted(path.rglob(AGGREGATE))
        if not found:
            raise ImportFileError(f"{path}: no {AGGREGATE} in this folder; expected an AIPerf artifact folder")
        if len(found) > 1:
            raise ImportFileError(
                f"{path}: {len(found)} AIPerf runs in this folder ({', '.join(map(str, found[:3]))}"
                "); import each run's folder"
            )
        agg = found[0]
    elif path.name == RECORDS or path.suffix == ".jsonl":
        agg = path.with_name(AGGREGATE)
        if not agg.exists():
            raise ImportFileError(
                f"{path}: AIPerf records without {AGGREGATE} beside them; the run's statistics and "
                "configuration are in that file: import it (or the folder)"
            )
    else:
        agg = path
    rec = agg.with_name(RECORDS)
    return agg, rec if rec.exists() else None


def _avg(d: dict, key: str) -> float | None:
    v = d.get(key)
    return v.get("avg") if isinstance(v, dict) else None


def _seconds(d: dict, key: str) -> float | None:
    v = d.get(key)
    if not isinstance(v, dict) or v.get("avg") is None:
        return None
    scale = {"sec": 1.0, "s": 1.0, "ms": 1e-3, "ns": 1e-9}.get(v.get("unit", "sec"))
    if scale is None:
        raise ImportFileError(f"{key} has unit {v.get('unit')!r}; expected sec, ms or ns")
    return v["avg"] * scale


def _stats(d: dict) -> dict[str, dict[str, float | None]]:
    out = {}
    for tag, key in _MAP.items():
        m = d.get(tag)
        if not isinstance(m, dict):
            continue
        if m.get("unit", "ms") != "ms":
            raise ImportFileError(f"{tag} has unit {m.get('unit')!r}; expected ms")
        block = {p: m.get(p) for p in _PCTS}
        block.update(p95=m.get("p95"), p999=None, mean=m.get("avg"), stdev=m.get("std"))
        out[key] = block
    return out


def _val(metrics: dict, key: str) -> Any:
    m = metrics.get(key)
    return m.get("value") if isinstance(m, dict) else None


def _requests(rec_path: Path) -> list[dict]:
    data = read_json(rec_path)
    if isinstance(data, dict):
        data = [data]
    rows = []
    for i, r in enumerate(data):
        md, m = r.get("metadata") or {}, r.get("metrics") or {}
        err = r.get("error")
        ok = not err and _val(m, "request_latency") is not None
        sent = md.get("request_start_ns")
        ttft = _val(m, "time_to_first_token")
        gaps = _val(m, "inter_chunk_latency") or []
        chunk_ns = None
        if ok and sent is not None and ttft is not None:
            t = int(sent + ttft * 1e6)
            chunk_ns = [t]
            for g in gaps:
                t += int(g * 1e6)
                chunk_ns.append(t)
        rows.append(
            {
                "request_id": str(md.get("x_request_id") or f"{i:07d}"),
                "sent_ns": sent,
                "ttft_ms": ttft,
                "e2e_ms": _val(m, "request_latency") if ok else None,
                "tpot_ms": _val(m, "inter_token_latency") if ok else None,
                "first_token_ns": chunk_ns[0] if chunk_ns else None,
                "last_token_ns": chunk_ns[-1] if chunk_ns else None,
                "prompt_tokens": _val(m, "input_sequence_length"),
                "completion_tokens": _val(m, "output_sequence_length") if ok else None,
                "chunk_ns": chunk_ns,
                "error_kind": None if ok else ("cancelled" if md.get("was_cancelled") else "imported_error"),
                "error_text": None if ok else json.dumps(err)[:500] if err else "no request_latency in the record",
                "in_window": md.get("benchmark_phase") == "profiling",
            }
        )
    return rows


def _telemetry_source(urls: set[str]) -> str:
    kinds = sorted({(u.split("://", 1)[0] if "://" in u else u) for u in urls if u} or {"gpu"})
    kinds = ["dcgm" if k in ("http", "https") else k for k in kinds]
    return "imported:aiperf-" + "+".join(sorted(set(kinds)))


def _counter_at(pts: list[tuple[int, float]], t: int) -> float | None:
    """The energy counter at instant t, linearly between the scrapes around it; None outside them."""
    if not pts or t < pts[0][0] or t > pts[-1][0]:
        return None
    for (t0, e0), (t1, e1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            return e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    return pts[-1][1]


def _scraped_energy(tel_path: Path, start_ns: int, end_ns: int) -> tuple[float | None, dict, str | None]:
    """(J over [start_ns, end_ns] summed over GPUs, deployments facts, a note) from AIPerf's GPU telemetry scrapes."""
    data = read_json(tel_path)
    rows = [data] if isinstance(data, dict) else data
    series: dict[str, list[tuple[int, float]]] = {}
    names, urls = {}, set()
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict) or not isinstance(r.get("telemetry_data"), dict):
            raise ImportFileError(f"{tel_path}:{i}: no telemetry_data; expected AIPerf's GPU telemetry records")
        uuid, t = r.get("gpu_uuid"), r.get("timestamp_ns")
        e = r["telemetry_data"].get("energy_consumption")
        urls.add(str(r.get("dcgm_url") or ""))
        names[uuid] = r.get("gpu_model_name")
        ok = isinstance(t, int) and isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e)
        if uuid and ok:
            series.setdefault(str(uuid), []).append((t, float(e)))
    facts = {
        "telemetry_source": _telemetry_source(urls),
        "gpu_uuids": sorted(series) or None,
        "n_gpus": len(series) or None,
        "gpu_name": next((n for n in names.values() if n), None),
    }
    if not series:
        return None, facts, f"{TELEMETRY} has no energy_consumption readings: no energy"
    total = 0.0
    for uuid, pts in series.items():
        pts.sort()
        if any(b[1] < a[1] for a, b in zip(pts, pts[1:])):
            return None, facts, f"GPU {uuid}'s energy counter went backwards in {TELEMETRY}: no energy"
        e0, e1 = _counter_at(pts, start_ns), _counter_at(pts, end_ns)
        if e0 is None or e1 is None:
            return None, facts, f"{TELEMETRY} does not cover the window for GPU {uuid}: no energy"
        total += (e1 - e0) * _ENERGY_UNITS["MJ"]
    return total, facts, None


def _export_energy(d: dict) -> tuple[float | None, dict, str | None]:
    """(J summed over GPUs, deployments facts, a note) from the export's telemetry summary: each GPU's energy counter's
    rise over AIPerf's profiling phase."""
    endpoints = ((d.get("telemetry_data") or {}).get("endpoints")) or {}
    total, gpus, names = 0.0, [], []
    for gpu_map in (ep.get("gpus") or {} for ep in endpoints.values() if isinstance(ep, dict)):
        for g in gpu_map.values():
            m = ((g or {}).get("metrics") or {}).get("energy_consumption")
            if not isinstance(m, dict) or m.get("unit") not in _ENERGY_UNITS:
                continue
            rise = m["max"] - m["min"] if m.get("max") is not None and m.get("min") is not None else m.get("avg")
            if not isinstance(rise, (int, float)) or not math.isfinite(rise) or rise < 0:
                continue
            total += rise * _ENERGY_UNITS[m["unit"]]
            gpus.append(g.get("gpu_uuid"))
            names.append(g.get("gpu_name"))
    if not gpus:
        return None, {}, None
    facts = {
        "telemetry_source": _telemetry_source(set(endpoints)),
        "gpu_uuids": gpus,
        "n_gpus": len(gpus),
        "gpu_name": next((n for n in names if n), None),
    }
    note = (
        f"energy: the GPUs' counters' rise over AIPerf's profiling phase (its telemetry summary; no {TELEMETRY} "
        "beside it), a little longer than the window: tokens per joule read a little low"
    )
    return total, facts, note


def _energy(agg_path: Path, d: dict, requests: list[dict], duration: float) -> tuple[float | None, dict, list[str]]:
    """The run's GPU energy over its window and where it came from (module docstring)."""
    tel = agg_path.with_name(TELEMETRY)
    sends = [r["sent_ns"] for r in requests if r.get("in_window") and r.get("sent_ns") is not None]
    if tel.exists() and sends:
        start = min(sends)
        energy, facts, note = _scraped_energy(tel, start, start + round(duration * 1e9))
        return energy, facts, [note] if note else [f"energy: AIPerf's GPU telemetry ({TELEMETRY}), imported"]
    energy, facts, note = _export_energy(d)
    return energy, facts, [note] if note else []


def read(path: Path, data: Any) -> ImportedRun:
    agg_path, rec_path = _files(path)
    d = read_json(agg_path) if agg_path != path or data is None else data
    if not _is_aggregate(d):
        raise ImportFileError(f"{agg_path}: not AIPerf's {AGGREGATE} (no aiperf_version/input_config)")
    ic = d.get("input_config") or {}
    models = (ic.get("models") or {}).get("items") or [{}]
    endpoint = ic.get("endpoint") or {}
    phases = [p for p in ic.get("phases") or [] if p.get("kind", p.get("name")) == "profiling"] or [{}]
    ph = phases[0]
    if ph.get("type") == "concurrency" or (ph.get("concurrency") and not ph.get("request_rate", ph.get("rate"))):
        shape, conc, rate = "concurrency", int(ph.get("concurrency") or 1), None
    else:
        rate = ph.get("request_rate", ph.get("rate"))
        pattern = str(ph.get("arrival_pattern") or ph.get("type") or "poisson")
        pattern = "poisson" if pattern in ("poisson", "request_rate") else pattern
        shape = "poisson" if pattern == "poisson" else pattern
        conc = int(ph["concurrency"]) if ph.get("concurrency") else None
        if rate is None:
            raise ImportFileError(f"{agg_path}: input_config.phases has neither a concurrency nor a request rate")
        rate = float(rate)
    duration = _seconds(d, "benchmark_duration")
    if not duration:
        raise ImportFileError(f"{agg_path}: no benchmark_duration; expected AIPerf's run statistics")
    completed = int(_avg(d, "completed_request_count") or _avg(d, "request_count") or 0)
    failed = int(_avg(d, "error_request_count") or 0)
    prompts = (ic.get("datasets") or [{}])[0].get("prompts") or {}
    isl, osl = (prompts.get("isl") or {}).get("mean"), (prompts.get("osl") or {}).get("mean")
    n_in = (
        round(isl) if isl else (round(_avg(d, "input_sequence_length")) if _avg(d, "input_sequence_length") else None)
    )
    n_out = (
        round(osl) if osl else (round(_avg(d, "output_sequence_length")) if _avg(d, "output_sequence_length") else None)
    )
    figures = {
        k: _avg(d, k)
        for k in (
            "request_throughput",
            "output_token_throughput",
            "total_token_throughput",
            "input_token_throughput",
            "request_count",
            "benchmark_duration",
            "effective_concurrency",
        )
        if _avg(d, k) is not None
    }
    requests = _requests(rec_path) if rec_path else []
    point = ImportedPoint(
        point_label=point_label(shape, conc, rate, None),
        workload=f"aiperf-in{n_in}-out{n_out}",
        shape=shape,
        window_s=duration,
        sent=completed + failed,
        completed=completed,
        failed=failed,
        output_tokens_total=int(_avg(d, "total_output_tokens")) if _avg(d, "total_output_tokens") is not None else None,
        api="chat" if endpoint.get("type") == "chat" else "completions",
        concurrency=conc,
        rate=rate,
        input_tokens=n_in,
        output_tokens=n_out,
        achieved_concurrency=_avg(d, "effective_concurrency"),
        stats=_stats(d),
        figures=figures,
        requests=requests,
    )
    point.energy_j, telemetry, energy_notes = _energy(agg_path, d, requests, duration)

    def when(key: str) -> _dt.datetime | None:
        try:
            return _dt.datetime.fromisoformat(str(d.get(key)))
        except ValueError:
            return None

    files = [agg_path] + ([rec_path] if rec_path else []) + [p for p in [agg_path.with_name(TELEMETRY)] if p.exists()]
    return ImportedRun(
        tool=TOOL,
        tool_version=d.get("aiperf_version"),
        path=agg_path,
        sha256=file_sha256(files),
        model=str(models[0].get("name") or "unknown"),
        url=(endpoint.get("urls") or [None])[0],
        points=[point],
        started_at=when("start_time"),
        finished_at=when("end_time"),
        config={
            "benchmark_id": d.get("benchmark_id"),
            "schema_version": d.get("schema_version"),
            "cli_command": (d.get("run_info") or {}).get("cli_command"),
            "records_file": str(rec_path) if rec_path else None,
        },
        notes=([] if rec_path else [f"no {RECORDS} beside the export: every figure is AIPerf's own"]) + energy_notes,
        telemetry=telemetry,
    )
