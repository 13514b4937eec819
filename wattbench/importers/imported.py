"""The tool-neutral form of another tool's result (`ImportedRun` of `ImportedPoint`s) that each importer module
(vllm_bench, aiperf, guidellm) makes, and what they share to make it: reading the file, its content hash, the load
point's label. wattbench/importers/__init__.py writes it into the warehouse."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ImportFileError(ValueError):
    """A file cannot be imported; the message names the file, what is wrong and what was expected."""


@dataclass
class ImportedPoint:
    point_label: str  # c8, poisson-r4, ... (wattbench.plan.point_label's names)
    workload: str
    shape: str  # concurrency | poisson | gamma | constant | ...
    window_s: float  # the tool's measured duration (s)
    sent: int | None
    completed: int | None
    failed: int | None
    output_tokens_total: int | None  # output tokens of the successful requests in that duration
    api: str | None = None
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float | None = None
    input_tokens: int | None = None  # requested lengths where the file says them, else the measured means
    output_tokens: int | None = None
    warmup_s: float | None = None
    achieved_concurrency: float | None = None
    stats: dict[str, dict[str, float | None]] = field(default_factory=dict)  # ttft_ms/tpot_ms/itl_ms/e2e_ms
    goodput: float | None = None  # requests/s meeting the tool's SLOs, when it computed them
    figures: dict[str, Any] = field(default_factory=dict)  # the tool's own headline figures, as named there
    requests: list[dict] = field(default_factory=list)  # `requests` rows (no run_id/source/deployment/point)
    # the window's edges on the requests' clock, where the file says them (wattbench load's own result files);
    # None: the whole run is the window
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    # the GPUs' energy over the window (J, summed over GPUs) where the file measured it (AIPerf's GPU telemetry,
    # wattbench load --telemetry); None: not measured (the energy figures stay NULL and say so)
    energy_j: float | None = None
    energy_trace_j: float | None = None
    repeat: int = 1
    load_runs: dict[str, Any] = field(default_factory=dict)  # more load_runs columns, as the file has them


@dataclass
class ImportedRun:
    tool: str  # vllm | aiperf | guidellm  -> source 'imported:<tool>'
    tool_version: str | None
    path: Path
    sha256: str
    model: str
    points: list[ImportedPoint]
    url: str | None = None
    started_at: _dt.datetime | None = None
    finished_at: _dt.datetime | None = None
    config: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] = field(default_factory=dict)  # ttft_ms / tpot_ms / e2e_ms
    notes: list[str] = field(default_factory=list)
    # where the file's energy came from: deployments columns (telemetry_source, gpu_name, n_gpus, gpu_uuids,
    # idle_power_w_before); empty when it measured none (telemetry_source 'none')
    telemetry: dict[str, Any] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)  # runs' gpu_price_per_hour, energy_price_per_kwh, pue
    searches: list[dict] = field(default_factory=list)  # `searches` rows (an SLO capacity search's answer)


# A result file is read whole and parsed in memory (about 3x its size at its peak: docs/RELIABILITY.md section 11);
# vllm bench serve's detailed result of 100k requests of 256 tokens is about 0.5 GB.
MAX_IMPORT_BYTES = 1 << 30
_WHAT = "a JSON result file"


def file_sha256(paths: list[Path]) -> str:
    from wattbench_agent.bundle import BundleError, open_regular

    h = hashlib.sha256()
    for p in paths:
        try:
            with open_regular(p, _WHAT, MAX_IMPORT_BYTES) as fh:
                while block := fh.read(1 << 20):
                    h.update(block)
        except (BundleError, OSError) as exc:
            raise ImportFileError(str(exc)) from None
    return h.hexdigest()


def read_json(path: Path) -> Any:
    """A JSON document, or JSON lines (one object per line, as vLLM's --append-result and AIPerf's records write):
    from a regular file of at most MAX_IMPORT_BYTES (a FIFO is refused without waiting, a device without reading it);
    nesting deeper than Python's parser goes is one line, not a RecursionError."""
    from wattbench_agent.bundle import BundleError, read_regular

    try:
        text = read_regular(path, _WHAT, MAX_IMPORT_BYTES).decode("utf-8")
    except BundleError as exc:
        raise ImportFileError(str(exc)) from None
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ImportFileError(f"{path}: not a text file; expected a JSON result file") from None
    try:
        return _loads(text, path)
    except json.JSONDecodeError as first:
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(_loads(line, path, i))
            except json.JSONDecodeError as exc:
                if i == 1:
                    raise ImportFileError(
                        f"{path}: not JSON ({first.msg} at line {first.lineno}); expected a result "
                        "file of vllm bench serve, AIPerf or guidellm"
                    ) from None
                raise ImportFileError(f"{path}:{i}: not valid JSON ({exc.msg}); expected one object per line") from None
        return rows


def _loads(text: str, path: Path, line: int | None = None) -> Any:
    """json.loads, with nesting past the parser's recursion limit said in one line."""
    try:
        return json.loads(text)
    except RecursionError:
        where = f"{path}:{line}" if line else str(path)
        raise ImportFileError(
            f"{where}: JSON nested deeper than this reader goes (Python's recursion limit, "
            f"{sys.getrecursionlimit():,} levels); expected a result file of vllm bench serve, AIPerf or guidellm"
        ) from None


def point_label(shape: str, concurrency: int | None, rate: float | None, burstiness: float | None) -> str:
    """The load shape's own label (as a plan's point gets), plus -max<N> for an open-loop point capped at N in
    flight: the tools sweep that cap, so it tells their points apart."""
    from wattbench_agent.loadgen import shapes

    label = shapes.label({"shape": shape, "concurrency": concurrency, "rate": rate, "burstiness": burstiness})
    if concurrency and not shapes.get(shape).closed_loop:
        label += f"-max{concurrency}"
    return label


def energy_facts(e: Any) -> tuple[dict[str, Any], dict[str, float]]:
    """(deployments columns, runs columns) of an energy block that `wattbench load --telemetry` wrote
    (wattbench_agent/loadgen/energy.py `figures`): where the energy came from and the prices; ({}, {}) for none."""
    if not isinstance(e, dict):
        return {}, {}
    telemetry = {
        "telemetry_source": e.get("telemetry") if e.get("telemetry") not in (None, "none") else None,
        "gpu_name": e.get("gpu_name"),
        "n_gpus": e.get("n_gpus"),
        "idle_power_w_before": e.get("idle_power_w"),
    }
    pr = e.get("prices") or {}
    prices = {
        k: float(v)
        for k, v in (
            ("gpu_price_per_hour", pr.get("gpu_hour_usd")),
            ("energy_price_per_kwh", pr.get("energy_kwh_usd")),
            ("pue", (pr.get("pue") or 1.0) if pr.get("energy_kwh_usd") else None),
        )
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return {k: v for k, v in telemetry.items() if v is not None}, prices
