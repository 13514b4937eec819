"""Where a run's per-token times should live once ingested: what each layout costs to write, measured.

python -m benchmarks.token_storage [--requests 1000000]: the per-token times of a run (128 events a request, int64
times, int32 token counts: 128 M of each at 1M requests, the shape of benchmarks/warehouse_scale.py's bundles, made
here in numpy) written, each layout in a fresh process, as
- lists: requests' chunk_ns BIGINT[] / chunk_tokens INTEGER[] in the DuckDB file, from Arrow lists over the arrays
  (what ingest does: wattbench/chunk_files.py);
- flat: one DuckDB table of (request, event, t, n), appended from Arrow;
- parquet: the same flat table as a zstd Parquet file beside the warehouse (parquet_snappy: snappy, parquet_plain:
  uncompressed);
- copy: the bundle's two binary chunk files copied beside the warehouse as they are.
Each is timed to the end of a CHECKPOINT (DuckDB's compression is part of the cost), with its size on disk and the
process's peak RSS (which includes the 1.5 GB of arrays read first, at 1M requests), and the 1-minute load
average (the machine is shared: above 2 on 2 cores, other work competed). Then each layout is read back as the
token views read it (sql/views.sql v_itl: every gap of every request, its percentiles per load point of 25,000
requests), in a fresh process through a connection sandboxed as `wattbench sql`'s (wattbench/warehouse.py SANDBOX:
no external access), the Parquet layouts admitted by DuckDB's allowed_directories (set before the sandbox is locked):
the read's seconds say what a layout costs every report that reads token times (copy: not readable as a table).
Variants of the lists (each also read back as v_itl would read it), to learn what their cost depends on:
- lists_delta: each request's times as INTEGER gaps in ns from the event before (the first 0), the same information
  as the absolute times given the first; lists_delta64 the same as BIGINT; lists_offset: BIGINT ns since the
  request's first event; lists_us: INTEGER microseconds since it (sub-microsecond digits lost: a reference only);
- lists_threads1 (SET threads = 1), lists_unordered (preserve_insertion_order = false): DuckDB settings during the
  insert; lists_uncompressed, lists_bitpacking: the lists' columns declared USING COMPRESSION (DuckDB otherwise
  tries every method on each segment and keeps the smallest);
- lists_no_tokens, lists_delta_no_tokens: chunk_ns only (what the token counts' list costs on its own).
Each write's process CPU seconds (all threads) are given beside its wall seconds: on a shared machine they vary
less with the load. `--layouts` runs some of them; their entries replace those of results/token_storage.json and the
rest are kept (each entry has its own time and load).
Results: results/token_storage.json. Wall seconds of wattbench's own work on synthetic data, one timing each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# list variants: (values stored, DuckDB settings during the insert, USING COMPRESSION of the lists, token counts kept)
LISTS = {
    "lists": ("abs", {}, None, True),
    "lists_delta": ("delta32", {}, None, True),
    "lists_delta64": ("delta64", {}, None, True),
    "lists_offset": ("offset64", {}, None, True),
    "lists_us": ("us32", {}, None, True),
    "lists_threads1": ("abs", {"threads": 1}, None, True),
    "lists_unordered": ("abs", {"preserve_insertion_order": "false"}, None, True),
    "lists_uncompressed": ("abs", {}, "uncompressed", True),
    "lists_bitpacking": ("abs", {}, "bitpacking", True),
    "lists_no_tokens": ("abs", {}, None, False),
    "lists_delta_no_tokens": ("delta32", {}, None, False),
}
LAYOUTS = (*LISTS, "flat", "parquet", "parquet_snappy", "parquet_plain", "copy")
PARQUET = {"parquet": "zstd", "parquet_snappy": "snappy", "parquet_plain": "none"}
POINT = 25_000  # requests of a load point, as benchmarks/synthetic.py's
# each layout's gaps (ms) with their load point, as v_itl computes them from the lists
GAPS = {
    "lists": """SELECT request // {point} AS point, unnest(list_transform(range(1, len(chunk_ns)),
                       lambda i: (chunk_ns[i + 1] - chunk_ns[i]) / 1e6)) AS gap FROM r""",
    "delta": """SELECT request // {point} AS point, unnest(chunk_ns[2:]) / 1e6 AS gap FROM r""",
    "flat": """SELECT request // {point} AS point, (t - lag(t) OVER (PARTITION BY request ORDER BY event)) / 1e6 AS gap
               FROM r""",
    "parquet": """SELECT request // {point} AS point,
                         (t - lag(t) OVER (PARTITION BY request ORDER BY event)) / 1e6 AS gap
                  FROM read_parquet('{folder}/*.parquet')""",
}
EVENTS = 128
BATCH = 8 << 20  # events per Arrow batch, as ingest's BATCH_EVENTS


def _arrays(folder: Path, requests: int) -> None:
    """The chunk files of `requests` requests of EVENTS events each (times 15-25 ms apart, one token each)."""
    import numpy as np

    rng = np.random.default_rng(0)
    with open(folder / "ns.bin", "wb") as ns_out, open(folder / "tok.bin", "wb") as tok_out:
        for first in range(0, requests, 50_000):
            k = min(50_000, requests - first)
            gaps = rng.integers(15_000_000, 25_000_000, (k, EVENTS))
            start = 864_000_123_456_789 + (first + np.arange(k))[:, None] * 3_333_333
            (start + np.cumsum(gaps, axis=1)).astype("<i8").tofile(ns_out)
            np.ones(k * EVENTS, "<i4").tofile(tok_out)


def _values(ns, kind: str):
    """The stored values of LISTS' kind, from the absolute times of EVENTS events a request."""
    import numpy as np

    if kind == "abs":
        return ns
    t = ns.reshape(-1, EVENTS)
    if kind.startswith("delta"):
        gaps = np.diff(t, axis=1, prepend=t[:, :1]).ravel()
        return gaps.astype(np.int32) if kind == "delta32" else gaps
    since = (t - t[:, :1]).ravel()
    return (since // 1000).astype(np.int32) if kind == "us32" else since


def child(layout: str, folder: str) -> dict:
    import numpy as np

    folder_p = Path(folder)
    ns = np.fromfile(folder_p / "ns.bin", dtype="<i8")
    tok = np.fromfile(folder_p / "tok.bin", dtype="<i4")
    out = folder_p / layout
    out.mkdir()
    kind, settings, compression, tokens = LISTS.get(layout, ("abs", {}, None, True))
    vals = _values(ns, kind)
    t0, cpu0 = time.perf_counter(), time.process_time()
    if layout in LISTS or layout == "flat":
        import duckdb
        import pyarrow as pa

        con = duckdb.connect(str(out / "w.duckdb"))
        con.execute("SET memory_limit = '1GB'")
        for key, value in settings.items():
            con.execute(f"SET {key} = {value}")
        if layout in LISTS:
            use = f" USING COMPRESSION {compression}" if compression else ""
            kind_type = "INTEGER" if vals.dtype == np.int32 else "BIGINT"
            con.execute(
                f"CREATE TABLE r (request BIGINT, chunk_ns {kind_type}[]{use}"
                + (f", chunk_tokens INTEGER[]{use})" if tokens else ")")
            )
        else:
            con.execute("CREATE TABLE r (request BIGINT, event SMALLINT, t BIGINT, n INTEGER)")
        for s in range(0, len(ns), BATCH):
            e = min(s + BATCH, len(ns))
            idx = np.arange(s, e)
            if layout in LISTS:
                k = (e - s) // EVENTS
                offsets = pa.array(np.arange(k + 1, dtype=np.int64) * EVENTS)
                columns = {
                    "request": np.arange(s // EVENTS, s // EVENTS + k),
                    "chunk_ns": pa.LargeListArray.from_arrays(offsets, pa.array(vals[s:e])),
                }
                if tokens:
                    columns["chunk_tokens"] = pa.LargeListArray.from_arrays(offsets, pa.array(tok[s:e]))
                batch = pa.table(columns)  # noqa: F841 - read by DuckDB below
            else:
                batch = pa.table(  # noqa: F841 - read by DuckDB below
                    {"request": idx // EVENTS, "event": (idx % EVENTS).astype(np.int16), "t": ns[s:e], "n": tok[s:e]}
                )
            con.execute("INSERT INTO r SELECT * FROM batch")
        con.execute("CHECKPOINT")
        con.close()
    elif layout in PARQUET:
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = None
        for s in range(0, len(ns), BATCH):
            e = min(s + BATCH, len(ns))
            idx = np.arange(s, e)
            batch = pa.table(
                {"request": idx // EVENTS, "event": (idx % EVENTS).astype(np.int16), "t": ns[s:e], "n": tok[s:e]}
            )
            writer = writer or pq.ParquetWriter(out / "events.parquet", batch.schema, compression=PARQUET[layout])
            writer.write_table(batch)
        writer.close()
    else:
        import shutil

        for name in ("ns.bin", "tok.bin"):
            shutil.copyfile(folder_p / name, out / name)
        for name in ("ns.bin", "tok.bin"):
            with open(out / name, "rb+") as fh:
                os.fsync(fh.fileno())
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0] / 1024
    return {"write_s": seconds, "write_cpu_s": cpu, "disk_mb": size / 1e6, "peak_rss_mb": hwm}


def child_read(layout: str, folder: str) -> dict:
    """The layout read as the token views read it, through a connection sandboxed as `wattbench sql`'s."""
    import duckdb

    from wattbench.warehouse import SANDBOX

    out = Path(folder) / layout
    db = out / "w.duckdb"
    if layout in PARQUET:
        db = out / "empty.duckdb"
    t0, cpu0 = time.perf_counter(), time.process_time()
    con = duckdb.connect(str(db))
    if layout in PARQUET:  # admitted before the sandbox is locked: the only folder it may read
        con.execute("SET allowed_directories = ?", [[str(out) + "/"]])
    for key, value in SANDBOX.items():
        con.execute(f"SET {key} = {str(value).lower()}")
    kind = LISTS[layout][0] if layout in LISTS else None
    form = (
        "parquet" if layout in PARQUET else "flat" if kind is None else "delta" if kind.startswith("delta") else "lists"
    )
    gaps = GAPS[form].format(point=POINT, folder=out)
    rows = con.execute(
        f"SELECT point, quantile_cont(gap, [0.5, 0.9, 0.99]) AS q, count(gap) FROM ({gaps}) GROUP BY point"
    ).fetchall()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    refused = None
    try:
        con.execute("SELECT * FROM read_csv('/etc/hostname')")
    except duckdb.Error as exc:
        refused = str(exc).splitlines()[0]
    hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0] / 1024
    return {
        "read_s": seconds,
        "read_cpu_s": cpu,
        "points": len(rows),
        "read_peak_rss_mb": hwm,
        "outside_refused": refused,
    }


def _run(what: str, layout: str, tmp: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.token_storage", "--child", what, layout, tmp],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--out", default=str(ROOT / "results"), help="where token_storage.json goes (default results/)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help=f"some of {', '.join(LAYOUTS)} (default: all)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        what, layout, folder = args.child
        print(json.dumps((child if what == "write" else child_read)(layout, folder)))
        return 0
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    if unknown := [x for x in layouts if x not in LAYOUTS]:
        ap.error(f"unknown layout(s) {', '.join(unknown)}; expected some of {', '.join(LAYOUTS)}")
    path = Path(args.out) / "token_storage.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    if results.get("requests") != args.requests:  # another size: its entries do not compare with these
        results = {"requests": args.requests, "events": args.requests * EVENTS, "layouts": {}}
    results["machine"] = f"{os.cpu_count()} CPU cores"
    for entry in results["layouts"].values():  # entries of a file that dated them all at once
        entry.setdefault("measured_at", results.get("measured_at"))
    results.pop("measured_at", None)
    with tempfile.TemporaryDirectory(prefix="wattbench-tokens-") as tmp:
        _arrays(Path(tmp), args.requests)
        for layout in layouts:
            load = os.getloadavg()[0]
            entry = _run("write", layout, tmp)
            entry["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            entry["load_average_1min"] = [load, os.getloadavg()[0]]
            if layout != "copy" and "error" not in entry:
                load = os.getloadavg()[0]
                entry.update(_run("read", layout, tmp))
                entry["read_load_average_1min"] = [load, os.getloadavg()[0]]
            results["layouts"][layout] = entry
            print(f"  {layout}: {entry}", flush=True)
            path.write_text(json.dumps(results, indent=2) + "\n")  # each entry as soon as it is measured
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
