"""A cancel (Ctrl-C) that lands on a request just as its response head arrives must still cancel it. Python 3.11's
asyncio.wait_for returned the response instead, and the stream went on sending requests after the interrupt
(`wattbench load` then ran until its duration); the transport waits with asyncio.timeout, which keeps the cancel."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from wattbench_agent.loadgen.transport import FastTransport


class _HeadArrivesLater:
    """A connection whose response head arrives on the next turn of the event loop."""

    got_bytes = True
    closed = False

    def __init__(self) -> None:
        self.aborted = False

    def send(self, raw: bytes, fut: asyncio.Future) -> int:
        asyncio.get_running_loop().call_soon(fut.set_result, (200, [], None))
        return 0

    def _abort(self) -> None:
        self.aborted = True


@pytest.mark.parametrize("read_timeout", [30.0, None])
def test_a_cancel_that_meets_the_response_head_is_not_lost(read_timeout):
    async def main() -> tuple[bool, bool]:
        tr = FastTransport()
        conn = _HeadArrivesLater()

        async def connect(key, timeout):
            return conn

        tr._connect = connect
        req = httpx.Request("POST", "http://127.0.0.1:9/v1/completions", content=b"{}")
        req.extensions["timeout"] = {"read": read_timeout}
        task = asyncio.get_running_loop().create_task(tr.handle_async_request(req))
        await asyncio.sleep(0)  # the task sends and waits; the head's arrival is scheduled
        await asyncio.sleep(0)  # the head arrives; the task's wake-up (or wait_for's relay) is scheduled
        task.cancel()  # Ctrl-C, between the head's arrival and the task resuming
        try:
            await task
        except asyncio.CancelledError:
            return True, conn.aborted
        return False, conn.aborted

    cancelled, aborted = asyncio.run(main())
    assert cancelled, "the cancel was swallowed: the request went on as if nothing happened"
    assert aborted  # the half-used connection is not reused
