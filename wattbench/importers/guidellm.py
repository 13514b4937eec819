"""guidellm's benchmarks JSON (`guidellm run ... --output kind=json,path=F`; older `guidellm benchmark --output-path
F.json`): one load point per benchmark in the file (a sweep gives several).

Names and units as guidellm 0.8 writes them (metadata.version 2, checked on a real export in tests/data/imports/):
benchmarks[].metrics.<name>.successful = {mean, median, std_dev, min, max, count, total_sum, percentiles: {p001,
p01, p05, p10, p25, p50, p75, p90, p95, p99, p999}}. `time_to_first_token_ms` -> ttft_ms;
`inter_token_latency_ms` -> tpot_ms (guidellm's ITL is per request (last token - first token) / (output tokens -
1), wattbench's TPOT; guidellm's `time_per_output_token_ms` includes the TTFT and is not used); `request_latency`
(s) -> e2e_ms; guidellm has no pooled chunk-gap statistic, so itl_ms stays NULL. `duration` (s, warm-up and
cool-down excluded) is the window; requests.successful/errored/incomplete hold per-request rows (all of them
unless the run sampled; a sample is not stored, the statistics are guidellm's then). Per-request E2E is
request start -> last token iteration (wattbench's E2E), TTFT and TPOT as guidellm measured them.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from wattbench.importers.imported import ImportedPoint, ImportedRun, ImportFileError, file_sha256, point_label

TOOL = "guidellm"
EXPECTED = "guidellm: a benchmarks JSON with a `benchmarks` list of generative benchmarks"
_PCTS = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p999"}


def detect(path: Path, data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("benchmarks"), list)
        and (
            "guidellm_version" in (data.get("metadata") or {})
            or any(isinstance(b, dict) and "generative" in str(b.get("type_", "")) for b in data["benchmarks"])
        )
    )


def _block(metrics: dict, name: str, scale: float = 1.0) -> dict[str, float | None] | None:
    m = ((metrics.get(name) or {}).get("successful")) if isinstance(metrics.get(name), dict) else None
    if not isinstance(m, dict) or not m.get("count"):
        return None
    pct = m.get("percentiles") or {}

    def sc(v):
        return v * scale if isinstance(v, (int, float)) else None

    out = {k: sc(pct.get(src)) for k, src in _PCTS.items()}
    out.update(mean=sc(m.get("mean")), stdev=sc(m.get("std_dev")))
    if out["p50"] is None:
        out["p50"] = sc(m.get("median"))
    return out


def _total(metrics: dict, name: str, part: str = "successful") -> float | None:
    m = (metrics.get(name) or {}).get(part) if isinstance(metrics.get(name), dict) else None
    return m.get("total_sum") if isinstance(m, dict) else None


def _shape(strategy: dict, path: Path, i: int) -> tuple[str, int | None, float | None]:
    kind = strategy.get("type_") or strategy.get("type")
    if kind == "synchronous":
        return "concurrency", 1, None
    if kind == "concurrent":
        return "concurrency", int(strategy.get("streams") or strategy.get("max_concurrency") or 1), None
    if kind == "throughput":
        return "concurrency", int(strategy.get("max_concurrency") or strategy.get("worker_count") or 1), None
    if kind in ("constant", "poisson", "async"):
        rate = strategy.get("rate")
        if rate is None:
            raise ImportFileError(f"{path}: benchmark {i + 1}: strategy {kind} without a rate")
        return ("poisson" if kind == "poisson" else "constant"), strategy.get("max_concurrency"), float(rate)
    raise ImportFileError(
        f"{path}: benchmark {i + 1}: strategy {kind!r}; expected synchronous, concurrent, "
        "throughput, constant or poisson"
    )


def _requests(b: dict, completed: int, failed: int) -> list[dict]:
    reqs = b.get("requests") or {}
    ok, bad, inc = (reqs.get(k) or [] for k in ("successful", "errored", "incomplete"))
    if len(ok) != completed or len(bad) != failed:
        return []  # a sample of the requests: the statistics stay guidellm's
    rows = []
    for kind, items in (("ok", ok), ("errored", bad), ("incomplete", inc)):
        for r in items:
            info = r.get("info") or {}
            tm = info.get("timings") or {}
            start = r.get("request_start_time") or tm.get("request_start")
            last = tm.get("last_token_iteration")
            good = kind == "ok"
            e2e = (
                (last - start) * 1e3
                if last is not None and start is not None
                else (r["request_latency"] * 1e3 if r.get("request_latency") is not None else None)
            )
            rows.append(
                {
                    "request_id": str(r.get("request_id")),
                    "sent_ns": int(start * 1e9) if start is not None else None,
                    "first_token_ns": int(tm["first_token_iteration"] * 1e9)
                    if tm.get("first_token_iteration")
                    else None,
                    "last_token_ns": int(last * 1e9) if last is not None else None,
                    "ttft_ms": r.get("time_to_first_token_ms"),
                    "e2e_ms": e2e if good else None,
                    "tpot_ms": r.get("inter_token_latency_ms") if good else None,
                    "prompt_tokens": r.get("prompt_tokens"),
                    "completion_tokens": r.get("output_tokens") if good else None,
                    "error_kind": None if good else ("cancelled" if kind == "incomplete" else "imported_error"),
                    "error_text": None if good else str(info.get("error") or kind)[:500],
                    "in_window": True,
                }
            )
    return rows


def read(path: Path, data: Any) -> ImportedRun:
    benches = [b for b in data["benchmarks"] if isinstance(b, dict)]
    if not benches:
        raise ImportFileError(f"{path}: the benchmarks list is empty; expected at least one finished benchmark")
    points: list[ImportedPoint] = []
    model = url = api = None
    asked = (((data.get("config") or {}).get("spec") or {}).get("data") or [{}])[0]
    asked_in, asked_out = (
        (asked.get("prompt_tokens"), asked.get("output_tokens")) if isinstance(asked, dict) else (None, None)
    )
    for i, b in enumerate(benches):
        cfg = b.get("config") or {}
        backend = cfg.get("backend") or {}
        model = model or backend.get("model") or backend.get("model_name")
        url = url or backend.get("target")
        api = "completions" if str(backend.get("request_format", "")).endswith("/v1/completions") else "chat"
        metrics = b.get("metrics") or {}
        totals = metrics.get("request_totals") or {}
        completed, failed = int(totals.get("successful") or 0), int(totals.get("errored") or 0)
        incomplete = int(totals.get("incomplete") or 0)
        duration = b.get("duration")
        if not isinstance(duration, (int, float)) or duration <= 0:
            raise ImportFileError(f"{path}: benchmark {i + 1}: duration {duration!r}; expected seconds > 0")
        shape, conc, rate = _shape(cfg.get("strategy") or {}, path, i)
        out_total = _total(metrics, "output_token_count")
        in_total = _total(metrics, "prompt_token_count")
        # the lengths asked for (synthetic data), else the measured means
        n_in = asked_in or (round(in_total / completed) if in_total is not None and completed else None)
        n_out = asked_out or (round(out_total / completed) if out_total is not None and completed else None)
        stats = {
            k: v
            for k, v in (
                ("ttft_ms", _block(metrics, "time_to_first_token_ms")),
                ("tpot_ms", _block(metrics, "inter_token_latency_ms")),
                ("e2e_ms", _block(metrics, "request_latency", 1e3)),
            )
            if v
        }
        conc_block = (metrics.get("request_concurrency") or {}).get("successful") or {}
        figures = {
            "requests_per_second": ((metrics.get("requests_per_second") or {}).get("successful") or {}).get("mean"),
            "output_tokens_per_second": ((metrics.get("output_tokens_per_second") or {}).get("successful") or {}).get(
                "mean"
            ),
            "tokens_per_second": ((metrics.get("tokens_per_second") or {}).get("successful") or {}).get("mean"),
            "request_goodput": metrics.get("request_goodput"),
            "strategy": cfg.get("strategy"),
        }
        requests = _requests(b, completed, failed)
        points.append(
            ImportedPoint(
                point_label=point_label(shape, conc, rate, None),
                workload=f"guidellm-in{n_in}-out{n_out}",
                shape=shape,
                window_s=float(duration),
                sent=completed + failed + incomplete,
                completed=completed,
                failed=failed + incomplete,
                output_tokens_total=int(out_total) if out_total is not None else None,
                api=api,
                concurrency=conc,
                rate=rate,
                input_tokens=n_in,
                output_tokens=n_out,
                warmup_s=b.get("warmup_duration"),
                achieved_concurrency=conc_block.get("mean"),
                stats=stats,
                goodput=metrics.get("request_goodput")
                if isinstance(metrics.get("request_goodput"), (int, float))
                else None,
                figures=figures,
                requests=requests,
            )
        )
    md = data.get("metadata") or {}
    start = benches[0].get("start_time")
    end = benches[-1].get("end_time")

    def ts(v) -> _dt.datetime | None:
        return _dt.datetime.fromtimestamp(v) if isinstance(v, (int, float)) else None

    notes = (
        []
        if all(p.requests for p in points)
        else ["some benchmarks hold a sample of their requests (or none): their figures are guidellm's own"]
    )
    return ImportedRun(
        tool=TOOL,
        tool_version=md.get("guidellm_version"),
        path=path,
        sha256=file_sha256([path]),
        model=str(model or "unknown"),
        url=url,
        points=points,
        started_at=ts(start),
        finished_at=ts(end),
        config={"report_version": md.get("version")},
        notes=notes,
    )
