"""The step decomposition of load runs made at the warehouse from their requests' token times (load_runs.step_gaps ...
phase_note; definitions: wattbench_agent.loadgen.steps, computed by the compiled pass of wattbench/token_pass.py).

A bundle's load_runs row carries the decomposition the agent computed. A row without this version's figures
(`prefill_steps` NULL: a bundle from before the agent computed them, or a row of an older warehouse) gets them here,
all of them made again from the same requests by the same definitions, so that no row mixes an older definition's
figures with this one's: from the compiled pass over the chunk files of the bundle being ingested where it ran, else
from the requests as the warehouse keeps them (inline lists of a version-1 bundle, or the token store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from wattbench.queries import duckdb

if TYPE_CHECKING:
    from wattbench.chunk_files import ChunkFiles

# the load runs without this version's decomposition, with what its expected stalled share needs
_TODO = """
SELECT l.run_id, l.deployment_id, l.load_point_id, l.shape, l.concurrency, l.window_start_ns, l.window_end_ns,
       (SELECT list(DISTINCT q.completion_tokens) FROM requests q WHERE q.run_id = l.run_id
          AND q.deployment_id IS NOT DISTINCT FROM l.deployment_id AND q.load_point_id = l.load_point_id
          AND q.error_kind IS NULL AND coalesce(q.in_window, false)),
       (SELECT count(*) FILTER (WHERE q.completion_tokens IS NULL) FROM requests q WHERE q.run_id = l.run_id
          AND q.deployment_id IS NOT DISTINCT FROM l.deployment_id AND q.load_point_id = l.load_point_id
          AND q.error_kind IS NULL AND coalesce(q.in_window, false))
FROM load_runs l WHERE {where} AND l.prefill_steps IS NULL ORDER BY ALL"""
# one load point's requests with their token times and counts (as sql/views.sql reads them)
_EVENTS = """
SELECT q.times, request_tokens(q.chunk_tokens, q.chunk_tokens_each, q.counts_file, q.events_at, q.events_n, q.times)
           AS counts,
       coalesce(q.chunks_exact, len(q.times)) AS exact, q.error_kind IS NULL AS ok,
       coalesce(q.in_window, false) AS in_window
FROM (SELECT *, coalesce(request_ns(chunk_ns, events_file, events_at, events_n), []::BIGINT[]) AS times
      FROM requests WHERE run_id = ? AND deployment_id IS NOT DISTINCT FROM ? AND load_point_id = ?) q"""


def fill_steps(con: duckdb.DuckDBPyConnection, run_id: str | None, chunks: ChunkFiles | None = None) -> int:
    """The decomposition of every load run of `run_id` (every run: None) that lacks this version's, from its
    requests' token times (`chunks`: the bundle being ingested, whose compiled pass has them); a load run without
    requests keeps what it has. Rows filled."""
    from wattbench.token_pass import Workspace
    from wattbench_agent.loadgen import shapes, steps

    where, params = ("l.run_id = ?", [run_id]) if run_id is not None else ("l.run_id IS NOT NULL", [])
    parts = chunks.point_steps() if chunks is not None else {}
    work = Workspace()
    filled = 0
    for rid, dep, lp, shape, concurrency, ws, we, lengths, unknown in con.execute(
        _TODO.format(where=where), params
    ).fetchall():
        part = parts.get((dep, lp)) if rid == run_id else None
        if part is None:
            part = _stored_part(con, rid, dep, lp, (ws, we) if ws is not None and we is not None else None, work)
        if part is None:
            continue
        closed = shape in shapes.names() and shapes.get(shape).closed_loop
        found = set(lengths or []) | ({None} if unknown else set())
        out = {**part, "stall_threshold_ms": None, "phase_state": None, "note": None}
        if not part["gaps"]:
            out["note"] = "no gap between tokens in the window"
        else:
            out = steps.verdict(out, *steps.expected_for_lengths(found, closed, concurrency))
        cols = steps.load_run_columns(out)
        con.execute(
            f"UPDATE load_runs SET {', '.join(f'{c} = ?' for c in cols)} "
            "WHERE run_id = ? AND deployment_id IS NOT DISTINCT FROM ? AND load_point_id = ?",
            [*cols.values(), rid, dep, lp],
        )
        filled += 1
    return filled


def _stored_part(con, run_id: str, dep: str | None, lp: str, window, work) -> dict | None:
    """The compiled pass's step parts over one load point's requests as the warehouse keeps them; None without
    requests."""
    import pyarrow.compute as pc

    from wattbench.token_pass import run_point

    t = con.sql(_EVENTS, params=[run_id, dep, lp]).to_arrow_table()
    if t.num_rows == 0:
        return None
    times = t["times"].combine_chunks()
    lens = np.asarray(pc.list_value_length(times).fill_null(0), dtype=np.int64)
    ns = np.ascontiguousarray(times.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
    at = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=at[1:])
    counts = t["counts"].combine_chunks()
    clens = np.asarray(pc.list_value_length(counts).fill_null(-1), dtype=np.int64)
    if (clens == lens).all():
        cnt = np.ascontiguousarray(counts.flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
    else:  # a request whose counts are missing or fewer than its times: one token an event (as the agent reads it)
        cnt = np.ones(len(ns), dtype=np.int32)
        for i in np.flatnonzero((clens >= lens) & (lens > 0)):
            cnt[at[i] : at[i] + lens[i]] = counts[int(i)].values.to_numpy(zero_copy_only=False)[: lens[i]]
    refs = {
        "at": at,
        "n": lens,
        "exact": np.asarray(t["exact"].to_numpy(), dtype=np.int64),
        "ok": np.asarray(t["ok"].to_numpy(), dtype=np.bool_),
        "in_window": np.asarray(t["in_window"].to_numpy(), dtype=np.bool_),
    }
    _, fig = run_point(ns, cnt, refs, window, window is not None, work)
    return fig["steps"]


def clear_old_labels(con: duckdb.DuckDBPyConnection) -> None:
    """A row whose decomposition could not be made again (no requests kept) loses the phase label an older version
    gave it from its stalled share, which this version does not read a phase from (docs/MEASUREMENT.md)."""
    con.execute(
        "UPDATE load_runs SET phase_state = NULL, phase_note = 'phase label of an older wattbench (stalled share "
        "against expected), not made again: the requests are not in the warehouse' "
        "WHERE prefill_steps IS NULL AND phase_state IS NOT NULL"
    )
