import json
import signal
import subprocess
import sys
import time
from functools import partial

from .conftest import ROOT, wattbench_load

cli = partial(wattbench_load, timeout=60)


def test_cli_json_summary(fast_server, tmp_path):
    out = tmp_path / "r.jsonl"
    p = cli(
        "--url",
        fast_server,
        "--model",
        "m",
        "--concurrency",
        "2",
        "--input-tokens",
        "16",
        "--output-tokens",
        "4",
        "--duration",
        "0.5",
        "--out",
        str(out),
        "--json",
    )
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert {"p50", "p90", "p99", "mean"} <= set(s[k])
    for k in ("request_throughput", "output_token_throughput", "completed", "failed", "window_s"):
        assert k in s
    assert s["completed"] == len(out.read_text().splitlines()) and s["failed"] == 0
    assert "TTFT ms" in p.stderr  # the table goes to stderr when --json owns stdout


def test_cli_rejects_bad_trace_with_line(fast_server, tmp_path):
    t = tmp_path / "t.csv"
    t.write_text("timestamp,input_tokens,output_tokens\n0,1,1\nx,1,1\n")
    p = cli("--url", fast_server, "--model", "m", "--trace", str(t))
    assert p.returncode == 2 and "t.csv:3:" in p.stderr


def _as_from_a_terminal() -> None:
    """The child as a shell in a terminal starts it: SIGINT delivered and handled. A child inherits an ignored or
    blocked SIGINT from its parent: pytest started as a background job of a non-interactive shell (`make test &`)
    has SIGINT ignored, and the child then ran its whole --duration (measured: SIG_IGN under `nohup make test &`)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_interrupt_flushes_everything_measured(tmp_path):
    from wattbench_agent.loadgen.testserver import server_process

    out = tmp_path / "i.jsonl"
    with server_process(ttft_ms=5, itl_ms=20) as url:
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipelines.cli",
                "load",
                "--url",
                url,
                "--model",
                "m",
                "--concurrency",
                "4",
                "--output-tokens",
                "20",
                "--duration",
                "600",  # never ends by itself before the interrupt, however slow the machine
                "--out",
                str(out),
                "--no-progress",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_as_from_a_terminal,
        )
        # generous waits: on a loaded 2-core machine the CLI's start-up alone can take many seconds
        deadline = time.time() + 120
        while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 6):
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    ids = [r["request_id"] for r in recs]
    assert len(ids) == len(set(ids)) >= 6
    cancelled = [r for r in recs if r["error_kind"] == "cancelled"]
    assert 1 <= len(cancelled) <= 4  # streams mid-request at the interrupt: each has exactly one record
    assert all(r["chunk_ns"] is not None and r["sent_ns"] for r in cancelled)


def test_a_worker_interrupted_before_the_start_ends_at_once(fast_server):
    """Ctrl-C while workers start (before every one is ready, so no start time was sent): each worker must end on
    `abort` rather than wait forever for a start that never comes (the parent waits for every worker)."""
    from wattbench_agent.loadgen import LoadSpec

    spec = LoadSpec(url=fast_server, model="m", concurrency=2, output_tokens=4, duration_s=600)
    p = subprocess.Popen(
        [sys.executable, "-m", "wattbench_agent.loadgen.worker"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    p.stdin.write(json.dumps({"spec": spec.to_dict(), "lp": "lp", "wk": 0, "nw": 2, "verify": False}) + "\n")
    p.stdin.flush()
    assert json.loads(p.stdout.readline()) == {"ready": True}  # waiting for the start time now
    p.stdin.write("abort\n")
    p.stdin.flush()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"done": None}  # nothing was sent, nothing recorded
