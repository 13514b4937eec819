"""`wattbench load --plot-timeline`: vllm bench serve's request timeline (vllm/benchmarks/plot.py) as one HTML file
with an inline SVG, no plotting library: a row per request in send order, its TTFT in blue, then each gap between
content events coloured by `--timeline-itl-thresholds` (ms: green below the first, orange below the second, red
above; vLLM's colours), the measured window shaded. Consecutive gaps of one colour are drawn as one bar, so the
file grows with requests, not tokens. Each bar's tooltip says what it is; the page names the load point."""

from __future__ import annotations

import html
from pathlib import Path

COLORS = {"ttft": "#636EFA", "fast": "#109618", "mid": "#FF7F0E", "slow": "#D62728"}
ROW_PX, WIDTH_PX, LEFT_PX = 6, 1100, 60


def _thresholds(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in str(text).split(","))
    except ValueError:
        raise ValueError(f"--timeline-itl-thresholds {text!r}: expected two comma-separated milliseconds") from None
    return lo, hi


def _segments(rec: dict, lo_ms: float, hi_ms: float) -> list[tuple[int, int, str]]:
    """(start ns, end ns, colour key) of one request: its TTFT, then runs of same-coloured gaps."""
    ch = rec.get("chunk_ns") or []
    if rec.get("sent_ns") is None or not ch:
        return []
    out = [(rec["sent_ns"], ch[0], "ttft")]
    for a, b in zip(ch, ch[1:]):
        gap = (b - a) / 1e6
        key = "fast" if gap < lo_ms else "mid" if gap < hi_ms else "slow"
        if out[-1][2] == key and out[-1][1] == a:
            out[-1] = (out[-1][0], b, key)
        else:
            out.append((a, b, key))
    return out


def write_timeline(res, path: Path, thresholds: str = "25,50") -> Path:
    lo, hi = _thresholds(thresholds)
    recs = sorted((r for r in res.records if r.get("sent_ns") is not None), key=lambda r: r["sent_ns"])
    t0 = recs[0]["sent_ns"] if recs else res.window_start_ns
    ends = [max([r["sent_ns"], *(r.get("chunk_ns") or [])]) for r in recs] or [res.window_end_ns]
    span = max(max(ends), res.window_end_ns) - t0 or 1
    px = (WIDTH_PX - LEFT_PX) / span

    def x(ns: int) -> float:
        return LEFT_PX + (ns - t0) * px

    height = ROW_PX * max(len(recs), 1) + 30
    win = max(x(res.window_end_ns) - x(res.window_start_ns), 0)
    parts = [
        f'<rect x="{x(res.window_start_ns):.1f}" y="0" width="{win:.1f}" height="{height - 30}" fill="#eeeeee">'
        "<title>measured window</title></rect>"
    ]
    for row, r in enumerate(recs):
        y = row * ROW_PX
        for a, b, key in _segments(r, lo, hi):
            what = "TTFT" if key == "ttft" else f"ITL {'<' if key == 'fast' else '<' if key == 'mid' else '>='} "
            what += "" if key == "ttft" else f"{lo:g} ms" if key == "fast" else f"{hi:g} ms"
            tip = html.escape(f"request {r['request_id']}: {what}, {(b - a) / 1e6:.1f} ms from {(a - t0) / 1e9:.3f} s")
            parts.append(
                f'<rect x="{x(a):.1f}" y="{y}" width="{max((b - a) * px, 0.5):.1f}" height="{ROW_PX - 1}" '
                f'fill="{COLORS[key]}"><title>{tip}</title></rect>'
            )
        if r.get("error_kind"):
            parts.append(f'<circle cx="{x(r["sent_ns"]):.1f}" cy="{y + ROW_PX / 2}" r="2" fill="black"><title>'
                         f'{html.escape(str(r["error_kind"]))}</title></circle>')  # fmt: skip
    axis = "".join(
        f'<text x="{x(t0 + int(k * span / 10)):.0f}" y="{height - 12}" font-size="10">'
        f"{k * span / 10 / 1e9:.1f} s</text>"
        for k in range(11)
    )
    s = res.summary
    title = html.escape(f"{s.get('load_point_id')} ({s.get('shape')}, {s.get('api')}, {s.get('workload')})")
    legend = (
        f"TTFT <b style='color:{COLORS['ttft']}'>&#9632;</b> ITL &lt; {lo:g} ms <b style='color:{COLORS['fast']}'>"
        f"&#9632;</b> &lt; {hi:g} ms <b style='color:{COLORS['mid']}'>&#9632;</b> &ge; {hi:g} ms "
        f"<b style='color:{COLORS['slow']}'>&#9632;</b>; grey: the measured window; a dot: a failed request"
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>timeline {title}</title></head><body>"
        f"<h3>Request timeline: {title}</h3><p>{len(recs)} requests, one a row in send order. {legend}</p>"
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH_PX}' height='{height}'>{''.join(parts)}{axis}</svg>"
        "</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
