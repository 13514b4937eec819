"""Scraping an engine's Prometheus /metrics into server_metrics rows.

Pages are parsed with prometheus_client's own parser (label values may hold any character, `}` included) and
each sample's labels are kept as a mapping (a MAP column in the warehouse). Besides the periodic scrape (1 s),
the agent scrapes at each load point's window edges (`scrape_edge`), so the engine's own TTFT and inter-token
histograms can be differenced over exactly the client's steady-state window (sql/views.sql v_client_vs_server).
Periodic scrapes keep gauges, counters and histogram sums and counts but not histogram buckets: vLLM 0.25's page
holds several hundred bucket samples, which at 1 Hz would outweigh every other table of a bundle; the edge
scrapes keep everything. No scrape keeps the `_created` timestamps prometheus_client serves beside each counter and
histogram (parse_prometheus).

Agent-side code: httpx and prometheus_client only.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from wattbench_agent import fetch
from wattbench_agent.safety import redact_url

# Families that carry an OpenMetrics creation timestamp, `<name>_created`, next to their samples.
_CREATED_FAMILIES = ("counter", "histogram", "summary", "gaugehistogram")


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) for every sample of a Prometheus text exposition. Dropped: samples that are not
    finite (NaN, +-Inf: no measurement, and the bundle refuses them), and
    the `<name>_created` sample of each counter, histogram and summary - the Unix time the series was created, which
    prometheus_client (and so vLLM and SGLang) serves beside every one of them, as a gauge family of that name in
    the text format and as a sample of the family in OpenMetrics; a timestamp, not a measurement (45 of the 420
    samples of vLLM 0.25.0's page)."""
    families = list(text_string_to_metric_families(text))
    timed = {f.name for f in families if f.type in _CREATED_FAMILIES}
    out = []
    for family in families:
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created") and name[: -len("_created")] in timed:
                continue
            value = float(sample.value)
            if math.isfinite(value):
                out.append((name, dict(sample.labels), value))
    return out


class MetricsScraper:
    """Scrapes an engine's /metrics on a fixed period in a background thread into server_metrics rows."""

    def __init__(self, url: str | None, writer: Any, deployment_id: str, period_s: float = 1.0):
        self.url, self.writer, self.deployment_id, self.period_s = url, writer, deployment_id, period_s
        self.load_point_id: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one scrape at a time: edges and the periodic loop never interleave rows
        self.failures = 0
        self.last_error: str | None = None

    def scrape_once(self, scrape: str | None = None, load_point_id: str | None = None) -> int:
        if not self.url:
            return 0
        with self._lock:
            try:  # 2 s in total and 32 MiB decoded (wattbench_agent.fetch), whatever the page's server does
                resp = fetch.get(self.url, timeout_s=2.0, max_bytes=fetch.MAX_METRICS_BYTES)
                if resp.status != 200:
                    raise ValueError(f"GET {redact_url(self.url)} answered HTTP {resp.status}")
                t_ns = time.perf_counter_ns()
                samples = parse_prometheus(resp.text)
            except (fetch.FetchError, ValueError) as exc:  # unreachable, or a page the parser rejects
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                return 0
            lp = load_point_id if load_point_id is not None else self.load_point_id
            rows = [
                {
                    "deployment_id": self.deployment_id,
                    "load_point_id": lp,
                    "t_ns": t_ns,
                    "metric": name,
                    "labels": labels,
                    "value": value,
                    "scrape": scrape,
                }
                for name, labels, value in samples
                if scrape is not None or not name.endswith("_bucket")
            ]
            return self.writer.write("server_metrics", rows)

    def scrape_edge(self, load_point_id: str, edge: str) -> int:
        """A scrape at a load point's window edge ('window_start' or 'window_end')."""
        return self.scrape_once(scrape=edge, load_point_id=load_point_id)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.scrape_once()

    def __enter__(self) -> MetricsScraper:
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
