"""A loopback OpenAI-compatible streaming server that keeps every request it gets (path, headers, JSON body, arrival
time): what `wattbench load` sends is read from it, not assumed. Each answer streams `reply <n>` word by word
(max_tokens words at most, 4 by default), then a usage chunk whose prompt_tokens count the prompt's words (the
messages' words, plus one a message), then [DONE]. `fail_first` answers that many completion requests with 503
first; /tokenize and everything else answer 404."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Recorder:
    def __init__(self, fail_first: int = 0):
        self.requests: list[dict] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def completions(self) -> list[dict]:
        return [r for r in self.requests if r["path"].endswith("completions") and r["status"] == 200]


def _words(body: dict) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content") or "").split()) + 1 for m in body["messages"])
    return len(str(body.get("prompt") or "").split())


def _handler(rec: Recorder):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            if self.path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "rec-model", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def _send(self, status: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            chat = self.path.endswith("chat/completions")
            with rec.lock:
                n = len(rec.requests)
                fail = self.path.endswith("completions") and rec.fail_first > 0
                if fail:
                    rec.fail_first -= 1
                status = 503 if fail else 200 if self.path.endswith("completions") else 404
                rec.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body, "t": time.monotonic(),
                     "status": status}
                )  # fmt: skip
            if status != 200:
                self._send(status, {"error": {"message": "not ready" if fail else "not found"}})
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            out = int(body.get("max_completion_tokens") or body.get("max_tokens") or 4)
            words = ["reply", str(n), *(["more"] * max(out - 2, 0))][:out]
            for k, w in enumerate(words):
                text = (" " if k else "") + w
                delta = {"choices": [{"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}]}
                self._chunk(delta)
            usage = {"prompt_tokens": _words(body), "completion_tokens": len(words), "total_tokens": 0}
            self._chunk({"choices": [{"index": 0, "finish_reason": "length", **({"delta": {}} if chat else {})}]})
            self._chunk({"choices": [], "usage": usage})
            self._write(b"data: [DONE]\n\n")
            self._write(b"")

        def _chunk(self, obj: dict) -> None:
            self._write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def _write(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return H


def _self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by itself (no authority trusts it) and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = f"{folder}/cert.pem", f"{folder}/key.pem"
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


@contextmanager
def recording_server(fail_first: int = 0, tls_folder=None) -> Iterator[tuple[str, Recorder]]:
    """`tls_folder`: serve https with a self-signed certificate written there."""
    rec = Recorder(fail_first)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    if tls_folder is not None:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*_self_signed(tls_folder))
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"{'https' if tls_folder is not None else 'http'}://127.0.0.1:{srv.server_address[1]}", rec
    finally:
        srv.shutdown()
        srv.server_close()
