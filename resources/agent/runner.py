"""The bench agent: the thin process that runs next to the GPUs.

For each deployment of its spec it starts (or attaches to) the engine, takes an idle baseline, runs the
load points while the telemetry sampler and a /metrics scraper run beside it, takes a second idle
baseline, stops the engine and writes everything to a result bundle. Failures are rows, not crashes: a
deployment that does not start, or a load point that breaks, is recorded with its kind and the rest of
the spec goes on.

Imports nothing of Dagster core, DuckDB or Great Expectations (dagster-pipes only in __main__).
"""

from __future__ import annotations

import re
import threading
import zlib
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import httpx

from resources.agent.crosscheck import CrossCheck, open_crosscheck
from resources.bundle import BundleWriter
from resources.deploy.local import DeployError, LocalProcess, free_port
from resources.engines.base import EngineConfig, adapter_for
from resources.engines.failures import mark_truncations
from resources.loadgen import LoadSpec, run_load
from resources.telemetry import open_sampler

Log = Callable[[str], None]

# Set when the agent is asked to stop (SIGTERM, see cli.stop_on_sigterm). The signal also raises
# KeyboardInterrupt at once; should a callback swallow that, the agent still stops at the next load point.
STOP = threading.Event()


def _check_stop(where: str) -> None:
    if STOP.is_set():
        raise KeyboardInterrupt(f"terminated (stop requested; seen before {where})")

_PROM_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)")


def parse_prometheus(text: str) -> list[tuple[str, str, float]]:
    """(metric, labels, value) for every sample line of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if m:
            try:
                out.append((m.group(1), m.group(2) or "", float(m.group(3))))
            except ValueError:
                continue
    return out


class MetricsScraper:
    """Scrapes an engine's /metrics on a fixed period in a background thread into server_metrics rows."""

    def __init__(self, url: str | None, writer: BundleWriter, deployment_id: str, period_s: float = 1.0):
        self.url, self.writer, self.deployment_id, self.period_s = url, writer, deployment_id, period_s
        self.load_point_id: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def scrape_once(self) -> int:
        if not self.url:
            return 0
        try:
            resp = httpx.get(self.url, timeout=2.0)
            resp.raise_for_status()
        except httpx.HTTPError:
            self.failures += 1
            return 0
        t_ns = time.perf_counter_ns()
        rows = [
            {"deployment_id": self.deployment_id, "load_point_id": self.load_point_id, "t_ns": t_ns,
             "metric": name, "labels": labels, "value": value}
            for name, labels, value in parse_prometheus(resp.text)
            if value == value  # drop NaN samples
        ]
        return self.writer.write("server_metrics", rows)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.scrape_once()

    def __enter__(self) -> "MetricsScraper":
        if self.url:
            self.scrape_once()
            self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self.scrape_once()


def _mean_power_w(window: dict[str, Any] | None) -> float | None:
    if not window or window.get("total_j") is None:
        return None
    seconds = (window["end_ns"] - window["start_ns"]) / 1e9
    return window["total_j"] / seconds if seconds > 0 else None


def _idle_window(sampler, name: str, seconds: float) -> dict[str, Any] | None:
    if seconds <= 0:
        return None
    sampler.begin_window(name)
    time.sleep(seconds)
    return sampler.end_window(name)


def run_deployment(dep: dict[str, Any], writer: BundleWriter, log: Log, report: Callable[[dict], None]) -> dict[str, Any]:
    """Run one deployment of the spec; returns its deployments row (also written to the bundle)."""
    cfg = EngineConfig(**dep["engine_config"])
    adapter = adapter_for(cfg.engine)
    deployment_id = dep["deployment_id"]
    row: dict[str, Any] = {
        "deployment_id": deployment_id, "build_id": dep.get("build_id"), "model": cfg.model, "engine": cfg.engine
        if cfg.engine != "emulator" else f"emulator:{cfg.profile}", "config_name": cfg.config_name,
        "precision": cfg.precision, "tp": cfg.tp, "gpu_name": cfg.gpu, "n_gpus": cfg.tp,
        "target": dep.get("target", "local"), "engine_version": adapter.follows_version, "status": "failed",
        "config": adapter.resolved_config(cfg), "source": adapter.source,
    }
    server: LocalProcess | None = None
    try:
        if row["target"] == "external":
            url = dep["url"].rstrip("/")
            if url.endswith("/v1"):
                url = url[: -len("/v1")]
            try:
                with httpx.Client(timeout=5.0) as client:
                    client.get(url + "/v1/models").raise_for_status()
            except httpx.HTTPError as exc:
                what = (f"answered HTTP {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError)
                        else f"{type(exc).__name__}: {exc}")
                raise DeployError("unreachable", f"GET {url}/v1/models {what}; expected an OpenAI-compatible "
                                                 "endpoint answering 200 (is the url in the plan right, is it up?)") from exc
            row["startup_s"] = None  # attached, not started: startup not measured
        else:
            log_path = Path(writer.path) / "logs" / f"{deployment_id}.log"
            server = LocalProcess(
                command=[], log_path=log_path, host="127.0.0.1", port=int(dep.get("port") or free_port())
            )
            server.command = adapter.serve_command(cfg, server.host, server.port, dep.get("artifact_path"))
            row["log_path"] = str(log_path)
            log(f"[{deployment_id}] starting: {' '.join(server.command)}")
            server.start()
            row["startup_s"] = server.wait_healthy(adapter.health_path, float(dep.get("health_timeout_s", 600)))
            url = server.url
            log(f"[{deployment_id}] healthy after {row['startup_s']:.1f} s at {url}")
            if hasattr(adapter, "startup_phases"):  # weights load, CUDA-graph capture (vLLM, SGLang)
                row["config"]["startup_phases"] = adapter.startup_phases(server.log_tail(200_000))
        row["url"] = url
    except (DeployError, httpx.HTTPError, OSError) as exc:
        row["error_kind"] = getattr(exc, "kind", "unreachable")
        row["error_text"] = str(exc)[-2000:]
        log(f"[{deployment_id}] FAILED to start ({row['error_kind']}): {str(exc).splitlines()[0]}")
        writer.write("deployments", [row])
        return row

    telemetry = dep.get("telemetry", "auto")
    if telemetry == "auto":
        telemetry = "emulated" if adapter.source == "emulated" else "nvml"
    if telemetry == "emulated" and adapter.source != "emulated":
        raise ValueError(f"{deployment_id}: emulated telemetry is only for emulated engines")
    row["telemetry_source"] = telemetry
    metrics_url = url + adapter.metrics_path if adapter.metrics_path else None
    # A second, independent energy reading per load point where asked (real GPUs only).
    crosscheck = None
    if dep.get("energy_crosscheck") and telemetry == "nvml":
        crosscheck, message = open_crosscheck(dep.get("gpu_uuids"))
        log(f"[{deployment_id}] {message}")
    try:
        with open_sampler(
            kind=telemetry, gpu_uuids=dep.get("gpu_uuids"), url=url, hz=float(dep.get("sampler_hz", 10)),
            out=writer, deployment_id=deployment_id,
        ) as sampler, MetricsScraper(metrics_url, writer, deployment_id) as scraper:
            idle_s = float(dep.get("idle_baseline_s", 3))
            warm_up_engine(dep, adapter, url, adapter.served_model_name(cfg), deployment_id, log)
            row["idle_power_w_before"] = _mean_power_w(_idle_window(sampler, "idle_before", idle_s))
            points = dep.get("load_points", [])
            for i, point in enumerate(points, 1):
                lp_id = point["load_point_id"]
                _check_stop(f"load point {lp_id}")
                scraper.load_point_id = lp_id
                log(f"[{deployment_id}] load point {i}/{len(points)}: {lp_id}")
                if not adapter.accepts_ignore_eos and point["spec"].get("ignore_eos", True):
                    log(f"[{deployment_id}] {adapter.name} rejects ignore_eos/min_tokens: sending without them; "
                        "output lengths are the model's (truncation checks read usage and finish_reason)")
                    point = {**point, "spec": {**point["spec"], "ignore_eos": False}}
                run_load_point(point, url, adapter.served_model_name(cfg), deployment_id, adapter.source, sampler,
                               writer, log, report, crosscheck)
                scraper.load_point_id = None
                if server is not None and not server.alive():
                    row["error_kind"], row["error_text"] = "server_crash", server.log_tail(1500)
                    log(f"[{deployment_id}] server died during {lp_id}; skipping the remaining points")
                    break
            row["idle_power_w_after"] = _mean_power_w(_idle_window(sampler, "idle_after", idle_s))
        # What the sampler saw of the GPUs (real names, uuids, driver, its own cost) replaces the plan's words.
        row.update({k: v for k, v in sampler.deployment_columns().items() if v is not None})
        row["status"] = "healthy" if row.get("error_kind") is None else "failed"
    except (KeyboardInterrupt, SystemExit) as exc:  # SIGINT/SIGTERM: stop the engine, say so in the row, re-raise
        row["error_kind"] = "interrupted"
        row["error_text"] = f"agent interrupted ({exc or type(exc).__name__}) during deployment {deployment_id}"
        raise
    finally:
        if server is not None:
            server.stop()
        writer.write("deployments", [row])
    return row


def warm_up_engine(dep: dict[str, Any], adapter, url: str, model: str, deployment_id: str, log: Log) -> None:
    """A few unrecorded requests before the idle baseline, so first-request costs (CUDA graphs, compilation,
    allocator growth) land in no measurement."""
    n = int(dep.get("warmup_requests", 0))
    if n <= 0 or not dep.get("load_points"):
        return
    first = dep["load_points"][0]["spec"]
    spec = LoadSpec.from_dict({
        "url": url, "model": model, "api": first.get("api", "chat"), "shape": "concurrency",
        "concurrency": min(n, 8), "max_requests": n, "duration_s": 600, "input_tokens": first.get("input_tokens", 128),
        "output_tokens": min(int(first.get("output_tokens", 16)), 16), "ignore_eos": adapter.accepts_ignore_eos,
        "timeout_s": float(dep.get("health_timeout_s", 600)),
    })
    started = time.monotonic()
    result = run_load(spec, progress=False)
    log(f"[{deployment_id}] warm-up: {result.summary.get('completed')} request(s) in {time.monotonic() - started:.1f} s "
        "(not recorded)")


def run_load_point(point: dict[str, Any], url: str, model: str, deployment_id: str, source: str, sampler,
                   writer: BundleWriter, log: Log, report: Callable[[dict], None],
                   crosscheck: CrossCheck | None = None) -> dict[str, Any]:
    lp_id = point["load_point_id"]
    # Each load point gets its own prompts and arrivals unless the plan pins a seed: repeating the same prompts
    # across points would let prefix caching serve later points from cache and flatter them. The seed comes from
    # the workload and point, not the engine, so every engine of a plan sees the very same requests.
    point_key = point.get("workload", "") + ":" + lp_id.rsplit(":", 1)[-1]
    seed = point["spec"].get("seed", zlib.crc32(point_key.encode()) & 0x7FFFFFFF)
    spec = LoadSpec.from_dict({**point["spec"], "url": url, "model": model, "load_point_id": lp_id, "seed": seed})
    window: dict[str, Any] = {}
    ids = {"deployment_id": deployment_id, "load_point_id": lp_id, "source": source}
    lr: dict[str, Any] = {**ids, "workload": point["workload"], "shape": spec.shape, "status": "failed"}
    cross = crosscheck

    def window_start() -> None:
        if cross:
            cross.begin()
        sampler.begin_window(lp_id)

    def window_end() -> None:
        if cross:
            window["crosscheck_j"] = cross.end_j()
        window.update(sampler.end_window(lp_id) or {})

    try:
        result = run_load(spec, progress=False, on_window_start=window_start, on_window_end=window_end)
        records = [{**r, **ids} for r in result.records]
        truncations = mark_truncations(records)  # silent truncation becomes a per-request error kind
        writer.write("requests", records)
        lr.update(result.load_run_row())
        if any(truncations.values()):
            lr["summary"] = {**(lr.get("summary") or {}), "truncations": truncations}
            log(f"[{deployment_id}] {lp_id}: silent truncation found: {truncations}")
        lr.update({**ids, "workload": point["workload"]})
        lr["energy_j"] = window.get("total_j")
        lr["energy_trace_j"] = window.get("trace_j")
        if cross:
            lr["energy_crosscheck_j"] = window.get("crosscheck_j")
            lr["energy_crosscheck_source"] = cross.source
        s = result.summary
        headline = {
            "load_point_id": lp_id, "output_tok_s": s.get("output_token_throughput"),
            "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"), "energy_j": lr["energy_j"],
            "completed": s.get("completed"), "failed": s.get("failed"),
        }
        if lr["energy_j"] and lr.get("output_tokens_in_window"):
            headline["tokens_per_joule"] = lr["output_tokens_in_window"] / lr["energy_j"]
        log(f"[{deployment_id}] {lp_id}: " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in headline.items() if k != "load_point_id"))
        report(headline)
    except Exception as exc:  # a broken load point is a row, and the plan goes on
        lr["error_kind"] = type(exc).__name__
        lr["error_text"] = "".join(traceback.format_exception_only(exc)).strip()[-2000:]
        log(f"[{deployment_id}] {lp_id} FAILED: {lr['error_text']}")
    writer.write("load_runs", [lr])
    return lr


def run_spec(spec: dict[str, Any], log: Log = print, report: Callable[[dict], None] = lambda m: None) -> Path:
    """Run every deployment of an agent spec into one bundle; returns the bundle folder."""
    out = Path(spec["out"])
    source = spec.get("source", "measured")
    with BundleWriter(out, run_id=spec["run_id"], source=source, plan=spec.get("plan_name")) as writer:
        if writer.set_aside is not None:
            log(f"{out}: held an earlier attempt of run {spec['run_id']}; kept it under {writer.set_aside} "
                "(a loadable bundle) and starting afresh, so no row is written twice")
        for dep in spec["deployments"]:
            _check_stop(f"deployment {dep.get('deployment_id')}")
            run_deployment(dep, writer, log, report)
        _check_stop("closing the bundle")
    return out


def deployment_spec(cfg: EngineConfig, **fields: Any) -> dict[str, Any]:
    """A deployments entry of an agent spec for one engine config."""
    return {"engine_config": asdict(cfg), **fields}
