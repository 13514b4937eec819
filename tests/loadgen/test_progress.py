"""`wattbench load`'s progress display: rich's bar on a terminal, plain lines (no carriage return) anywhere else."""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import dataclass

from wattbench_agent.loadgen.progress import Progress
from wattbench_agent.loadgen.result import UNTIL_SENT_S

from .conftest import ROOT


@dataclass
class Counts:
    done: int = 0
    failed: int = 0


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_each_update_is_a_line():
    out = io.StringIO()
    p = Progress(10.0, True, stream=out, line_every_s=0)
    sink = Counts()
    for i, phase in enumerate(["warmup", "steady", "steady", "drain"]):
        sink.done = 10 * i
        p.show(float(i), sink, 4, phase)
    p.finish()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 4 and all(line.startswith("wattbench load: ") for line in lines)
    assert "0.0/10 s warmup" in lines[0] and "done      30" in lines[3] and "drain" in lines[3]


def test_without_a_terminal_lines_are_spaced_but_phases_and_the_end_always_shown():
    out = io.StringIO()
    p = Progress(60.0, True, stream=out)  # LINE_EVERY_S = 5
    sink = Counts()
    t = 0.0
    while t <= 12.0:  # the runner's cadence: every 0.5 s
        sink.done += 1
        p.show(t, sink, 2, "warmup" if t < 2 else "steady")
        t += 0.5
    p.finish()
    lines = out.getvalue().splitlines()
    # 0 s (first), 2 s (steady begins), 7 s and 12 s (5 s apart): 4 lines, not 25
    assert [line.split("/")[0].split()[-1] for line in lines] == ["0.0", "2.0", "7.0", "12.0"]
    out2 = io.StringIO()
    p2 = Progress(60.0, True, stream=out2)
    p2.show(0.0, sink, 0, "run")
    p2.show(1.0, sink, 0, "run")  # not written yet (spacing): finish() writes it
    p2.finish()
    assert [line.split("/")[0].split()[-1] for line in out2.getvalue().splitlines()] == ["0.0", "1.0"]


def test_until_sent_points_count_requests():
    out = io.StringIO()
    p = Progress(UNTIL_SENT_S, True, stream=out, max_requests=50, line_every_s=0)
    p.show(1.5, Counts(done=20, failed=5), 3, "steady")
    assert "25/50 requests" in out.getvalue()


def test_on_a_terminal_the_bar_is_rich():
    out = Terminal()
    p = Progress(10.0, True, stream=out)
    p.show(5.0, Counts(done=7), 3, "steady")
    p.show(10.0, Counts(done=9), 0, "done")
    p.finish()
    text = out.getvalue()
    assert "10.0/10 s" in text and "done       9 failed" in text
    assert "\x1b[" in text  # rich's control sequences: a live bar, not lines


def test_disabled_writes_nothing():
    out = Terminal()
    p = Progress(10.0, False, stream=out)
    p.show(1.0, Counts(), 0, "steady")
    p.finish()
    assert out.getvalue() == ""


def test_cli_progress_in_a_log_has_no_carriage_return(fast_server):
    """`wattbench load` with stderr to a pipe (as CI captures it): progress as lines, no \\r."""
    p = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "load", "--url", fast_server, "--model", "m", "--concurrency", "2"]
        + ["--input-tokens", "16", "--output-tokens", "4", "--duration", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "\r" not in p.stderr
    progress = [line for line in p.stderr.splitlines() if line.startswith("wattbench load: ")]
    assert progress and "done" in progress[-1]


@dataclass
class Recorded(Counts):
    records: list | None = None


def test_the_line_shows_live_ttft_tpot_and_the_achieved_rate():
    """Issue 39 item 7: as guidellm's progress does, each update shows the median TTFT and TPOT of the latest answers
    (failed ones left out) and the achieved rate: requests sent per second so far (answered + in flight)."""
    out = io.StringIO()
    p = Progress(10.0, True, stream=out, line_every_s=0)
    recs = [{"error_kind": None, "ttft_ms": t, "tpot_ms": t / 10} for t in (10.0, 20.0, 30.0)]
    recs.append({"error_kind": "timeout", "ttft_ms": None, "tpot_ms": None})
    p.show(2.0, Recorded(done=3, failed=1, records=recs), 4, "steady")
    line = out.getvalue().splitlines()[0]
    assert "TTFT p50 20 ms" in line and "TPOT p50 2 ms" in line and "rate 4 req/s" in line  # (3 + 1 + 4) / 2 s
    p.show(3.0, Recorded(done=0, failed=0, records=[]), 0, "warmup")
    assert "TTFT p50 - TPOT p50 - rate 0 req/s" in out.getvalue().splitlines()[1]
