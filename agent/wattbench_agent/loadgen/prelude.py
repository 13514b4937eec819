"""What a load point does before its clock starts (run_load, before t0; nothing here is measured):

1. the ready check (`ready_check_timeout_s`, vllm bench serve's --ready-check-timeout-sec): the point's first
   request, retried every 5 s until it succeeds, up to that long; never answered: one line, nothing sent after;
2. the prompt length calibration of synthetic prompts (prompt_length.py), carried on in the spec;
3. `num_warmups` warm-up requests (vllm bench serve's --num-warmups): the first request that many times, at most
   `concurrency` at once, as vLLM sends them; their outcome is counted in the summary (`warmup_requests`), their
   records are not kept.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

READY_RETRY_S = 5.0  # vLLM's wait_for_endpoint retry interval


class NotReady(RuntimeError):
    """The server did not answer the ready check in time (one line)."""


def call_in_thread(fn: Callable[[], Any], name: str) -> Any:
    """fn() on a thread of its own, its result returned or its exception raised here (a caller inside an event loop
    cannot run another loop in its own thread: run_load may be called inside one)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["exc"] = exc

    th = threading.Thread(target=target, name=name, daemon=True)
    th.start()
    th.join()
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def _in_thread(coro_fn) -> Any:
    """Run an async function on a loop of its own, in a thread."""
    return call_in_thread(lambda: asyncio.run(coro_fn()), "wattbench-prelude")


def _first(spec: Any, tok) -> tuple[bytes, int, int]:
    from .client import RequestRunner
    from .workload import Workload

    it = Workload(spec, tok, n_hint=1).item(0)
    body = RequestRunner(spec, None, "prelude", tok).encode(it.prompt, it.output_tokens)
    return body, it.input_tokens, it.output_tokens


def ready_check(spec: Any, tok, verify: Any) -> dict:
    """The first request until it succeeds (every READY_RETRY_S), up to spec.ready_check_timeout_s."""
    import httpx

    from .client import RequestRunner

    body, n_in, n_out = _first(spec, tok)
    deadline = time.monotonic() + spec.ready_check_timeout_s
    tries = 0

    async def go() -> dict:
        nonlocal tries
        async with httpx.AsyncClient(timeout=spec.timeout_s, verify=verify) as client:
            runner = RequestRunner(spec, client, "ready-check", tok)
            while True:
                tries += 1
                rec = await runner.run("ready", body, n_in, n_out, 0)
                left = deadline - time.monotonic()
                if rec["error_kind"] is None or left <= 0:
                    return rec
                await asyncio.sleep(min(READY_RETRY_S, left))

    began = time.monotonic()
    rec = _in_thread(go)
    if rec["error_kind"] is not None:
        raise NotReady(
            f"the server did not answer a test request within --ready-check-timeout-sec {spec.ready_check_timeout_s:g}"
            f" ({tries} tries; the last: {rec['error_kind']}: {' '.join(str(rec['error_text']).split())[:200]})"
        )
    return {"tries": tries, "waited_s": round(time.monotonic() - began, 3)}


def warmups(spec: Any, tok, verify: Any) -> dict:
    """spec.num_warmups copies of the first request, at most spec.concurrency at once (all at once without)."""
    import httpx

    from .client import RequestRunner

    body, n_in, n_out = _first(spec, tok)

    async def go() -> list[dict]:
        cap = asyncio.Semaphore(spec.concurrency or spec.num_warmups)
        async with httpx.AsyncClient(
            timeout=spec.timeout_s, verify=verify, limits=httpx.Limits(max_connections=None)
        ) as client:
            runner = RequestRunner(spec, client, "warmup", tok)

            async def one(k: int) -> dict:
                async with cap:
                    return await runner.run(f"warmup{k}", body, n_in, n_out, 0)

            return await asyncio.gather(*(one(k) for k in range(spec.num_warmups)))

    began = time.monotonic()
    recs = _in_thread(go)
    failed = [r for r in recs if r["error_kind"]]
    out = {"sent": len(recs), "failed": len(failed), "s": round(time.monotonic() - began, 3)}
    if failed:
        out["first_error"] = f"{failed[0]['error_kind']}: {str(failed[0]['error_text'])[:200]}"
    return out


def run(spec: Any, tok, verify: Any) -> tuple[Any, dict]:
    """The spec to run (its prompt calibration filled in) and what was done before t0, for the summary."""
    from . import prompt_length

    info: dict[str, Any] = {}
    if spec.ready_check_timeout_s > 0:
        info["ready_check"] = ready_check(spec, tok, verify)
    if spec.prompt_calibration is None and prompt_length.synthetic(spec):
        cal = prompt_length.calibrate(spec, verify) if tok is None else prompt_length.Calibration("tokenizer")
        spec = spec.replace(prompt_calibration=cal.as_dict())
    if spec.num_warmups:
        info["warmup_requests"] = warmups(spec, tok, verify)
    return spec, info
