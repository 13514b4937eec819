"""Where a run's per-token times should live once ingested: what each layout costs to write, measured.

python -m benchmarks.token_storage [--requests 1000000]: the per-token times of a run (128 events a request, int64
times, int32 token counts: 128 M of each at 1M requests, the shape of benchmarks/warehouse_scale.py's bundles, made
here in numpy) written, each layout in a fresh process, as
- lists: requests' chunk_ns BIGINT[] / chunk_tokens INTEGER[] in the DuckDB file, from Arrow lists over the arrays
  (what ingest does: resources/chunk_files.py);
- flat: one DuckDB table of (request, event, t, n), appended from Arrow;
- parquet: the same flat table as a zstd Parquet file beside the warehouse (parquet_snappy: snappy, parquet_plain:
  uncompressed);
- copy: the bundle's two binary chunk files copied beside the warehouse as they are.
Each is timed to the end of a CHECKPOINT (DuckDB's compression is part of the cost), with its size on disk and the
process's peak RSS (which includes the 1.5 GB of arrays read first, at 1M requests), and the 1-minute load
average (the machine is shared: above 2 on 2 cores, other work competed). Then each layout is read back as the
token views read it (sql/views.sql v_itl: every gap of every request, its percentiles per load point of 25,000
requests), in a fresh process through a connection sandboxed as `wattbench sql`'s (resources/warehouse.py SANDBOX:
no external access), the Parquet layouts admitted by DuckDB's allowed_directories (set before the sandbox is locked):
the read's seconds say what a layout costs every report that reads token times (copy: not readable as a table).
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
LAYOUTS = ("lists", "flat", "parquet", "parquet_snappy", "parquet_plain", "copy")
PARQUET = {"parquet": "zstd", "parquet_snappy": "snappy", "parquet_plain": "none"}
POINT = 25_000  # requests of a load point, as benchmarks/synthetic.py's
# each layout's gaps (ms) with their load point, as v_itl computes them from the lists
GAPS = {
    "lists": """SELECT request // {point} AS point, unnest(list_transform(range(1, len(chunk_ns)),
                       lambda i: (chunk_ns[i + 1] - chunk_ns[i]) / 1e6)) AS gap FROM r""",
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


def child(layout: str, folder: str) -> dict:
    import numpy as np

    folder_p = Path(folder)
    ns = np.fromfile(folder_p / "ns.bin", dtype="<i8")
    tok = np.fromfile(folder_p / "tok.bin", dtype="<i4")
    out = folder_p / layout
    out.mkdir()
    t0 = time.perf_counter()
    if layout in ("lists", "flat"):
        import duckdb
        import pyarrow as pa

        con = duckdb.connect(str(out / "w.duckdb"))
        con.execute("SET memory_limit = '1GB'")
        if layout == "lists":
            con.execute("CREATE TABLE r (request BIGINT, chunk_ns BIGINT[], chunk_tokens INTEGER[])")
        else:
            con.execute("CREATE TABLE r (request BIGINT, event SMALLINT, t BIGINT, n INTEGER)")
        for s in range(0, len(ns), BATCH):
            e = min(s + BATCH, len(ns))
            idx = np.arange(s, e)
            if layout == "lists":
                k = (e - s) // EVENTS
                offsets = pa.array(np.arange(k + 1, dtype=np.int64) * EVENTS)
                batch = pa.table(  # noqa: F841 - read by DuckDB below
                    {
                        "request": np.arange(s // EVENTS, s // EVENTS + k),
                        "chunk_ns": pa.LargeListArray.from_arrays(offsets, pa.array(ns[s:e])),
                        "chunk_tokens": pa.LargeListArray.from_arrays(offsets, pa.array(tok[s:e])),
                    }
                )
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
    seconds = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0] / 1024
    return {"write_s": seconds, "disk_mb": size / 1e6, "peak_rss_mb": hwm}


def child_read(layout: str, folder: str) -> dict:
    """The layout read as the token views read it, through a connection sandboxed as `wattbench sql`'s."""
    import duckdb

    from resources.warehouse import SANDBOX

    out = Path(folder) / layout
    db = out / "w.duckdb"
    if layout in PARQUET:
        db = out / "empty.duckdb"
    t0 = time.perf_counter()
    con = duckdb.connect(str(db))
    if layout in PARQUET:  # admitted before the sandbox is locked: the only folder it may read
        con.execute("SET allowed_directories = ?", [[str(out) + "/"]])
    for key, value in SANDBOX.items():
        con.execute(f"SET {key} = {str(value).lower()}")
    gaps = GAPS["parquet" if layout in PARQUET else layout].format(point=POINT, folder=out)
    rows = con.execute(
        f"SELECT point, quantile_cont(gap, [0.5, 0.9, 0.99]) AS q, count(gap) FROM ({gaps}) GROUP BY point"
    ).fetchall()
    seconds = time.perf_counter() - t0
    refused = None
    try:
        con.execute("SELECT * FROM read_csv('/etc/hostname')")
    except duckdb.Error as exc:
        refused = str(exc).splitlines()[0]
    hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0] / 1024
    return {"read_s": seconds, "points": len(rows), "read_peak_rss_mb": hwm, "outside_refused": refused}


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
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        what, layout, folder = args.child
        print(json.dumps((child if what == "write" else child_read)(layout, folder)))
        return 0
    results = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores",
        "requests": args.requests,
        "events": args.requests * EVENTS,
        "layouts": {},
    }
    with tempfile.TemporaryDirectory(prefix="wattbench-tokens-") as tmp:
        _arrays(Path(tmp), args.requests)
        for layout in LAYOUTS:
            load = os.getloadavg()[0]
            entry = _run("write", layout, tmp)
            entry["load_average_1min"] = [load, os.getloadavg()[0]]
            if layout != "copy" and "error" not in entry:
                load = os.getloadavg()[0]
                entry.update(_run("read", layout, tmp))
                entry["read_load_average_1min"] = [load, os.getloadavg()[0]]
            results["layouts"][layout] = entry
            print(f"  {layout}: {entry}", flush=True)
    (Path(args.out) / "token_storage.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
