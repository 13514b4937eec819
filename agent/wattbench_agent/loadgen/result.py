"""A load point's result from its records: the summary, the status and the `load_runs` row (LoadResult), made
by one function (`point_result`) for the live run (runner.py) and for a saved one (replay.py), and the fail-fast
watcher whose verdict both read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattbench_agent.safety import redact_url

from . import metrics, prompt_length, steps
from .spec import LoadSpec
from .workload import length_dists

# Fail fast: when the first FAIL_FAST_N requests of a run all fail the same way (same error kind and HTTP status)
# and none succeeded, sending stops and in-flight requests get FAIL_FAST_DRAIN_S to finish. Timeouts, 429s and
# cancellations never count: they say "slow" or "later", not "misconfigured". Any success, or a failure of
# another kind, turns it off for the rest of the run (a mixed failure rate goes on as before).
FAIL_FAST_N = 8
_FAIL_FAST_IGNORED = ("timeout", "rate_limited", "cancelled")
UNTIL_SENT_S = 86400.0  # duration_s 0: send until every request is sent (bounded by a day), window to the last end


class FailFast:
    """Watches the first records of a run; `see(rec)` returns True once, when the run should stop."""

    def __init__(self, enabled: bool, url: str):
        self.active = enabled
        self.url = url
        self.sig: tuple | None = None
        self.n = 0
        self.first: dict | None = None
        self.fired = False

    def see(self, rec: dict) -> bool:
        if not self.active:
            return False
        kind = rec.get("error_kind")
        sig = (kind, rec.get("http_status"))
        if kind is None or kind in _FAIL_FAST_IGNORED or (self.sig is not None and sig != self.sig):
            self.active = False
            return False
        if self.sig is None:
            self.sig, self.first = sig, rec
        self.n += 1
        if self.n >= FAIL_FAST_N:
            self.active = False
            self.fired = True
            return True
        return False

    def info(self) -> dict | None:
        if not self.fired:
            return None
        text = " ".join(str(self.first.get("error_text") or "").split())
        url = redact_url(self.url)  # the summary is written and shown: no user:password@
        return {
            "requests": self.n,
            "url": url,
            "error_kind": self.sig[0],
            "http_status": self.sig[1],
            "error_text": text,
            "message": f"stopped: the first {self.n} requests to {url} all failed the same way "
            f"({self.sig[0]}): {text[:400]}",
        }


def default_workload(spec: LoadSpec) -> str:
    named = spec.load_shape.workload_name(spec.point())
    if named:
        return named
    if spec.dataset_path:
        return f"{spec.dataset_name or 'sharegpt'}:{Path(spec.dataset_path).name}"
    if spec.dataset_name not in (None, "random"):
        return f"{spec.dataset_name}-in{spec.input_tokens}-out{spec.output_tokens}"
    in_dist, out_dist = length_dists(spec)
    i = "dist" if in_dist else spec.input_tokens
    o = "dist" if out_dist else spec.output_tokens
    pre = f"-prefix{spec.shared_prefix_tokens}" if spec.shared_prefix_tokens else ""
    return f"synthetic-in{i}-out{o}{pre}"


@dataclass
class LoadResult:
    spec: LoadSpec
    records: list[dict]
    summary: dict
    window_start_ns: int
    window_end_ns: int
    t0_ns: int = 0
    send_end_ns: int = 0
    drain_s: float = 0.0
    status: str = "ok"
    error_kind: str | None = None
    error_text: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9

    def load_run_row(self) -> dict[str, Any]:
        """The `load_runs` columns the load generator knows (no run_id, source, deployment_id, energy)."""
        s, sp = self.summary, self.spec
        return {
            "load_point_id": s.get("load_point_id"),
            "workload": s.get("workload"),
            "shape": sp.shape,
            "api": sp.api,
            "concurrency": sp.concurrency,
            "rate": sp.rate,
            "burstiness": sp.param("burstiness"),  # NULL for a shape without one
            # requested lengths; NULL where the dataset decides them (each request's are in `requests`)
            "input_tokens": None if sp.dataset_path else sp.input_tokens,
            "output_tokens": None if (sp.output_tokens_dist or {}).get("kind") == "dataset" else sp.output_tokens,
            "warmup_s": sp.warmup_s,
            "duration_s": s.get("duration_s", sp.duration_s),
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "window_s": self.window_s,
            "drain_s": self.drain_s,
            "achieved_rate": s.get("achieved_rate"),
            "achieved_concurrency": s.get("achieved_concurrency"),
            "send_lateness_p50_ms": (s.get("send_lateness_ms") or {}).get("p50"),
            "send_lateness_p99_ms": (s.get("send_lateness_ms") or {}).get("p99"),
            "sent": s.get("sent"),
            "completed": s.get("completed"),
            "failed": s.get("failed"),
            "output_tokens_in_window": s.get("output_tokens_in_window"),
            **steps.load_run_columns(s.get("steps")),
            "status": self.status,
            "error_kind": self.error_kind,
            "error_text": self.error_text,
            "summary": s,
        }


def point_result(spec: LoadSpec, sink: Any, lp: str, duration_s: float, res: dict, slo: dict | None) -> LoadResult:
    closed = spec.load_shape.closed_loop
    summary = metrics.summarize(
        sink.records, res["ws"], res["we"], slo=slo, closed_loop=closed, concurrency=spec.concurrency
    )
    status, ek, et = "ok", None, None
    if summary["sent"] and not summary["completed"]:
        status = "failed"
        errs = summary["errors"]
        ek = max(errs, key=errs.get) if errs else "no_requests"
        et = next((r["error_text"] for r in sink.records if r["error_kind"] == ek), None)
    elif not summary["sent"]:
        status, ek, et = "failed", "no_requests", "no request was sent"
    ff = sink.fail_fast.info()
    if ff is not None:
        summary["fail_fast"] = ff
        if not summary["completed"]:
            status, ek, et = "failed", ff["error_kind"], ff["message"]
    gone = sink.gone.info()
    if gone is not None:  # a broken window: the point is not a measurement, whatever completed before
        summary["server_gone"] = gone
        status, ek, et = "failed", "server_gone", gone["message"]
    summary.update(
        load_point_id=lp,
        model=spec.model,
        url=redact_url(spec.url),
        workload=spec.workload or default_workload(spec),
        shape=spec.shape,
        api=spec.api,
        requested_rate=spec.rate if not spec.load_shape.closed_loop else None,
        requested_concurrency=spec.concurrency,
        burstiness=spec.param("burstiness") or 1.0,  # as vllm bench serve's: 1 (Poisson) for a shape without one
        warmup_s=spec.warmup_s,
        drain_s=res["drain_s"],
        duration_s=duration_s if duration_s < UNTIL_SENT_S else summary["window_s"],
        send_s=(res["send_end"] - res["t0"]) / 1e9,
        transport=spec.transport,
        workers=res.get("workers", 1),
        window_edge_lateness_ms={
            k: (v - (res["ws"] if k == "start" else res["we"])) / 1e6 for k, v in res["edges_called"].items()
        },
    )
    if res["edge_errors"]:
        summary["window_callback_errors"] = res["edge_errors"]
    summary["prompt_length"] = prompt_length.summary(spec, sink.records)
    summary.update(res.get("prelude") or {})  # ready_check, warmup_requests: before t0, not measured
    if isinstance(res.get("energy"), dict):  # the window's energy reading (wattbench load --telemetry)
        from .energy import figures

        summary["energy"] = figures(summary, res["energy"])
    return LoadResult(
        spec=spec,
        records=sink.records,
        summary=summary,
        window_start_ns=res["ws"],
        window_end_ns=res["we"],
        t0_ns=res["t0"],
        send_end_ns=res["send_end"],
        drain_s=res["drain_s"],
        status=status,
        error_kind=ek,
        error_text=et,
        extra={"replay": {"load_point_id": lp, "duration_s": duration_s, "res": res, "slo": slo}},
    )
