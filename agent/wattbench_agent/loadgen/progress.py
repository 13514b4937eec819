"""`wattbench load`'s progress display (on stderr): rich's progress bar on a terminal; elsewhere (CI logs, a file,
a pipe) one plain line per update, at most one every LINE_EVERY_S seconds and at each change of phase, and never a
carriage return. rich loads only when a terminal shows the bar."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from .result import UNTIL_SENT_S

LINE_EVERY_S = 5.0  # without a terminal: the least time between two lines (a change of phase always gets one)
BAR_WIDTH = 28
LIVE_RECORDS = 256  # the live TTFT and TPOT medians are over the latest answers, as guidellm's display shows them


def live_figures(elapsed_s: float, sink: Any, inflight: int) -> str:
    """What the load looks like now, as guidellm's progress shows it: the median TTFT and TPOT of the latest
    LIVE_RECORDS successful answers and the achieved rate, requests sent per second since the start (with worker
    processes the parent sees no request in flight: answered per second)."""
    from statistics import median

    recent = [r for r in getattr(sink, "records", [])[-LIVE_RECORDS:] if r.get("error_kind") is None]
    ttft = [r["ttft_ms"] for r in recent if r.get("ttft_ms") is not None]
    tpot = [r["tpot_ms"] for r in recent if r.get("tpot_ms") is not None]
    sent = sink.done + sink.failed + inflight
    rate = sent / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"TTFT p50 {_ms(median(ttft) if ttft else None)} TPOT p50 {_ms(median(tpot) if tpot else None)} "
        f"rate {rate:.3g} req/s"
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g} ms"


class Progress:
    """Shows a load point's progress: `show(elapsed_s, sink, inflight, phase)` on each update (the runner calls it
    every 0.5 s), `finish()` once at the end. `sink` is the runner's record sink (its `done` and `failed` counts).
    With `max_requests` (a point that sends until every request is sent) progress counts requests, else seconds."""

    def __init__(
        self,
        total_s: float,
        enabled: bool,
        stream: TextIO | None = None,
        max_requests: int | None = None,
        line_every_s: float = LINE_EVERY_S,
    ):
        self.total_s = max(total_s, 1e-9)
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.max_requests = max_requests if total_s >= UNTIL_SENT_S else None  # "until sent": count requests
        self.line_every_s = line_every_s
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar: Any = None  # rich.progress.Progress, started on the first update
        self._task: Any = None
        self._last_line_s: float | None = None
        self._last_phase: str | None = None
        self._last: tuple | None = None

    def _counts(self, elapsed_s: float, sink: Any) -> tuple[int, float, str]:
        n = sink.done + sink.failed
        frac = min(n / self.max_requests if self.max_requests else elapsed_s / self.total_s, 1.0)
        total = (
            f"{n}/{self.max_requests} requests, {elapsed_s:6.1f} s"
            if self.max_requests
            else f"{elapsed_s:6.1f}/{self.total_s:.0f} s"
        )
        return n, frac, total

    def show(self, elapsed_s: float, sink: Any, inflight: int, phase: str) -> None:
        if not self.enabled:
            return
        _, frac, total = self._counts(elapsed_s, sink)
        status = f"{phase:<7} done {sink.done:>7} failed {sink.failed:>5} in flight {inflight:>5}  " + live_figures(
            elapsed_s, sink, inflight
        )
        self._last = (elapsed_s, frac, total, status)
        if self.terminal:
            self._show_bar(frac, total, status)
            return
        due = self._last_line_s is None or elapsed_s - self._last_line_s >= self.line_every_s
        if due or phase != self._last_phase:
            self._line(total, status)
            self._last_line_s = elapsed_s
        self._last_phase = phase

    def _line(self, total: str, status: str) -> None:
        self.stream.write(f"wattbench load: {total.strip()} {status}\n")
        self.stream.flush()

    def _show_bar(self, frac: float, total: str, status: str) -> None:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress

            # refreshed by show() only: no refresh thread beside the load generator's event loop
            self._bar = RichProgress(
                BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.fields[summary]} {task.fields[status]}"),
                console=Console(file=self.stream),
                auto_refresh=False,
            )
            self._task = self._bar.add_task("load", total=1.0, summary="", status="")
            self._bar.start()
        self._bar.update(self._task, completed=frac, summary=total, status=status)
        self._bar.refresh()

    def finish(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.refresh()
            self._bar.stop()
            self._bar = None
        elif not self.terminal and self._last is not None and self._last_line_s != self._last[0]:
            self._line(self._last[2], self._last[3])  # the last update, if it was not written yet
