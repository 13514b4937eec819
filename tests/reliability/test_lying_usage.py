"""An engine that lies in its usage (completion_tokens -7 or 1e308, a string, a list): the requests it lied about are
marked `bad_usage` with the figure it sent named and their counts NULL, and the rest of the run is measured and
loads. Probed on the old agent: output_tok_s = -2.6e22 printed for the point, and a bundle ingest refused whole
(`completion_tokens` 1e308 cannot be an INTEGER; -7 breaks `completion_tokens_nonnegative`)."""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from tests.reliability.conftest import MisbehavingServer, _chunk, _sse, external_deployment, rows
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.runner import run_spec

LIES = {
    "negative": {"prompt_tokens": 8, "completion_tokens": -7},
    "huge": {"prompt_tokens": 8, "completion_tokens": 1e308},
    "text": {"prompt_tokens": 8, "completion_tokens": "4"},
    "prompt_negative": {"prompt_tokens": -3, "completion_tokens": 4},
    "not_an_object": [4, 8],
    "past_int32": {"prompt_tokens": 8, "completion_tokens": 2**40},
    "fraction": {"prompt_tokens": 8, "completion_tokens": 3.5},
}


class LyingServer(MisbehavingServer):
    """Every other chat request answers 4 tokens truthfully; the others claim the usage of one of LIES."""

    def __init__(self):
        super().__init__(behaviours=tuple(m for lie in LIES for m in ("ok", lie)))

    def respond(self, sock: socket.socket, path: str, body: bytes) -> None:
        if path.startswith("/v1/models") or path.startswith("/health"):
            return super().respond(sock, path, body)
        with self._lock:
            mode = self.behaviours[self.count % len(self.behaviours)]
            self.count += 1
            self.seen.append(mode)
        usage = {"prompt_tokens": 8, "completion_tokens": 4} if mode == "ok" else LIES[mode]
        out = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n"
        )
        out += b"".join(_sse(_chunk(" tok")) for _ in range(4)) + _sse(_chunk(None, "length"))
        out += _sse({"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [], "usage": usage})
        done = b"data: [DONE]\n\n"
        sock.sendall(out + b"%x\r\n%s\r\n" % (len(done), done) + b"0\r\n\r\n")


@pytest.fixture(scope="module")
def lied_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lies")
    server = LyingServer()
    logs: list[str] = []
    with server.running():
        spec = {
            "run_id": "r-lying-usage",
            "source": "measured",
            "out": str(tmp / "bundle"),
            "deployments": [external_deployment("liar", server.url, 2 * len(LIES))],
        }
        bundle = run_spec(spec, log=logs.append)
    return tmp, bundle, server, logs


def test_each_lie_is_a_bad_usage_row_naming_the_figure(lied_bundle):
    _tmp, bundle, server, _logs = lied_bundle
    requests = rows(bundle, "requests")
    assert len(requests) == 2 * len(LIES) == len(server.seen)
    kinds = Counter(r["error_kind"] for r in requests)
    assert kinds == {None: len(LIES), "bad_usage": len(LIES)}, kinds
    for r in requests:
        if r["error_kind"] is None:
            assert r["completion_tokens"] == 4 and r["prompt_tokens"] == 8 and r["tpot_ms"] is not None
            continue
        # the figure the server sent is named, and nothing built on it is kept
        assert r["error_text"].startswith("the server's usage "), r["error_text"]
        assert (
            "expected an integer from 0 to 2,147,483,647" in r["error_text"]
            or "expected an object" in (r["error_text"])
        )
        assert r["completion_tokens"] is None and r["tpot_ms"] is None, r
        assert r["token_count_source"] is None and r["ttft_ms"] is not None  # timed, its count unknown
    texts = " | ".join(r["error_text"] for r in requests if r["error_kind"])
    for shown in (
        "completion_tokens = -7",
        "completion_tokens = 1e+308",
        "completion_tokens = '4'",
        "prompt_tokens = -3",
        "completion_tokens = 1099511627776",
        "completion_tokens = 3.5",
        "usage = [4, 8]",
    ):
        assert shown in texts, (shown, texts)


def test_the_point_reports_only_what_was_measured(lied_bundle):
    _tmp, bundle, _server, _logs = lied_bundle
    (lr,) = rows(bundle, "load_runs")
    s = lr["summary"]
    assert lr["completed"] == len(LIES) and lr["failed"] == len(LIES)
    assert s["errors"] == {"bad_usage": len(LIES)}
    assert 0 < s["output_token_throughput"] < 1e6, s["output_token_throughput"]  # was -2.6e22 tok/s


def test_the_run_with_lies_ingests_with_the_other_requests_intact(lied_bundle):
    tmp, bundle, _server, _logs = lied_bundle
    with connect(tmp / "w.duckdb") as con:
        ingest_bundle(con, bundle)
        got = con.execute(
            "SELECT error_kind, count(*), sum(completion_tokens) FROM requests WHERE run_id = 'r-lying-usage' "
            "GROUP BY ALL ORDER BY 1 NULLS FIRST"
        ).fetchall()
    assert got == [(None, len(LIES), 4 * len(LIES)), ("bad_usage", len(LIES), None)]
