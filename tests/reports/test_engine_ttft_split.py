"""sql/views.sql v_engine_ttft_split against what real vLLM 0.25.0 exported on an H200 (results/h200-vllm-sweep):
the view's means equal the change of each histogram's _sum / _count between the window scrapes, read straight from
the bundle's server_metrics.jsonl, and the client's TTFT less the prefill mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import unpacked

BUNDLE = Path("results/h200-vllm-sweep/bundle-sweep.tar.xz")


def _edges(folder: Path) -> dict[tuple[str, str], float]:
    """(load point, sample name) -> value at window_end minus window_start, summed over label sets."""
    out: dict[tuple[str, str], float] = {}
    for line in (folder / "server_metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("scrape") not in ("window_start", "window_end"):
            continue
        sign = 1.0 if r["scrape"] == "window_end" else -1.0
        key = (r["load_point_id"], r["metric"])
        out[key] = out.get(key, 0.0) + sign * r["value"]
    return out


def test_the_split_is_the_engines_own_histograms_over_the_window(tmp_path: Path):
    with unpacked(BUNDLE) as folder, connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, folder)
        edges = _edges(folder)
        rows = con.execute(
            "SELECT load_point_id, client_ttft_ms, server_ttft_ms, queue_ms, prefill_ms, prefill_n, to_scheduled_ms, "
            "source "
            "FROM v_engine_ttft_split ORDER BY load_point_id"
        ).fetchall()
    assert len(rows) == 18  # 2 engines x 3 points x 3 repeats, each with its window scrapes
    for lp, client, server, queue, prefill, prefill_n, to_sched, source in rows:
        assert source == "measured"
        pre = "vllm:request_prefill_time_seconds"
        assert prefill_n == edges[(lp, pre + "_count")] > 0
        assert prefill == pytest.approx(1e3 * edges[(lp, pre + "_sum")] / edges[(lp, pre + "_count")])
        ttft = "vllm:time_to_first_token_seconds"
        assert server == pytest.approx(1e3 * edges[(lp, ttft + "_sum")] / edges[(lp, ttft + "_count")])
        assert queue >= 0 and 0 < prefill < server < client  # the client sees the server's TTFT and more
        assert to_sched == pytest.approx(client - prefill)
