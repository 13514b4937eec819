"""A server that returns garbage, 500s, or drops connections, end to end through the bench agent: every request
is a row with its kind, the load point row is written, the other deployments still run, and the requests
suite names the failure rate with sample rows."""

from __future__ import annotations

import socket
from collections import Counter

from tests.reliability.conftest import BEHAVIOURS, MisbehavingServer, external_deployment, rows
from wattbench.validation import validate_table
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.runner import run_spec

# What the load generator's client calls each misbehaviour (agent/wattbench_agent/loadgen/client.py).
EXPECTED_KIND = {
    "ok": None,
    "http_500": "http_5xx",
    "garbage": "disconnected",
    "drop_before_reply": "disconnected",
    "drop_mid_stream": "disconnected",
    "not_json": "malformed_sse",
}


def refused_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_misbehaving_server_every_request_is_a_row_and_the_run_goes_on(tmp_path):
    n = 2 * len(BEHAVIOURS)
    bad, good = MisbehavingServer(), MisbehavingServer(behaviours=("ok",))
    logs: list[str] = []
    with bad.running(), good.running():
        spec = {
            "run_id": "r-bad-server",
            "source": "measured",
            "out": str(tmp_path / "bundle"),
            "deployments": [
                external_deployment("bad", bad.url, n),
                external_deployment("gone", refused_url(), 4),
                external_deployment("good", good.url, 6),
            ],
        }
        bundle = run_spec(spec, log=logs.append)

    deployments = {r["deployment_id"]: r for r in rows(bundle, "deployments")}
    assert set(deployments) == {"bad", "gone", "good"}
    # the endpoint that refuses connections: a row with its kind and the URL it tried, not a crash
    gone = deployments["gone"]
    assert gone["status"] == "failed" and gone["error_kind"] == "unreachable"
    assert "127.0.0.1" in gone["error_text"]
    assert any("[gone] FAILED to start (unreachable)" in line for line in logs)

    # every request sent to the misbehaving server is one row, with the kind of what went wrong
    requests = [r for r in rows(bundle, "requests") if r["deployment_id"] == "bad"]
    assert len(requests) == n == len(bad.seen) and len({r["request_id"] for r in requests}) == n
    kinds = Counter(r["error_kind"] for r in requests)
    expected = Counter(EXPECTED_KIND[m] for m in bad.seen)
    # the arrival order of two concurrent requests decides which request got which behaviour, so compare counts
    assert kinds == expected, (kinds, expected)
    for r in requests:
        if r["error_kind"] is not None:
            assert r["error_text"], r  # says what happened
        if r["error_kind"] == "http_5xx":
            assert r["http_status"] == 500 and "500" in r["error_text"]
        if r["error_kind"] is None:
            assert r["completion_tokens"] == 4 and r["ttft_ms"] <= r["e2e_ms"]

    # the load point row is written, with what was completed and what failed
    load_runs = {r["load_point_id"]: r for r in rows(bundle, "load_runs")}
    lr = load_runs["bad:w:c2"]
    assert lr["completed"] + lr["failed"] == n and lr["failed"] == sum(v for k, v in kinds.items() if k)
    assert lr["summary"]["errors"] == {k: v for k, v in kinds.items() if k}
    assert deployments["bad"]["status"] == "healthy"  # the server stayed up; its answers were bad

    # and the run went on: the deployment after the broken ones measured normally
    assert load_runs["good:w:c2"]["status"] == "ok" and load_runs["good:w:c2"]["completed"] == 6
    assert deployments["good"]["status"] == "healthy"

    # ingested and validated: the error rate is named, with the row count and sample error kinds
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, bundle)
        df = con.execute("SELECT * FROM requests WHERE run_id = 'r-bad-server'").df()
    result = validate_table("requests", df, {"max_error_rate": 0.05})
    failed = {o.rule: o for o in result.errors}
    assert failed["requests.error_rate"].unexpected_count == sum(v for k, v in kinds.items() if k)
    assert set(failed["requests.error_rate"].sample) <= {"http_5xx", "disconnected", "malformed_sse"}
    assert "requests.error_rate | error | **FAIL**" in result.markdown()
