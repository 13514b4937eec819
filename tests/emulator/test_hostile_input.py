"""Bad bytes must not hang or kill the emulator: every malformed request gets one clear HTTP error, the server
keeps answering /health, and SIGTERM still stops it. Each case was probed on the old server (issue 17, item 3)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.emulator.conftest import ROOT, start_emulator, stop

MODEL = "llama-3.1-8b"


@pytest.fixture
def emulator():
    """A fresh emulator per test: a case that wedges the server must not spill into the next test."""
    proc, url = start_emulator("--profile", "vllm-like", "--model", MODEL, "--gpu", "h100-sxm", "--tp", "1")
    yield proc, url
    stop(proc)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def exchange(url: str, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes or `timeout` passes; returns what came back."""
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=timeout) as sock:
        sock.sendall(raw)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                part = sock.recv(65536)
            except TimeoutError:
                break
            if not part:
                break
            out += part
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                length = [
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ]
                if length and len(body) >= length[0]:
                    break
        return out


def status_and_body(response: bytes) -> tuple[int, dict]:
    assert response, "no response: the server did not answer"
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.strip() else {}


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def assert_still_serving(proc: subprocess.Popen, url: str) -> None:
    assert proc.poll() is None, f"the emulator died (exit {proc.returncode})"
    assert healthy(url), "the emulator stopped answering /health"
    proc.terminate()  # and SIGTERM still stops it
    assert proc.wait(timeout=10) == 0


def post(path: str, headers: list[str], body: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


def spinning_head() -> bytes:
    """A head whose negative Content-Length is minus its own length plus 4: the old parser kept the buffer as it was
    (buf[i + 4 + n:] == buf[0:]) and answered the same request forever in one callback (100% CPU, /health and SIGTERM
    never served). The issue's probe was this with -43."""
    for n in range(40, 60):
        head = f"GET /health HTTP/1.1\r\nContent-Length: -{n}"
        if len(head) + 4 == n:
            return head.encode() + b"\r\n\r\n"
    raise AssertionError("no such head")


@pytest.mark.parametrize(
    "raw", [spinning_head(), post("/v1/chat/completions", ["Content-Length: -43"])], ids=["spinning", "plain"]
)
def test_negative_content_length_is_refused(emulator, raw):
    proc, url = emulator
    status, body = status_and_body(exchange(url, raw))
    assert status == 400 and "Content-Length" in body["error"]["message"]
    assert "non-negative integer" in body["error"]["message"]
    assert_still_serving(proc, url)


@pytest.mark.parametrize("value", ["abc", "12abc", "1e3", "+5", " "])
def test_content_length_that_is_not_a_number_is_refused(emulator, value):
    proc, url = emulator
    status, body = status_and_body(exchange(url, post("/v1/completions", [f"Content-Length: {value}"])))
    assert status == 400 and "Content-Length" in body["error"]["message"]
    assert_still_serving(proc, url)


def test_two_content_lengths_that_disagree_are_refused(emulator):
    proc, url = emulator
    raw = post("/v1/completions", ["Content-Length: 2", "Content-Length: 3"], b"{}")
    status, _ = status_and_body(exchange(url, raw))
    assert status == 400
    assert_still_serving(proc, url)


def test_a_body_over_the_limit_is_refused_before_it_is_read(emulator):
    proc, url = emulator
    # only the headers are sent: the server must answer from the header alone, not wait for 1 GB
    status, body = status_and_body(exchange(url, post("/v1/chat/completions", ["Content-Length: 1000000000"])))
    assert status == 413 and "MiB" in body["error"]["message"]
    assert_still_serving(proc, url)


@pytest.mark.parametrize(
    "field, value",
    [
        ("n", "abc"),
        ("n", [1]),
        ("min_tokens", "x"),
        ("max_tokens", "ten"),
        ("stream_options", "yes"),
        ("messages", [{"role": "user", "content": 5}]),
    ],
)
def test_fields_of_the_wrong_type_get_a_400_naming_the_field(emulator, field, value):
    proc, url = emulator
    req = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, field: value}
    r = httpx.post(url + "/v1/chat/completions", json=req, timeout=5)
    if field == "messages":  # content that is not text is read as its string form, as vLLM does for numbers
        assert r.status_code == 200
    else:
        assert r.status_code == 400, r.text
        assert field in r.json()["error"]["message"]
    assert_still_serving(proc, url)


def test_garbage_and_binary_bytes_get_a_400_and_the_server_goes_on(emulator):
    proc, url = emulator
    for raw in (
        b"\x00\xff\xfe\xfd\r\n\r\n",
        b"GET\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 4\r\n\r\n\xff\xfe\x00{",
    ):
        status, _ = status_and_body(exchange(url, raw))
        assert status == 400
    assert_still_serving(proc, url)


def test_a_client_hanging_up_on_pipelined_requests_does_not_kill_it(emulator):
    """Pipelined requests, then the client closes at once: the server's second write meets a reset connection
    (EPIPE). With SIGPIPE at its default disposition that killed the process (exit -13)."""
    proc, url = emulator
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port_of(url))) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
        time.sleep(0.02)
        assert proc.poll() is None, f"the emulator died (exit {proc.returncode})"
    assert_still_serving(proc, url)


@pytest.mark.parametrize("port", ["99999", "-1", "65536", "http"])
def test_a_port_out_of_range_is_refused(port):
    r = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "emulate", "--model", MODEL, "--port", port],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert "--port" in r.stderr and "0-65535" in r.stderr
    assert "listening" not in r.stderr


@pytest.mark.parametrize(
    "item, says",
    [
        ("max_num_seqs=1e400", "config key 'max_num_seqs' = inf; expected an integer from 1 to 2,147,483,647"),
        ("max_num_seqs=nan", "config key 'max_num_seqs' = nan; expected an integer from 1 to 2,147,483,647"),
        ("max_num_seqs=3000000000", "= 3000000000; expected an integer from 1 to 2,147,483,647"),
        ("block_size=0", "config key 'block_size' = 0; expected an integer from 1 to 2,147,483,647"),
        ("kv_cache_memory_bytes=1e400", "config key 'kv_cache_memory_bytes' = inf; expected a finite number"),
    ],
)
def test_a_config_value_past_its_range_is_one_line(item, says):
    """`wattbench emulate --config max_num_seqs=1e400` was an OverflowError traceback (nan a ValueError one)."""
    r = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "emulate", "--model", MODEL, "--config", item, "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert says in line, line
