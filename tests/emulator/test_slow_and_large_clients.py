"""Clients that send too much or too slowly must not stall the emulator for everyone else.

Probed on the old server: two clients sending 16 MiB prompts in a loop raised the TTFT p50 of a 4-stream load from
33 to 1,458 ms (each body was copied whole at every 64 KiB read, then split into 2.8 M words on the event loop);
connections sending half a request stayed open forever, so a slowloris client could hold every file descriptor.
Now: a body over 32 bytes per prompt token of the model (4 MiB for a 131,072-token model) is a 413 from its head;
a body is gathered in place and a large one decoded off the event loop, its words split no further than the model's
limit; a request must arrive whole within --request-timeout of its first byte (408), an idle kept-alive connection
is closed after --idle-timeout, and past the descriptor limit the connection idle longest makes room."""

from __future__ import annotations

import json
import os
import resource
import socket
import time

import httpx
import pytest

from tests.emulator.conftest import start_emulator, stop
from tests.emulator.test_hostile_input import MODEL, exchange, port_of, post, status_and_body

BASE = ("--profile", "vllm-like", "--model", MODEL, "--gpu", "h100-sxm", "--tp", "1")


@pytest.fixture
def emulator():
    proc, url = start_emulator(*BASE)
    yield proc, url
    stop(proc)


@pytest.fixture
def impatient():
    """An emulator that waits 1 s for a request to arrive and 1 s on an idle connection."""
    proc, url = start_emulator(*BASE, "--request-timeout", "1", "--idle-timeout", "1")
    yield proc, url
    stop(proc)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chat_body(words: int) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hello " * words}], "max_tokens": 4}
    ).encode()


def test_a_body_over_the_models_limit_is_a_413_from_its_head(emulator):
    proc, url = emulator
    head_only = post("/v1/chat/completions", [f"Content-Length: {5 * 2**20}"])
    status, body = status_and_body(exchange(url, head_only))
    assert status == 413 and "limit of 4 MiB" in body["error"]["message"], body
    assert httpx.get(url + "/health", timeout=5).status_code == 200


def test_a_large_body_costs_the_server_little_cpu_however_it_arrives(emulator):
    """A 3.9 MB prompt (680,000 words, over the model's 131,072 tokens) sent in 1 KiB pieces: refused with the
    model's limit, for a small fraction of a second of the server's CPU (it was over a second: the buffer was copied
    whole at each read, then every word split)."""
    proc, url = emulator
    body = chat_body(680_000)
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        before = cpu_seconds(proc.pid)
        sock.sendall(post("/v1/chat/completions", [f"Content-Length: {len(body)}"]))
        for i in range(0, len(body), 1024):
            sock.sendall(body[i : i + 1024])
            time.sleep(0.0002)  # the server reads the bytes as they come, as over a real network
        answer = sock.recv(65536)
        spent = cpu_seconds(proc.pid) - before
    status, message = status_and_body(answer)
    assert status == 400 and "maximum context length is 131072 tokens" in message["error"]["message"]
    print(f"server CPU for one 3.9 MB request: {spent:.2f} s")
    assert spent < 0.4, f"the server spent {spent:.2f} s of CPU on one 3.9 MB request"


def test_a_request_that_trickles_in_gets_a_408_and_is_closed(impatient):
    proc, url = impatient
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        got = b""
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                sock.sendall(b"X")  # a byte now and then: the slowloris way
            except OSError:
                break
            sock.settimeout(0.3)
            try:
                part = sock.recv(65536)
            except TimeoutError:
                continue
            if not part:
                break
            got += part
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert b"did not arrive whole within 1 s" in got
    assert httpx.get(url + "/health", timeout=5).status_code == 200


def test_an_idle_kept_alive_connection_is_closed(impatient):
    proc, url = impatient
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the server, not by the 10 s socket timeout
        assert time.monotonic() - started < 8


def test_half_open_connections_cannot_take_every_descriptor():
    """The emulator with 128 file descriptors and 150 connections that each sent half a request head (the default
    30 s request timeout: they are not timed out yet): a new client is still served, the oldest made room for it."""

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    proc, url = start_emulator(*BASE, preexec_fn=few_descriptors)
    socks = []
    try:
        for _ in range(150):
            sock = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            socks.append(sock)
        time.sleep(0.5)
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        socks[0].settimeout(5)
        assert socks[0].recv(100) == b""  # the first, idle longest, was closed to make room
    finally:
        for sock in socks:
            sock.close()
        stop(proc)
