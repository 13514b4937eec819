"""How fast the CLI's read-only commands answer (run: python -m benchmarks.cli_startup; part of `make bench`).

Each command runs N times in a fresh process (the `wattbench` console script of this interpreter's environment) on
each of two warehouses made here: "small", one synthetic run of two engines x one point x three repeats, ingested
from a real bundle; "h200", the five measured H200 vLLM runs kept in results/h200-vllm/ (bundle-*.tar.xz: 30,313
requests with their per-token times, GPU samples and engine scrapes), ingested as `wattbench ingest` would: a
warehouse with data, like the one `make run` leaves. `--db PATH` adds another (e.g. report_scale.py's 10M one, kept
with --keep). Wall time per process (start to exit, perf_counter around subprocess.run), median with min, max and the
interquartile range, against the target of 0.5 s (issue 18, item 5), and the median CPU seconds of the process
(user + system: what the command costs, without the waiting for a core that a busy machine adds to wall time).
One more run of each command under `python -X importtime` lists which heavy modules it imported (dagster,
great_expectations, pandas, matplotlib, altair, numpy, and the duckdb package: `sql` and `report` need only its
engine, _duckdb): a fact next to the timing. `--compare EXE` times another
wattbench (e.g. an older checkout's) the same way, in turns with this one, on the small and H200 warehouses made by
that checkout's own code (a warehouse keeps the views it was made with), and with `--compare-db PATH` on that
checkout's copy of the --db warehouse. Writes results/cli_startup.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.5
HEAVY = ("dagster", "great_expectations", "pandas", "matplotlib", "altair", "numpy", "duckdb")
COMMANDS = {
    "sql select 1": ["sql", "select 1", "--db", "{db}"],
    "sql load_points": ["sql", "load_points", "--db", "{db}"],
    "report": ["report", "--db", "{db}"],
    "load --help": ["load", "--help"],
}


def make_warehouse(folder: Path) -> Path:
    """One synthetic run (tests/reports/synth.py: real bundle files, real ingest) in a fresh warehouse."""
    sys.path.insert(0, str(ROOT))
    from tests.reports.synth import Deployment, simple_point, started, write_run

    db = folder / "cli.duckdb"
    write_run(
        db,
        folder,
        "cli-bench",
        [
            Deployment("alpha", tp=2, points=[simple_point("c8", 5.0 + 0.1 * r, repeat=r + 1) for r in range(3)]),
            Deployment("beta", points=[simple_point("c8", 6.0 + 0.2 * r, repeat=r + 1) for r in range(3)]),
        ],
        started=started(0),
    )
    return db


H200_BUNDLES = ROOT / "results" / "h200-vllm"


def make_h200_warehouse(folder: Path) -> Path:
    """The measured H200 vLLM runs kept in the repository, each bundle ingested (wattbench.warehouse.ingest_bundle)."""
    sys.path.insert(0, str(ROOT))
    from wattbench.warehouse import connect, ingest_bundle
    from wattbench_agent.bundle import unpacked

    db = folder / "h200.duckdb"
    with connect(db) as con:
        for bundle in sorted(H200_BUNDLES.glob("bundle-*.tar.xz")):
            with unpacked(bundle) as unpacked_folder:
                ingest_bundle(con, unpacked_folder)
    return db


def warehouse_facts(db: Path) -> dict:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "load_runs", "requests", "gpu_samples")
        } | {"mb": round(db.stat().st_size / 1e6, 1)}
    finally:
        con.close()


def _argv(exe: str, cmd: list[str], db: Path) -> list[str]:
    return [exe, *(a.format(db=db) for a in cmd)]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_commands(targets: list[tuple[str, Path, Path]], cmd: list[str], repeats: int) -> list[dict]:
    """For each (wattbench, warehouse, cwd): the wall seconds of each fresh process and the CPU seconds it used (user +
    system, its threads included): on a shared machine the wall time also holds the time spent waiting for a core,
    the CPU time does not. Several targets run in turns (A B A B ...), so that they share the same minutes' load."""
    times: list[list[float]] = [[] for _ in targets]
    cpu: list[list[float]] = [[] for _ in targets]
    for _ in range(repeats):
        for k, (exe, db, cwd) in enumerate(targets):
            c0 = _children_cpu_s()
            t0 = time.perf_counter()
            proc = subprocess.run(_argv(exe, cmd, db), cwd=cwd, capture_output=True, text=True)
            times[k].append(time.perf_counter() - t0)
            cpu[k].append(_children_cpu_s() - c0)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(_argv(exe, cmd, db))}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}"
                )
    out = []
    for t, c in zip(times, cpu):
        q = statistics.quantiles(t, n=4) if len(t) >= 2 else [t[0]] * 3
        out.append(
            {
                "runs": repeats,
                "median_s": round(statistics.median(t), 4),
                "min_s": round(min(t), 4),
                "max_s": round(max(t), 4),
                "iqr_s": round(q[2] - q[0], 4),
                "times_s": [round(x, 4) for x in t],
                "cpu_median_s": round(statistics.median(c), 4),
                "cpu_s": [round(x, 4) for x in c],
            }
        )
    return out


def compare_warehouses(exe: str, folder: Path) -> dict[str, Path]:
    """The small and the H200 warehouses made by the other checkout's own code (its schema and views: a warehouse keeps
    the views it was made with, so timing an older wattbench on this checkout's warehouse would time these views)."""
    checkout = Path(exe).resolve().parents[2]  # <checkout>/.venv/bin/wattbench
    folder.mkdir(parents=True, exist_ok=True)
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, '.'); "
        "from benchmarks.cli_startup import make_warehouse, make_h200_warehouse; "
        f"make_warehouse(Path({str(folder)!r})); make_h200_warehouse(Path({str(folder)!r}))"
    )
    subprocess.run([str(Path(exe).with_name("python")), "-c", script], cwd=checkout, check=True, capture_output=True)
    return {"small": folder / "cli.duckdb", "h200": folder / "h200.duckdb"}


def heavy_imports(exe: str, cmd: list[str], db: Path, cwd: Path) -> list[str]:
    """The heavy top-level packages a command imports (python -X importtime of the console script)."""
    python = Path(exe).with_name("python")
    script = "import sys; from pipelines.cli import main; main(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    proc = subprocess.run(
        [str(python), "-X", "importtime", "-c", script, *_argv(exe, cmd, db)[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
    )
    seen = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            top = name.split(".")[0]
            if top in HEAVY:
                seen.add(top)
    return sorted(seen)


def markdown(result: dict, compare: str | None) -> str:
    """results/cli_startup.md: one row per warehouse and command, the figures of cli_startup.json."""
    m = result["machine"]
    lines = [
        "# CLI start-up (benchmarks/cli_startup.py)",
        "",
        f"Measured {result['measured_at']} on {m['cpus']} CPU cores, Python {m['python']}; 1-minute load average "
        f"{m['load_average_1_5_15_before'][0]} before, {m['load_average_1_5_15_after'][0]} after (above the core "
        "count, other work competed and the wall times are upper bounds). Each command in a fresh process: wall "
        "seconds start to exit, median [min, max] of "
        f"{next(iter(next(iter(result['warehouses'].values()))['commands'].values()))['runs']}, and the median CPU "
        f"seconds of the process (user + system). Target (issue 18): under {result['target_s']} s."
        + (
            f" before: {compare}, timed the same way in turns with these runs, on warehouses made by its own checkout"
            + (f" (given: {result['compare_db']})" if result.get("compare_db") else "")
            + "."
            if compare
            else ""
        ),
        "",
        "| warehouse | command | wall (s) | CPU (s) | heavy modules imported | target | before: wall, CPU (s) |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    for label, entry in result["warehouses"].items():
        for name, row in entry["commands"].items():
            was = f"{row['compare']['median_s']:.3f}, {row['compare']['cpu_median_s']:.3f}" if "compare" in row else "-"
            lines.append(
                f"| {label} ({entry['requests']:,} requests) | `wattbench {name}` | {row['median_s']:.3f} "
                f"[{row['min_s']:.3f}, {row['max_s']:.3f}] | {row['cpu_median_s']:.3f} | "
                f"{', '.join(row['heavy_modules_imported']) or 'none'} | {'met' if row['target_met'] else 'NOT met'} "
                f"| {was} |"
            )
    lines += ["", "Warehouses: " + "; ".join(f"{k}: {v['what']}" for k, v in result["warehouses"].items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cli_startup")
    ap.add_argument("--repeats", type=int, default=9, help="fresh processes per command")
    ap.add_argument("--exe", default=str(Path(sys.executable).with_name("wattbench")), help="the wattbench to time")
    ap.add_argument(
        "--compare", metavar="EXE", help="another wattbench to time the same way (e.g. an older checkout's)"
    )
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--db", help="also time the commands on this warehouse (read only)")
    ap.add_argument(
        "--compare-db",
        metavar="PATH",
        help="with --compare and --db: the other wattbench times the --db commands on this warehouse instead (the "
        "same data made or upgraded by its own checkout)",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        made = {
            "small": ("one synthetic run: 2 engines x 1 point x 3 repeats", make_warehouse(Path(tmp))),
            "h200": ("the five measured H200 vLLM runs of results/h200-vllm/", make_h200_warehouse(Path(tmp))),
        }
        if args.db:
            made["given"] = (f"--db {args.db}", Path(args.db))
        result = {
            "what": "wall time of one `wattbench COMMAND` process, start to exit, on each warehouse",
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "load_average_1_5_15_before": [round(x, 2) for x in os.getloadavg()],
            },
            "target_s": TARGET_S,
            **({"compare_db": args.compare_db} if args.compare and args.db and args.compare_db else {}),
            "warehouses": {},
        }
        theirs = compare_warehouses(args.compare, Path(tmp) / "compare") if args.compare else {}
        if args.compare and args.db and args.compare_db:
            theirs["given"] = Path(args.compare_db)
        for label, (what, db) in made.items():
            entry = {"what": what, **warehouse_facts(db), "commands": {}}
            for name, cmd in COMMANDS.items():
                if label != "small" and "{db}" not in " ".join(cmd):
                    continue  # a command that reads no warehouse is timed once
                targets = [(args.exe, db, ROOT)]
                if label in theirs:  # the other wattbench on its own warehouse, in turns with this one
                    targets.append((args.compare, theirs[label], Path(args.compare).resolve().parents[2]))
                row, *other = time_commands(targets, cmd, args.repeats)
                row["heavy_modules_imported"] = heavy_imports(args.exe, cmd, db, ROOT)
                row["target_met"] = row["median_s"] < TARGET_S
                if other:
                    made_by = str(theirs[label]) if label == "given" else "made by its own checkout"
                    row["compare"] = {"exe": args.compare, "warehouse": made_by, **other[0]}
                entry["commands"][name] = row
            result["warehouses"][label] = entry
    result["machine"]["load_average_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cli_startup.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "cli_startup.md").write_text(markdown(result, args.compare))
    ok = True
    for label, entry in result["warehouses"].items():
        for name, row in entry["commands"].items():
            ok &= row["target_met"] and not row["heavy_modules_imported"]
            other = f"; compared: {row['compare']['median_s']:.3f} s" if "compare" in row else ""
            print(
                f"[{label}] wattbench {name}: median {row['median_s']:.3f} s (min {row['min_s']:.3f}, max "
                f"{row['max_s']:.3f}, IQR {row['iqr_s']:.3f}; CPU {row['cpu_median_s']:.3f} s) over {row['runs']} "
                f"processes; heavy imports: {', '.join(row['heavy_modules_imported']) or 'none'}{other}; target "
                f"{TARGET_S} s: {'met' if row['target_met'] else 'NOT met'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
