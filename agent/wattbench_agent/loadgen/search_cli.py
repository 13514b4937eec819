"""`wattbench load --search rate|concurrency`: the SLO capacity search on its own, against any OpenAI-compatible
server (loadgen/search.py; docs/LOADGEN.md, "SLO capacity search").

    wattbench load --url http://127.0.0.1:8000 --search rate --goodput ttft:2000 tpot:100 --slo-attainment 0.99

Each probe is printed as it ends and one plain-language answer at the end; `--json` prints one line whose `capacity`
object holds value, lo, hi, binding and probes; `--save-result` writes the search with every probe's summary. Exit
0 with an answer (a capacity, "at least", or "no load meets it"); 1 when the server stopped answering or refused
every request (the probes measured until then are kept: printed, in --out and in the result file); 2 for bad flags.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .endpoint import models_url
from .spec import LoadSpecError

# .search (numpy) and httpx load when a search runs: `wattbench load --help` imports neither


def register(p) -> None:
    s = p.add_argument_group(
        "SLO capacity search",
        "find the highest load meeting the SLO (--goodput, --slo-attainment): bracket, bisect to --search-tolerance, "
        "then --search-repeats windows at the load found and one step below (docs/LOADGEN.md)",
    )
    s.add_argument(
        "--search",
        choices=("rate", "concurrency"),
        help="search request rate (open loop: poisson, gamma with --burstiness) or concurrency (closed loop); "
        "--rate / --concurrency give the first probe's load",
    )
    s.add_argument(
        "--slo-attainment",
        type=float,
        default=0.99,
        help="share of a probe's requests that must succeed and meet every --goodput bound (default 0.99)",
    )
    s.add_argument("--search-min", type=float, help="lowest load probed (default 0.1 req/s, 1 stream)")
    s.add_argument("--search-max", type=float, help="highest load probed (default 1000 req/s, 1024 streams)")
    s.add_argument("--search-growth", type=float, default=2.0, help="bracket step: load x this (default 2)")
    s.add_argument(
        "--search-tolerance",
        type=float,
        default=0.1,
        help="relative width at which bisection stops (default 0.1; concurrency: also neighbouring counts)",
    )
    s.add_argument(
        "--search-repeats", type=int, default=3, help="windows at the load found and one step below (default 3)"
    )
    s.add_argument("--search-max-probes", type=int, default=24, help="probes at most, repeats included (default 24)")
    s.add_argument(
        "--search-max-time", type=float, default=3600.0, help="seconds the whole search may take (default 3600)"
    )
    s.add_argument(
        "--no-early-stop",
        action="store_true",
        help="run every open-loop probe to the end of its window, even when its queue grows without bound",
    )


def search_spec(a, slo: dict, start: float | None):
    from .search import SearchError, SearchSpec

    if not slo:
        raise SearchError("--search needs an SLO: --goodput ttft:MS tpot:MS e2el:MS (at least one of them)")
    return SearchSpec.from_dict(
        {
            "over": a.search,
            "slo": slo,
            "attainment": a.slo_attainment,
            "start": start,
            "min_load": a.search_min,
            "max_load": a.search_max,
            "growth": a.search_growth,
            "tolerance": a.search_tolerance,
            "repeats": a.search_repeats,
            "max_probes": a.search_max_probes,
            "max_time_s": a.search_max_time,
            "early_stop": not a.no_early_stop,
        }
    )


def start_load(a) -> float | None:
    """The first probe's load from --rate / --concurrency (one number), or None (the search's default)."""
    text = a.rate if a.search == "rate" else a.concurrency
    other = a.concurrency if a.search == "rate" else a.rate
    if other is not None:
        flag = "--concurrency" if a.search == "rate" else "--rate"
        raise ValueError(f"--search {a.search} varies the {a.search}: {flag} does not go with it")
    if a.trace_path:
        raise ValueError("--search sends its own arrivals: --trace does not go with it")
    if text is None:
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"--{a.search} {text!r} with --search: expected one number, the first probe's load") from None
    return value


def server_answers(url: str, headers: dict) -> bool:
    """Whether the server still answers its model list (asked after a probe whose requests failed)."""
    from wattbench_agent.fetch import FetchError, status

    try:
        return status(models_url(url), headers=headers, timeout_s=5.0) < 500
    except FetchError:
        return False


def main(a, url: str, api: str, model: str, slo: dict, base_spec, headers: dict, meter=None) -> int:
    """Run the search; the exit code (0 answered, 1 the search could not finish). `meter` (loadgen/energy.py, opened):
    every probe's window energy, and the figures at the capacity with their intervals."""
    from .runner import run_load
    from .search import SearchError, answer, check_base, run_search

    try:
        start = start_load(a)
        search = search_spec(a, slo, start)
        start, _, _ = search.bounds()
        over = {"concurrency": int(start)} if a.search == "concurrency" else {"rate": float(start)}
        shape = (
            "concurrency" if a.search == "concurrency" else ("gamma" if a.burstiness not in (None, 1.0) else "poisson")
        )
        base = base_spec(shape=shape, **over)
        check_base(base, a.search)
    except (LoadSpecError, SearchError, ValueError) as exc:
        print(f"wattbench load: {exc}", file=sys.stderr)
        return 2
    out_path = Path(a.out) if a.out else None
    say = sys.stderr if a.json else sys.stdout
    print(
        f"wattbench load: searching {a.search} for the highest load meeting {search.slo_text()} at {url} "
        f"(windows of {base.duration_s:g} s after {base.warmup_s:g} s warm-up; at most {search.max_probes} probes, "
        f"{search.max_time_s:g} s)",
        file=say,
        flush=True,
    )

    def measure(spec, probe, on_record=None, stop_event=None):
        lp = spec.load_point_id or f"search-p{probe.index}-" + (
            f"c{int(probe.load)}" if a.search == "concurrency" else f"r{probe.load:g}"
        )
        start, end = meter.callbacks(lp) if meter is not None else (None, None)
        return run_load(
            spec.replace(load_point_id=lp + (f"#{probe.repeat}" if probe.repeat > 1 else "")),
            out=out_path,
            progress=False,
            workers=a.workers,
            slo=search.slo,
            on_record=on_record,
            stop_event=stop_event,
            on_window_start=start,
            on_window_end=end,
        )

    began = time.strftime("%Y%m%d-%H%M%S")
    result = run_search(
        base,
        search,
        measure,
        server_ok=lambda: server_answers(url, headers),
        log=lambda line: print(line, file=say, flush=True),
    )
    text = answer(result)
    print(text, file=say, flush=True)
    if result.value is not None and meter is not None:
        print(result.figures_line(), file=say, flush=True)
    doc = search_document(result, base, url, api, model, began, a.label)
    if a.save_result or a.save_detailed:
        name = a.result_filename or f"{a.label or 'wattbench'}-search-{a.search}-{model.split('/')[-1]}-{began}.json"
        path = Path(a.result_dir or ".") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc) + "\n", encoding="utf-8")
        print(f"wattbench load: search written to {path} (every probe's summary)", file=sys.stderr)
    if out_path is not None:  # beside the records: `wattbench import` of --out files the search's answer with them
        from .replay import search_path

        search_path(out_path).write_text(json.dumps(doc) + "\n", encoding="utf-8")
    if a.json:
        print(json.dumps(doc, separators=(",", ":")))
    return 1 if result.failed else 0


def search_document(result, base, url: str, api: str, model: str, began: str, label: str | None) -> dict:
    """The search as `--json` prints it and `--save-result` saves it: its answer (the capacity object, with the
    figures at it), every probe in brief and in full (`probe_summaries`), and the searches row the warehouse keeps
    (`wattbench import` of the document files it as a run)."""
    from wattbench_agent.safety import redact_url

    from .result import default_workload
    from .search import search_row

    workload = base.workload or default_workload(base)
    return {
        "wattbench": {
            "what": "SLO capacity search (wattbench load --search); figures over each probe's window, "
            "docs/MEASUREMENT.md",
            "url": redact_url(url),
            "api": api,
            "model": model,
            "date": began,
            "label": label,
        },
        **result.to_dict(detailed=True),
        "searches_row": search_row(result, base, workload),
    }
