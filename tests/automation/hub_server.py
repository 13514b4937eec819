"""A local stand-in for the Hugging Face Hub's model list: a real http.server on 127.0.0.1 serving the hand-written
fixtures of data/hub_responses.json (not recordings of live responses; see the file's _about).

Tests script it per organisation: `hub.serve("meta-llama", "meta-llama/v2")` serves that fixture for
`GET /api/models?author=meta-llama...`; `hub.fail("Qwen", 429, retry_after="120")`, `hub.fail(..., 500)` and
`hub.stall(org, seconds)` make it misbehave; `hub.requests` records every query received (and its
Authorization header, under "authorization").
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = json.loads((Path(__file__).parent / "data" / "hub_responses.json").read_text())


class FakeHub:
    def __init__(self) -> None:
        self.routes: dict[str, dict] = {}
        self.requests: list[dict[str, list[str]]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                hub.requests.append({"path": [url.path], "authorization": [self.headers.get("Authorization")], **query})
                if url.path != "/api/models":
                    return self._send(404, {"error": "not found"})
                org = (query.get("author") or [""])[0]
                route = hub.routes.get(org, {"status": 200, "body": []})
                if route.get("stall_s"):
                    time.sleep(route["stall_s"])
                headers = dict(route.get("headers") or {})
                if route.get("next") and "cursor" not in query:
                    base = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
                    target = route.get("next_url") or f"{base}/api/models?author={org}&cursor=p2"
                    headers["Link"] = f'<{target}>; rel="next"'
                body = route["next"] if "cursor" in query and "next" in route else route.get("body", [])
                self._send(route.get("status", 200), body, headers)

            def _send(self, status: int, body, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, org: str, fixture: str, next_fixture: str | None = None, next_url: str | None = None) -> None:
        """`next_url`: where the Link rel="next" header points (default: this server's second page)."""
        self.routes[org] = {
            "status": 200,
            "body": FIXTURES[fixture],
            **({"next": FIXTURES[next_fixture]} if next_fixture else {}),
            **({"next_url": next_url} if next_url else {}),
        }

    def fail(self, org: str, status: int, retry_after: str | None = None) -> None:
        self.routes[org] = {
            "status": status,
            "body": {"error": "fixture failure"},
            "headers": {"Retry-After": retry_after} if retry_after else {},
        }

    def stall(self, org: str, seconds: float) -> None:
        self.routes[org] = {**self.routes.get(org, {"status": 200, "body": []}), "stall_s": seconds}
