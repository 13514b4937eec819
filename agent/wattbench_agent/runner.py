"""The bench agent: the thin process that runs next to the GPUs.

It runs an agent spec (wattbench_agent.wire.AgentSpec) in rounds. A round is the set of deployments that can be
up at once: each gets its GPUs (the plan's, or free ones the agent assigns), starts (or is attached to), warms
up, and gets a sampler on exactly its GPUs and a /metrics scraper. Then the round takes an idle baseline with
every engine loaded, runs the load points interleaved across deployments (the first point of each deployment,
then the second of each, ...; the control plane lists repeats of a point after all points, so slow drift of the
GPU or the host hits every engine alike), takes a second idle baseline and stops the engines. Deployments that
need GPUs a running one holds wait for a later round.

Failures are rows, not crashes: a deployment that does not start, or a load point that breaks, is recorded with
its kind and the rest of the spec goes on.

Imports nothing of Dagster core, DuckDB or Great Expectations (dagster-pipes only in __main__).
"""

from __future__ import annotations

import threading
import time
import traceback
import zlib
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from wattbench_agent import fetch, hostfacts, procs
from wattbench_agent.bundle import BundleWriter
from wattbench_agent.crosscheck import CrossCheck, open_crosscheck
from wattbench_agent.deploy.local import DeployError, LocalProcess, free_port
from wattbench_agent.engines.base import EngineAdapter
from wattbench_agent.engines.failures import mark_truncations
from wattbench_agent.engines.registry import adapter_for
from wattbench_agent.gpus import Gpu, GpuAssignmentError, GpusBusy, NodeGpus, visible_devices_env
from wattbench_agent.loadgen import LoadSpec, run_load, shapes
from wattbench_agent.metrics_scrape import MetricsScraper
from wattbench_agent.safety import file_name, mask_env, mask_map, redact_argv, redact_text, redact_url
from wattbench_agent.telemetry import open_sampler
from wattbench_agent.wire import SERVER_START_ENV, AgentSpec, DeploymentSpec, LoadPointSpec, start_mark

Log = Callable[[str], None]

# Set when the agent is asked to stop (SIGTERM, see cli.stop_on_sigterm). The signal also raises
# KeyboardInterrupt at once; should a callback swallow that, the agent still stops at the next load point.
STOP = threading.Event()


def _check_stop(where: str) -> None:
    if STOP.is_set():
        raise KeyboardInterrupt(f"terminated (stop requested; seen before {where})")


def _mean_power_w(window: dict[str, Any] | None) -> float | None:
    if not window or window.get("total_j") is None:
        return None
    seconds = (window["end_ns"] - window["start_ns"]) / 1e9
    return window["total_j"] / seconds if seconds > 0 else None


@dataclass
class Deployment:
    """One deployment while the agent runs it: its spec, its row, and what it holds (server, GPUs, watchers)."""

    spec: DeploymentSpec
    adapter: EngineAdapter
    row: dict[str, Any]
    telemetry: str
    gpus: list[Gpu] | None = None
    server: LocalProcess | None = None
    url: str | None = None
    sampler: Any = None
    scraper: MetricsScraper | None = None
    crosscheck: CrossCheck | None = None
    alive: bool = True
    written: bool = False

    @property
    def id(self) -> str:
        return self.spec.deployment_id

    def fail(self, kind: str, text: str) -> None:
        self.row["error_kind"], self.row["error_text"] = kind, clip_error(text)
        self.row["status"] = "failed"
        self.alive = False


def clip_error(text: str, limit: int = 2000) -> str:
    """An error text within `limit` characters: its first line (what happened, and why) and as much of the rest
    (a log tail) as fits, from the end; credentials in it masked (safety.redact_text)."""
    text = redact_text(text) or ""
    if len(text) <= limit:
        return text
    head, _, rest = text.partition("\n")
    head = head[: limit // 2]
    return f"{head}\n...{rest[-(limit - len(head) - 4) :]}"


def with_hint(adapter: EngineAdapter, text: str) -> str:
    """A start failure's text with the engine's advice for it, if it has one, after the first line."""
    hint = adapter.start_failure_hint(text)
    if not hint:
        return text
    head, _, rest = text.partition("\n")
    return f"{head}\nhint: {hint}" + (f"\n{rest}" if rest else "")


def new_deployment(dep: DeploymentSpec, spec: AgentSpec) -> Deployment:
    cfg = dep.engine_config
    adapter = adapter_for(cfg.engine)
    telemetry = spec.telemetry
    if telemetry == "auto":
        telemetry = "emulated" if adapter.source == "emulated" else "nvml"
    row: dict[str, Any] = {
        "deployment_id": dep.deployment_id,
        "build_id": dep.build_id,
        "model": cfg.model,
        "engine": cfg.engine if cfg.engine != "emulator" else f"emulator:{cfg.profile}",
        "config_name": cfg.config_name,
        "precision": cfg.precision,
        "tp": cfg.tp,
        "gpu_name": cfg.gpu,
        "n_gpus": cfg.tp,
        "target": dep.target,
        "engine_version": None,
        "status": "failed",
        # secrets (by name: options such as api_key, env WANDB_KEY; by value: URL credentials) never reach the row
        "config": mask_map({**adapter.resolved_config(cfg), **({"env": mask_env(dep.env)} if dep.env else {})}),
        "source": adapter.source,
        "telemetry_source": telemetry,
    }
    row.update(weights_columns(cfg.model, row["config"]))
    return Deployment(spec=dep, adapter=adapter, row=row, telemetry=telemetry)


def weights_columns(model: str, config: dict[str, Any]) -> dict[str, Any]:
    """`model_weights_hash` of a model that is a local file or folder on this node (NULL otherwise, or when it cannot
    be read); what the hash read and how long it took goes to the deployment's config (`model_weights`)."""
    try:
        found = hostfacts.model_weights_hash(model) if model else None
    except (OSError, ValueError) as exc:
        config["model_weights"] = {"error": f"{type(exc).__name__}: {exc}"}
        return {"model_weights_hash": None}
    if found is None:
        return {"model_weights_hash": None}
    config["model_weights"] = {k: v for k, v in found.items() if k != "hash"}
    return {"model_weights_hash": found["hash"]}


# ----------------------------------------------------------------------------------------------------------------
# Rounds: which deployments are up together
# ----------------------------------------------------------------------------------------------------------------
def plan_rounds(deps: list[Deployment], node: NodeGpus | None, log: Log) -> list[list[Deployment]]:
    """Group deployments into rounds that can be up at once, in spec order. GPUs the plan names are taken as
    given (two deployments may share a GPU on purpose: only one is under load at a time); GPUs the agent assigns
    are free ones, so a deployment that needs GPUs an earlier one holds waits for a later round. Deployments whose
    GPUs cannot be right become failed rows here."""
    rounds: list[list[Deployment]] = []
    pending = list(deps)
    while pending:
        current: list[Deployment] = []
        claimed: set[str] = set()
        waiting: list[Deployment] = []
        for d in pending:
            needs_gpus = d.telemetry == "nvml" and node is not None
            if not needs_gpus:
                if d.spec.gpus and d.telemetry == "nvml":
                    d.row["config"]["gpus_requested"] = list(d.spec.gpus)
                current.append(d)
                continue
            try:
                if d.spec.gpus:
                    d.gpus = node.resolve(d.spec.gpus, d.spec.engine_config.tp)
                elif d.spec.target == "external":
                    raise GpuAssignmentError(
                        "gpu_mismatch",
                        "an external engine's GPUs cannot be assigned by the agent; name them in "
                        "the plan (gpus: [index or UUID, ...]) so that exactly they are measured",
                    )
                else:
                    d.gpus = node.assign(d.spec.engine_config.tp, claimed)
            except GpusBusy:
                waiting.append(d)
                continue
            except GpuAssignmentError as exc:
                d.fail(exc.kind, str(exc))
                log(f"[{d.id}] FAILED ({exc.kind}): {exc}")
                current.append(d)  # written with its round, so rows keep spec order
                continue
            claimed |= {g.uuid for g in d.gpus}
            current.append(d)
        if not current:  # cannot happen: an empty round means nothing fits even alone (assign raised instead)
            raise RuntimeError("no deployment fits on this node")
        rounds.append(current)
        pending = waiting
    return rounds


# ----------------------------------------------------------------------------------------------------------------
# Starting and stopping one deployment
# ----------------------------------------------------------------------------------------------------------------
def start_deployment(d: Deployment, writer: BundleWriter, log: Log) -> None:
    """Start (or attach to) the engine and wait until it is healthy; a failure marks the deployment failed."""
    launch_deployment(d, writer, log)
    await_deployment(d, log)


def launch_deployment(d: Deployment, writer: BundleWriter, log: Log, start: int = 1) -> None:
    """Attach to an external engine, or start a local one's process (without waiting for it). Call from the main
    thread: engines die with the thread that started them (PR_SET_PDEATHSIG), so that a killed agent leaves none.
    `start`: which server start this is (its log is its own; the engine sees WATTBENCH_SERVER_START, which the
    emulator reseeds from)."""
    dep, cfg, adapter = d.spec, d.spec.engine_config, d.adapter
    d.server, d.url = None, None
    try:
        if dep.target == "external":
            url = (dep.url or "").rstrip("/")
            if url.endswith("/v1"):
                url = url[: -len("/v1")]
            try:  # the head only, within 5 s in total (wattbench_agent.fetch): the server may be anyone's
                code = fetch.status(url + "/v1/models", timeout_s=5.0)
                what = f"answered HTTP {code}" if not 200 <= code < 300 else None
            except fetch.FetchError as exc:
                what = str(exc).removeprefix(f"GET {redact_url(url)}/v1/models: ")
            if what is not None:
                raise DeployError(
                    "unreachable",
                    f"GET {redact_url(url)}/v1/models {what}; expected an OpenAI-compatible "
                    "endpoint answering 200 (is the url in the plan right, is it up?)",
                )
            d.row["startup_s"] = None  # attached, not started: startup not measured
            d.url, d.row["url"] = url, redact_url(url)  # the row never holds a URL's user:password@
        else:
            # an id like ../x stays in the bundle; a later start's log beside the first's
            log_path = Path(writer.path) / "logs" / file_name(d.id + start_mark(start), ".log")
            env = {**dep.env, SERVER_START_ENV: str(start)}
            if d.gpus:
                env.update(visible_devices_env(d.gpus))
            server = LocalProcess(
                command=[], log_path=log_path, host="127.0.0.1", port=int(dep.port or free_port()), env=env
            )
            server.command = adapter.serve_command(cfg, server.host, server.port, dep.artifact_path)
            d.server = server
            d.row["log_path"] = str(log_path)
            pinned = f" on GPU(s) {env['CUDA_VISIBLE_DEVICES']}" if d.gpus else ""
            which = f" (server start {start})" if start > 1 else ""
            log(f"[{d.id}] starting{pinned}{which}: {' '.join(redact_argv(server.command))}")
            server.start()
            procs.record(writer, f"engine:{d.id}", server.proc.pid)  # for the reaper, should this agent die
    except (DeployError, httpx.HTTPError, OSError) as exc:
        d.fail(getattr(exc, "kind", "unreachable"), str(exc))
        log(f"[{d.id}] FAILED to start ({d.row['error_kind']}): {str(exc).splitlines()[0]}")


def await_deployment(d: Deployment, log: Log) -> None:
    """Wait for a launched engine to be healthy (any thread), then read its startup phases and version."""
    adapter, server = d.adapter, d.server
    if not d.alive:
        return
    if server is not None:
        try:
            d.row["startup_s"] = server.wait_healthy(adapter.health_path, d.spec.health_timeout_s)
        except (DeployError, httpx.HTTPError, OSError) as exc:
            text = with_hint(adapter, str(exc))
            d.fail(getattr(exc, "kind", "unreachable"), text)
            log(f"[{d.id}] FAILED to start ({d.row['error_kind']}): " + "\n".join(text.splitlines()[:2]))
            return
        d.url = d.row["url"] = server.url
        log(f"[{d.id}] healthy after {d.row['startup_s']:.1f} s at {redact_url(d.url)}")
        if hasattr(adapter, "startup_phases"):  # weights load, CUDA-graph capture (vLLM, SGLang)
            d.row["config"]["startup_phases"] = adapter.startup_phases(server.log_tail(200_000))
    version, where = adapter.detect_version(d.url, server.log_tail(200_000) if server else "")
    checked = adapter.version_checked(version)
    d.row.update(engine_version=version, engine_version_source=where, version_checked=checked)
    if checked is False:
        log(
            f"[{d.id}] WARNING: {adapter.name} {version} (read from {where}) is not a version this adapter was "
            f"checked against ({', '.join(adapter.checked_versions)}); its flags and metric names may differ"
        )
    elif version is None:
        log(
            f"[{d.id}] {adapter.name} did not say its version (no {adapter.version_path or 'version endpoint'}, "
            "no version line in its log): engine_version is NULL"
        )


def open_watchers(d: Deployment, spec: AgentSpec, writer: BundleWriter, stack: ExitStack, log: Log) -> None:
    """The sampler on exactly the deployment's GPUs, the /metrics scraper and the energy cross-check."""
    if d.telemetry == "emulated" and d.adapter.source != "emulated":
        raise ValueError(f"{d.id}: emulated telemetry is only for emulated engines")
    uuids = [g.uuid for g in d.gpus] if d.gpus else (list(d.spec.gpus) if d.spec.gpus else None)
    if d.telemetry == "nvml" and d.spec.gpus and not d.gpus:
        uuids = None  # NVML was not there to resolve the plan's GPUs: the sampler reports it
    d.sampler = stack.enter_context(
        open_sampler(kind=d.telemetry, gpu_uuids=uuids, url=d.url, hz=spec.sampler_hz, out=writer, deployment_id=d.id)
    )
    metrics_url = d.url + d.adapter.metrics_path if d.adapter.metrics_path else None
    d.scraper = stack.enter_context(MetricsScraper(metrics_url, writer, d.id))
    if spec.energy_crosscheck and d.telemetry == "nvml":
        d.crosscheck, message = open_crosscheck(uuids)
        log(f"[{d.id}] {message}")


def stop_deployment(d: Deployment, writer: BundleWriter) -> None:
    if d.server is not None:
        d.server.stop()
    if d.sampler is not None:
        columns = d.sampler.deployment_columns()
        d.row.update({k: v for k, v in columns.items() if v is not None})
        n = columns.get("n_gpus")
        tp = d.spec.engine_config.tp
        if d.telemetry == "nvml" and n is not None and n != tp and d.row.get("error_kind") is None:
            d.fail(
                "gpu_mismatch",
                f"energy was read from {n} GPU(s) for tp={tp}; per-GPU figures would be wrong "
                "(name the deployment's GPUs in the plan: gpus: [...])",
            )
    if d.row.get("error_kind") is None and d.url is not None:
        d.row["status"] = "healthy"
    if not d.written:
        writer.write("deployments", [d.row])
        d.written = True


# ----------------------------------------------------------------------------------------------------------------
# Load
# ----------------------------------------------------------------------------------------------------------------
def warm_up_engine(d: Deployment, warmup_requests: int, log: Log) -> None:
    """A few unrecorded requests before the idle baseline, so first-request costs (CUDA graphs, compilation,
    allocator growth) land in no measurement."""
    n = int(warmup_requests)
    if n <= 0 or not d.spec.load_points:
        return
    first = d.spec.load_points[0].load
    spec = LoadSpec.from_dict(
        {
            "url": d.url,
            "model": d.adapter.served_model_name(d.spec.engine_config),
            "api": first.get("api", "chat"),
            "shape": "concurrency",
            "concurrency": min(n, 8),
            "max_requests": n,
            "duration_s": 600,
            "input_tokens": first.get("input_tokens", 128),
            "output_tokens": min(int(first.get("output_tokens", 16)), 16),
            "ignore_eos": d.adapter.accepts_ignore_eos,
            "timeout_s": float(d.spec.health_timeout_s),
        }
    )
    started = time.monotonic()
    result = run_load(spec, progress=False)
    log(
        f"[{d.id}] warm-up: {result.summary.get('completed')} request(s) in {time.monotonic() - started:.1f} s "
        "(not recorded)"
    )


def point_seed(point: LoadPointSpec) -> int:
    """Each load point gets its own prompts and arrivals unless the plan pins a seed: repeating the same prompts
    across points (or repeats) would let prefix caching serve later ones from cache and flatter them. The seed
    comes from the workload, point and repeat, not the engine, so every engine of a plan sees the same requests."""
    return load_seed(point.workload, point.point_label, point.repeat, point.load)


def load_seed(workload: str, point_label: str, repeat: int, load: dict) -> int:
    """point_seed from its parts (the twin draws a planned point's arrivals and lengths with it too)."""
    key = f"{workload}:{point_label}" + (f":r{repeat}" if repeat > 1 else "")
    return load.get("seed", zlib.crc32(key.encode()) & 0x7FFFFFFF)


def run_load_point(
    point: LoadPointSpec,
    d: Deployment,
    writer: BundleWriter,
    log: Log,
    report: Callable[[dict], None],
    *,
    extra: dict[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
    on_record: Callable[[dict], None] | None = None,
    stop_event: threading.Event | None = None,
    write_row: bool = True,
) -> dict[str, Any]:
    """One load run: its requests and its load_runs row (with `extra` columns: a search's probe) go to the bundle.
    `slo`, `on_record`, `stop_event`: handed to the load generator (a search judges and may end its probes);
    `write_row` False: the caller writes the row (a search, once it has judged the probe)."""
    lp_id = point.load_point_id
    over: dict[str, Any] = {}
    if not d.adapter.accepts_ignore_eos and point.load_spec.ignore_eos:
        log(
            f"[{d.id}] {d.adapter.name} rejects ignore_eos/min_tokens: sending without them; output lengths are the "
            "model's (truncation checks read usage and finish_reason)"
        )
        over["ignore_eos"] = False
    spec = point.load_spec.replace(
        url=d.url,
        model=d.adapter.served_model_name(d.spec.engine_config),
        load_point_id=lp_id,
        seed=point_seed(point),
        **over,
    )
    window: dict[str, Any] = {}
    ids = {"deployment_id": d.id, "load_point_id": lp_id, "source": d.adapter.source}
    lr: dict[str, Any] = {
        **ids,
        "workload": point.workload,
        "shape": spec.shape,
        "status": "failed",
        "point_label": point.point_label,
        "repeat": point.repeat,
        "server_start": point.server_start,
    }
    cross, sampler, scraper = d.crosscheck, d.sampler, d.scraper
    # the engine's processes: a server this agent started (an attached engine's are not ours to read)
    cpu = hostfacts.CpuWindow(d.server.proc.pid if d.server is not None and d.server.proc is not None else None)

    def window_start() -> None:
        if cross:
            cross.begin()
        sampler.begin_window(lp_id)
        cpu.begin()  # after the energy read: /proc takes a few ms, the counter is the window's edge of record
        if scraper:
            scraper.scrape_edge(lp_id, "window_start")

    def window_end() -> None:
        if cross:
            window["crosscheck_j"] = cross.end_j()
        window.update(sampler.end_window(lp_id) or {})
        window["host"] = cpu.end()
        if scraper:
            scraper.scrape_edge(lp_id, "window_end")

    try:
        if scraper:
            scraper.load_point_id = lp_id
        result = run_load(
            spec,
            progress=False,
            on_window_start=window_start,
            on_window_end=window_end,
            slo=slo,
            on_record=on_record,
            stop_event=stop_event,
        )
        records = [{**r, **ids} for r in result.records]
        truncations = mark_truncations(records)  # silent truncation becomes a per-request error kind
        writer.write("requests", records)
        lr.update(result.load_run_row())
        if any(truncations.values()):
            lr["summary"] = {**(lr.get("summary") or {}), "truncations": truncations}
            log(f"[{d.id}] {lp_id}: silent truncation found: {truncations}")
        lr.update(
            {
                **ids,
                "workload": point.workload,
                "point_label": point.point_label,
                "repeat": point.repeat,
                "server_start": point.server_start,
            }
        )
        lr.update(extra or {})
        lr["energy_j"] = window.get("total_j")
        lr.update(window.get("host") or {})
        lr["energy_trace_j"] = window.get("trace_j")
        lr["idle_power_w"] = d.row.get("idle_power_w_before")
        if cross:
            lr["energy_crosscheck_j"] = window.get("crosscheck_j")
            lr["energy_crosscheck_source"] = cross.source
        s = result.summary
        headline = {
            "load_point_id": lp_id,
            "output_tok_s": s.get("output_token_throughput"),
            "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"),
            "energy_j": lr["energy_j"],
            "completed": s.get("completed"),
            "failed": s.get("failed"),
        }
        if lr["energy_j"] and lr.get("output_tokens_in_window"):
            headline["tokens_per_joule"] = lr["output_tokens_in_window"] / lr["energy_j"]
        log(
            f"[{d.id}] {lp_id}: "
            + ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in headline.items()
                if k != "load_point_id"
            )
        )
        report(headline)
    except Exception as exc:  # a broken load point is a row, and the plan goes on
        lr["error_kind"] = type(exc).__name__
        lr["error_text"] = "".join(traceback.format_exception_only(exc)).strip()[-2000:]
        lr.update(extra or {})
        log(f"[{d.id}] {lp_id} FAILED: {lr['error_text']}")
    finally:
        if scraper:
            scraper.load_point_id = None
    if write_row:
        writer.write("load_runs", [lr])
    return lr


def _answers(url: str | None) -> bool:
    """Whether an engine the agent did not start still answers its model list."""
    if not url:
        return False
    try:
        base = url.rstrip("/")
        return fetch.status(base + ("/models" if base.endswith("/v1") else "/v1/models"), timeout_s=5.0) < 500
    except fetch.FetchError:
        return False


def run_search_point(
    point: LoadPointSpec, d: Deployment, writer: BundleWriter, log: Log, report: Callable[[dict], None]
) -> dict[str, Any]:
    """An SLO capacity search on one deployment (loadgen/search.py): every probe is a load run of its own (requests,
    window energy, a load_runs row marked with the search and its verdict), and the search's answer is a row of
    `searches`. The probes' seeds come from the point's, so every engine of a plan gets the same requests."""
    from wattbench_agent.loadgen.search import SearchSpec, run_search, search_row

    search = SearchSpec.from_dict(dict(point.search or {}))
    mark = start_mark(point.server_start)  # a later start's search and probes carry it: ids unique over starts
    search_id = f"{d.id}:{point.workload}{mark}"
    base = point.load_spec.replace(
        url=d.url, model=d.adapter.served_model_name(d.spec.engine_config), seed=point_seed(point)
    )
    log(f"[{d.id}] {search_id}: searching {search.over} for the highest load meeting {search.slo_text()}")

    class Measured:
        def __init__(self, lr: dict[str, Any]):
            self.summary = lr.get("summary") or {}
            self.status = lr.get("status", "failed")
            self.error_kind, self.error_text = lr.get("error_kind"), lr.get("error_text")
            self.load_point_id = lr.get("load_point_id")

    def measure(spec: LoadSpec, probe, on_record=None, stop_event=None) -> Measured:
        label = shapes.label(spec.point())
        suffix = f"#{probe.repeat}" if probe.repeat > 1 else ""
        load = {k: v for k, v in spec.to_dict().items() if k not in ("url", "model", "load_point_id")}
        probe_point = LoadPointSpec(
            load_point_id=f"{d.id}:{point.workload}:{label}{mark}{suffix}",
            workload=point.workload,
            point_label=label,
            load=load,
            repeat=probe.repeat,
            server_start=point.server_start,
        )
        extra = {"search_id": search_id, "probe": probe.index, "probe_phase": probe.phase}
        lr = run_load_point(
            probe_point,
            d,
            writer,
            log,
            report,
            extra=extra,
            slo=search.slo,
            on_record=on_record,
            stop_event=stop_event,
            write_row=False,
        )
        pending[probe.index] = lr
        return Measured(lr)

    pending: dict[int, dict[str, Any]] = {}

    def judged(probe) -> None:  # the probe's row, with the search's verdict on it
        lr = pending.pop(probe.index)
        lr["probe_verdict"] = probe.verdict
        if probe.stopped_early:
            lr["summary"] = {**(lr.get("summary") or {}), "oversaturation": probe.stopped_early}
        writer.write("load_runs", [lr])

    def server_ok() -> bool:
        if d.server is not None:
            return d.server.alive() and _answers(d.url)
        return _answers(d.url)

    result = run_search(
        base, search, measure, server_ok=server_ok, log=lambda line: log(f"[{d.id}] {line}"), on_probe=judged
    )
    row = {
        "deployment_id": d.id,
        "search_id": search_id,
        "server_start": point.server_start,
        **search_row(result, base, point.workload),
    }
    cap, text = result.capacity(), row["answer"]
    writer.write("searches", [row])
    log(f"[{d.id}] {search_id}: {text}")
    report({"search_id": search_id, **{k: v for k, v in cap.items() if k in ("value", "lo", "hi", "binding")}})
    return row


def idle_windows(
    deps: list[Deployment],
    name: str,
    seconds: float,
    quiet_s: float = 0.0,
    timeout_s: float = 0.0,
    log: Log = print,
    start: int = 1,
) -> None:
    """One idle window on every running deployment's GPUs at once (engines loaded, no traffic), taken once their GPUs
    are quiet: utilisation 0 and power steady for `quiet_s` (telemetry.sampler.wait_until_quiet), at most `timeout_s`.
    How long that took and whether they went quiet are the deployment's idle_settle_s_* and idle_settled_* (a window
    that never settled is flagged by validation, deployments.idle_*_settled). A later server start's window is named
    with its start (`idle_before@s2`) and its figures go to that start's entry of the row's config.starts; the row's
    own idle_power_w_* are the mean over starts (finish_starts)."""
    live = [d for d in deps if d.alive and d.sampler is not None]
    if seconds <= 0 or not live:
        return
    suffix = name.split("_", 1)[1]
    if quiet_s > 0:
        from wattbench_agent.telemetry.sampler import wait_until_quiet

        for d, (waited, settled) in zip(live, wait_until_quiet([d.sampler for d in live], quiet_s, timeout_s)):
            if settled is None:  # its telemetry cannot tell (no utilisation or power read)
                continue
            _start_facts(d, start)[f"idle_settle_s_{suffix}"] = round(waited, 3)
            _start_facts(d, start)[f"idle_settled_{suffix}"] = settled
            if not settled:
                log(
                    f"[{d.id}] GPUs not quiet after {waited:.1f} s (utilisation above 0 or power still moving over "
                    f"{quiet_s:g} s): {name} taken anyway and flagged"
                )
    window = name + start_mark(start)
    for d in live:
        d.sampler.begin_window(window)
    time.sleep(seconds)
    for d in live:
        _start_facts(d, start)[f"idle_power_w_{suffix}"] = _mean_power_w(d.sampler.end_window(window))


def _start_facts(d: Deployment, start: int) -> dict[str, Any]:
    """What one server start of the deployment measured of itself (startup, idle power): config.starts[start - 1]."""
    starts = d.row["config"].setdefault("starts", [])
    while len(starts) < start:
        starts.append({"server_start": len(starts) + 1})
    return starts[start - 1]


def finish_starts(d: Deployment) -> None:
    """The row's own startup and idle figures from its starts: startup_s and the idle settling of the first start
    (what a first start costs), idle_power_w_before / _after the mean over the starts that read one (the above-idle
    figures subtract one baseline a deployment); server_starts how many starts ran."""
    starts = d.row["config"].get("starts") or []
    d.row["server_starts"] = len(starts) or None
    if not starts:
        return
    first = starts[0]
    firsts = ("startup_s", "idle_settle_s_before", "idle_settled_before", "idle_settle_s_after", "idle_settled_after")
    for key in firsts:
        if key in first:
            d.row[key] = first[key]
    for key in ("idle_power_w_before", "idle_power_w_after"):
        seen = [s[key] for s in starts if s.get(key) is not None]
        d.row[key] = sum(seen) / len(seen) if seen else None
    if len(starts) == 1:  # one start: the row says it all
        del d.row["config"]["starts"]


def point_starts(deps: list[Deployment]) -> list[int]:
    """The server starts the round's load points ask for, in order (1 when none says)."""
    return sorted({p.server_start for d in deps for p in d.spec.load_points}) or [1]


def run_round(
    deps: list[Deployment], spec: AgentSpec, writer: BundleWriter, log: Log, report: Callable[[dict], None]
) -> None:
    """Run the round's deployments once per server start: each start launches every engine afresh, runs the points
    of that start (interleaved across engines, as ever) and stops them (docs/MEASUREMENT.md, "Server starts")."""
    try:
        for start in point_starts(deps):
            run_start(deps, start, spec, writer, log, report)
    except (KeyboardInterrupt, SystemExit) as exc:  # SIGINT/SIGTERM: stop the engines, say so in the rows, re-raise
        for d in deps:
            if d.row.get("error_kind") is None:
                d.row["error_kind"] = "interrupted"
                d.row["error_text"] = f"agent interrupted ({exc or type(exc).__name__}) during deployment {d.id}"
        raise
    finally:
        for d in deps:
            finish_starts(d)
            stop_deployment(d, writer)


def _launch_all(deps: list[Deployment], start: int, spec: AgentSpec, writer: BundleWriter, log: Log) -> None:
    if spec.start_together and sum(d.alive for d in deps) > 1:
        # Engines start side by side (each waits for its own health); their startup_s overlap, and the
        # rows say so. Engines that size memory by profiling free GPU memory must not share a GPU this way.
        for d in deps:
            d.row["config"]["started_together"] = True
            if d.alive:
                launch_deployment(d, writer, log, start)
        waiters = [
            threading.Thread(target=await_deployment, args=(d, log), name=f"await-{d.id}") for d in deps if d.alive
        ]
        for th in waiters:
            th.start()
        for th in waiters:
            th.join()
    else:
        for d in deps:
            if d.alive:
                launch_deployment(d, writer, log, start)
                await_deployment(d, log)
    for d in deps:
        if d.alive:
            _start_facts(d, start)["startup_s"] = d.row.get("startup_s")


def run_start(
    deps: list[Deployment],
    start: int,
    spec: AgentSpec,
    writer: BundleWriter,
    log: Log,
    report: Callable[[dict], None],
) -> None:
    """One server start of the round's deployments: start them, idle baseline, their points of this start, idle
    baseline, stop them."""
    deps = [d for d in deps if any(p.server_start == start for p in d.spec.load_points) or start == 1]
    with ExitStack() as stack:
        _check_stop(f"starting the round's engines (server start {start})")
        _launch_all(deps, start, spec, writer, log)
        for d in deps:
            if d.alive:
                open_watchers(d, spec, writer, stack, log)
                warm_up_engine(d, spec.warmup_requests, log)
        idle = (spec.idle_baseline_s, spec.idle_quiet_s, spec.idle_quiet_timeout_s)
        idle_windows(deps, "idle_before", *idle, log, start)
        todo = {d.id: [p for p in d.spec.load_points if p.server_start == start] for d in deps}
        slots = max((len(todo[d.id]) for d in deps if d.alive), default=0)
        total = sum(len(todo[d.id]) for d in deps if d.alive)
        done = 0
        for k in range(slots):
            for d in deps:
                if not d.alive or k >= len(todo[d.id]):
                    continue
                point = todo[d.id][k]
                _check_stop(f"load point {point.load_point_id}")
                done += 1
                log(f"[{d.id}] load point {done}/{total}{_start_note(start)}: {point.load_point_id}")
                if point.search is not None:  # its searches row (a search ends itself when the server goes)
                    lr = run_search_point(point, d, writer, log, report)
                else:
                    lr = run_load_point(point, d, writer, log, report)
                _after_point(d, point, lr, len(todo[d.id]) - k - 1, log)
        idle_windows(deps, "idle_after", *idle, log, start)
        for d in deps:  # stop engines while the samplers still run, so their columns are complete
            if d.server is not None:
                d.server.stop()


def _start_note(start: int) -> str:
    return f" (server start {start})" if start > 1 else ""


def _after_point(d: Deployment, point: LoadPointSpec, lr: dict[str, Any], left: int, log: Log) -> None:
    """A server that died or stopped answering ends the deployment: its later points (later starts' too) do not run."""
    if d.server is not None and not d.server.alive():
        d.fail("server_crash", d.server.log_tail(1500))
        log(f"[{d.id}] server died during {point.load_point_id}; skipping its remaining points")
    elif lr.get("error_kind") == "server_gone":  # it stopped answering (an external one, a pod)
        d.fail(
            "server_gone",
            f"stopped answering during {point.load_point_id}; its {left} later load point(s) were "
            f"not run\n{lr.get('error_text') or ''}",
        )
        log(f"[{d.id}] server stopped answering during {point.load_point_id}; not running its {left} later point(s)")


def _redacting(log: Log) -> Log:
    def redacted(line: str) -> None:
        log(redact_text(line))

    return redacted


def run_spec(
    spec: AgentSpec | dict[str, Any], log: Log = print, report: Callable[[dict], None] = lambda m: None
) -> Path:
    """Run every deployment of an agent spec into one bundle; returns the bundle folder. Every line given to `log`
    has its credentials masked (safety.redact_text)."""
    spec = AgentSpec.from_dict(spec)
    log = _redacting(log)
    out = Path(spec.out)
    procs.run_token()  # the run's mark: every engine started from here carries it, for the stale-run reaper
    with BundleWriter(out, run_id=spec.run_id, source=spec.source, plan=spec.plan_name) as writer:
        if writer.set_aside is not None:
            log(
                f"{out}: held an earlier attempt of run {spec.run_id}; kept it under {writer.set_aside} "
                "(a loadable bundle) and starting afresh, so no row is written twice"
            )
        deps = [new_deployment(dep, spec) for dep in spec.deployments]
        host = hostfacts.host_facts()
        for d in deps:
            d.row.update(host)
        node = NodeGpus.probe() if any(d.telemetry == "nvml" for d in deps) else None
        rounds = plan_rounds(deps, node, log)
        if len(rounds) > 1:
            log(
                f"{len(rounds)} rounds: the node cannot hold every deployment at once, so points interleave only "
                "within a round: " + " | ".join(", ".join(d.id for d in r) for r in rounds)
            )
        for i, round_deps in enumerate(rounds, 1):
            for d in round_deps:
                d.row["config"]["round"] = i
            _check_stop(f"round {i}")
            run_round(round_deps, spec, writer, log, report)
        _check_stop("closing the bundle")
    return out
