-- Derived views over the stage tables, recreated with the schema. Definitions follow docs/MEASUREMENT.md:
-- latency percentiles over successful requests sent inside the steady-state window; throughput over the
-- window; energy from the GPU energy counter over the same window, summed over the deployment's GPUs.

-- Tokens carried by each event of a request (requests.chunk_tokens), as a list beside chunk_ns: a request whose every
-- event carried the same count is stored as that one number (requests.chunk_tokens_each, chunk_tokens NULL). Every
-- reader of the token counts goes through this (one definition); NULL where neither was recorded (imported runs).
CREATE OR REPLACE MACRO event_tokens(tokens, each, times) AS
    CASE WHEN each IS NULL THEN tokens ELSE list_resize([]::INTEGER[], len(times), each) END;

-- A request's token times (chunk_ns) and counts (chunk_tokens) whichever way they are kept: as lists in the row
-- (rows stored before schema 10, imports, inline lists), or in the token store's files beside the warehouse
-- (requests.events_file, events_at, events_n, counts_file; read by token_times() / token_counts(), which every
-- connection wattbench opens has: resources/token_store.py). Every reader of the token times goes through these.
CREATE OR REPLACE MACRO request_ns(chunk_ns, events_file, events_at, events_n) AS
    coalesce(chunk_ns, token_times(events_file, events_at, events_n));
CREATE OR REPLACE MACRO request_tokens(chunk_tokens, chunk_tokens_each, counts_file, events_at, events_n, times) AS
    CASE WHEN chunk_tokens_each IS NOT NULL THEN list_resize([]::INTEGER[], len(times), chunk_tokens_each)
         WHEN chunk_tokens IS NOT NULL OR events_n IS NULL THEN chunk_tokens
         WHEN events_n = 0 THEN []::INTEGER[]
         ELSE token_counts(counts_file, events_at, events_n) END;
-- A request's events: their count, without reading them
CREATE OR REPLACE MACRO request_events(chunk_ns, events_n) AS coalesce(len(chunk_ns), events_n);

-- Inter-token latency: every gap between consecutive content-bearing events, pooled over requests (of a long
-- stream's recorded events, the exact part: requests.chunks_exact).
CREATE OR REPLACE VIEW v_itl AS
SELECT run_id, deployment_id, load_point_id,
       (chunk_ns[i + 1] - chunk_ns[i]) / 1e6 AS itl_ms
FROM (
    SELECT run_id, deployment_id, load_point_id, chunk_ns,
           unnest(range(1, least(len(chunk_ns), coalesce(chunks_exact, len(chunk_ns))))) AS i
    FROM (SELECT * REPLACE (request_ns(chunk_ns, events_file, events_at, events_n) AS chunk_ns) FROM requests
          WHERE in_window AND error_kind IS NULL AND request_events(chunk_ns, events_n) > 1)
);

-- Runs imported from other tools (`wattbench import`, wattbench/importers/): a load point whose file carried no
-- per-request rows takes its figures from the tool's own statistics, stored in load_runs.summary in the load
-- generator's layout (ttft_ms.p50, ...; NULL where the tool did not report that percentile).
-- Their requests are looked up only among the runs that hold an imported load point (v_imported_runs): a warehouse
-- of millions of measured requests is not scanned to learn that none of them is imported. Kept at ingest and import
-- (imported_request_stats, imported_itl_stats; wattbench/warehouse.refresh_kept_views): the views without _live
-- read those, so a report does not plan these lookups at every use of a load point's figures.
CREATE OR REPLACE VIEW v_imported_runs AS
SELECT DISTINCT run_id FROM load_runs WHERE source LIKE 'imported:%';

CREATE OR REPLACE VIEW v_imported_request_stats_live AS
SELECT l.run_id, l.deployment_id, l.load_point_id,
       l.sent                                                           AS requests_in_window,
       l.completed                                                      AS ok_in_window,
       l.completed                                                      AS completed_in_window,
       l.failed                                                         AS errors,
       (l.summary->>'$.ttft_ms.p50')::DOUBLE AS ttft_p50_ms,
       (l.summary->>'$.ttft_ms.p90')::DOUBLE AS ttft_p90_ms,
       (l.summary->>'$.ttft_ms.p95')::DOUBLE AS ttft_p95_ms,
       (l.summary->>'$.ttft_ms.p99')::DOUBLE AS ttft_p99_ms,
       (l.summary->>'$.ttft_ms.p999')::DOUBLE AS ttft_p999_ms,
       (l.summary->>'$.ttft_ms.mean')::DOUBLE AS ttft_mean_ms,
       (l.summary->>'$.ttft_ms.stdev')::DOUBLE AS ttft_stdev_ms,
       (l.summary->>'$.tpot_ms.p50')::DOUBLE AS tpot_p50_ms,
       (l.summary->>'$.tpot_ms.p90')::DOUBLE AS tpot_p90_ms,
       (l.summary->>'$.tpot_ms.p95')::DOUBLE AS tpot_p95_ms,
       (l.summary->>'$.tpot_ms.p99')::DOUBLE AS tpot_p99_ms,
       (l.summary->>'$.tpot_ms.p999')::DOUBLE AS tpot_p999_ms,
       (l.summary->>'$.tpot_ms.mean')::DOUBLE AS tpot_mean_ms,
       (l.summary->>'$.tpot_ms.stdev')::DOUBLE AS tpot_stdev_ms,
       (l.summary->>'$.e2e_ms.p50')::DOUBLE AS e2e_p50_ms,
       (l.summary->>'$.e2e_ms.p90')::DOUBLE AS e2e_p90_ms,
       (l.summary->>'$.e2e_ms.p95')::DOUBLE AS e2e_p95_ms,
       (l.summary->>'$.e2e_ms.p99')::DOUBLE AS e2e_p99_ms,
       (l.summary->>'$.e2e_ms.p999')::DOUBLE AS e2e_p999_ms,
       (l.summary->>'$.e2e_ms.mean')::DOUBLE AS e2e_mean_ms,
       (l.summary->>'$.e2e_ms.stdev')::DOUBLE AS e2e_stdev_ms,
       (l.summary->>'$.goodput')::DOUBLE * l.window_s                  AS meeting_slo_in_window,
       (l.summary->>'$.goodput')::DOUBLE * l.window_s                  AS meeting_slo_completed_in_window,
       NULL::INTEGER                                                    AS longest_context_tokens
FROM load_runs l
WHERE l.source LIKE 'imported:%'
  AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.run_id IN (SELECT run_id FROM v_imported_runs)
                  AND q.run_id = l.run_id AND q.load_point_id = l.load_point_id);

CREATE OR REPLACE VIEW v_imported_itl_stats_live AS
SELECT l.run_id, l.deployment_id, l.load_point_id,
       (l.summary->>'$.itl_ms.p50')::DOUBLE AS itl_p50_ms,
       (l.summary->>'$.itl_ms.p90')::DOUBLE AS itl_p90_ms,
       (l.summary->>'$.itl_ms.p95')::DOUBLE AS itl_p95_ms,
       (l.summary->>'$.itl_ms.p99')::DOUBLE AS itl_p99_ms,
       (l.summary->>'$.itl_ms.p999')::DOUBLE AS itl_p999_ms,
       (l.summary->>'$.itl_ms.mean')::DOUBLE AS itl_mean_ms,
       (l.summary->>'$.itl_ms.stdev')::DOUBLE AS itl_stdev_ms
FROM load_runs l
WHERE l.source LIKE 'imported:%' AND (l.summary->'$.itl_ms') IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.run_id IN (SELECT run_id FROM v_imported_runs)
                  AND q.run_id = l.run_id AND q.load_point_id = l.load_point_id
                  AND request_events(q.chunk_ns, q.events_n) > 1);

CREATE OR REPLACE VIEW v_imported_request_stats AS SELECT * EXCLUDE (source) FROM imported_request_stats;

CREATE OR REPLACE VIEW v_imported_itl_stats AS SELECT * EXCLUDE (source) FROM imported_itl_stats;

-- Per load point, over its requests. Latency figures: successful requests SENT inside the window (as MLPerf
-- LoadGen and vllm bench serve: every issued request counts). Throughput figures: successful requests whose LAST
-- token arrived inside the window (the same rule as output tokens: what the engine delivered in the window); a
-- load point with no recorded window bounds (imported from a tool that reports only a duration) counts them all.
-- Stdev: population, as vllm bench serve reports it (a description of the observed requests).
CREATE OR REPLACE VIEW v_request_stats_live AS
SELECT q.run_id, q.deployment_id, q.load_point_id,
       count(*) FILTER (WHERE q.in_window)                              AS requests_in_window,
       count(*) FILTER (WHERE q.in_window AND q.error_kind IS NULL)     AS ok_in_window,
       count(*) FILTER (WHERE q.error_kind IS NULL
                          AND q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns) AND coalesce(l.window_end_ns, q.last_token_ns)) AS completed_in_window,
       count(*) FILTER (WHERE q.error_kind IS NOT NULL)                 AS errors,
       quantile_cont(q.ttft_ms, 0.50)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p50_ms,
       quantile_cont(q.ttft_ms, 0.90)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p90_ms,
       quantile_cont(q.ttft_ms, 0.95)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p95_ms,
       quantile_cont(q.ttft_ms, 0.99)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p99_ms,
       quantile_cont(q.ttft_ms, 0.999) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p999_ms,
       avg(q.ttft_ms)                  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_mean_ms,
       stddev_pop(q.ttft_ms)           FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_stdev_ms,
       quantile_cont(q.tpot_ms, 0.50)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p50_ms,
       quantile_cont(q.tpot_ms, 0.90)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p90_ms,
       quantile_cont(q.tpot_ms, 0.95)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p95_ms,
       quantile_cont(q.tpot_ms, 0.99)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p99_ms,
       quantile_cont(q.tpot_ms, 0.999) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p999_ms,
       avg(q.tpot_ms)                  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_mean_ms,
       stddev_pop(q.tpot_ms)           FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_stdev_ms,
       quantile_cont(q.e2e_ms, 0.50)   FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p50_ms,
       quantile_cont(q.e2e_ms, 0.90)   FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p90_ms,
       quantile_cont(q.e2e_ms, 0.95)   FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p95_ms,
       quantile_cont(q.e2e_ms, 0.99)   FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p99_ms,
       quantile_cont(q.e2e_ms, 0.999)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p999_ms,
       avg(q.e2e_ms)                   FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_mean_ms,
       stddev_pop(q.e2e_ms)            FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_stdev_ms,
       count(q.tpot_ms) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_samples,
       max(q.prompt_tokens::BIGINT + q.completion_tokens) FILTER (WHERE q.error_kind IS NULL) AS longest_context_tokens,
       -- vllm bench serve's whole-run figure: output tokens of every successful request / first send to last token
       sum(q.completion_tokens) FILTER (WHERE q.error_kind IS NULL)
         / nullif((max(q.last_token_ns) FILTER (WHERE q.error_kind IS NULL) - min(q.sent_ns)) / 1e9, 0)
                                                                        AS vllm_output_throughput
FROM requests q
LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)
GROUP BY ALL;


-- Every request of each load point tallied, whether or not it ran in the window (the head-to-head's longest context
-- and behaviour on failure, sql/head_to_head.sql): kept in request_tallies where point_stats is
-- (wattbench/warehouse.refresh_kept_views), so that a report reads a row per load point instead of every request.
-- error_kinds: each error kind and its count. tests/test_point_stats.py checks they agree.
CREATE OR REPLACE VIEW v_request_tallies_live AS
WITH counts AS (
    SELECT run_id, deployment_id, load_point_id,
           count(*)                                                     AS requests,
           count(*) FILTER (WHERE error_kind IS NOT NULL)               AS failed,
           count(*) FILTER (WHERE error_kind IS NULL AND max_tokens IS NOT NULL
                              AND completion_tokens < max_tokens)       AS short_responses,
           max(prompt_tokens::BIGINT + completion_tokens) FILTER (WHERE error_kind IS NULL) AS longest_context_tokens
    FROM requests GROUP BY ALL),
kinds AS (  -- grouped apart: a histogram() beside the counts made one run's tallies take 0.5 s at 1M requests, not 0.07
    SELECT run_id, deployment_id, load_point_id, map_from_entries(list((error_kind, n) ORDER BY error_kind)) AS error_kinds
    FROM (SELECT run_id, deployment_id, load_point_id, error_kind, count(*) AS n
          FROM requests WHERE error_kind IS NOT NULL GROUP BY ALL)
    GROUP BY ALL)
SELECT c.*, k.error_kinds FROM counts c LEFT JOIN kinds k USING (run_id, deployment_id, load_point_id);

CREATE OR REPLACE VIEW v_request_tallies AS SELECT * EXCLUDE (source) FROM request_tallies;

-- Requests meeting every SLO of the run (goodput). Kept in point_stats with the SLO they were counted against; a
-- run whose SLO changed since (wattbench ingest --plan sets it after the rows are in) is counted again, live, from
-- scalar columns (v_point_stale_slo).
CREATE OR REPLACE VIEW v_request_slo_counts AS
SELECT q.run_id, q.deployment_id, q.load_point_id,
       count(*) FILTER (
           WHERE q.error_kind IS NULL AND q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns) AND coalesce(l.window_end_ns, q.last_token_ns)
             AND (r.slo_ttft_ms IS NULL OR q.ttft_ms <= r.slo_ttft_ms)
             AND (r.slo_tpot_ms IS NULL OR q.tpot_ms IS NULL OR q.tpot_ms <= r.slo_tpot_ms)
             AND (r.slo_e2e_ms IS NULL OR q.e2e_ms <= r.slo_e2e_ms)
       )                                                                AS meeting_slo_completed_in_window,
       count(*) FILTER (
           WHERE q.in_window AND q.error_kind IS NULL
             AND (r.slo_ttft_ms IS NULL OR q.ttft_ms <= r.slo_ttft_ms)
             AND (r.slo_tpot_ms IS NULL OR q.tpot_ms IS NULL OR q.tpot_ms <= r.slo_tpot_ms)
             AND (r.slo_e2e_ms IS NULL OR q.e2e_ms <= r.slo_e2e_ms)
       )                                                                AS meeting_slo_in_window
FROM requests q
LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)
LEFT JOIN runs r USING (run_id)
GROUP BY ALL;

CREATE OR REPLACE VIEW v_point_stale_slo AS
SELECT DISTINCT p.run_id
FROM point_stats p JOIN runs r USING (run_id)
WHERE p.slo_ttft_ms IS DISTINCT FROM r.slo_ttft_ms OR p.slo_tpot_ms IS DISTINCT FROM r.slo_tpot_ms
   OR p.slo_e2e_ms IS DISTINCT FROM r.slo_e2e_ms;

-- The per-load-point figures reports read: kept in point_stats (filled at ingest from the *_live definitions by
-- wattbench/warehouse.refresh_point_stats; tests/test_point_stats.py checks they agree), and imported points from
-- the tool's own statistics.
CREATE OR REPLACE VIEW v_request_stats AS
WITH recount AS (
    SELECT q.run_id, q.deployment_id, q.load_point_id,
       count(*) FILTER (
               WHERE q.error_kind IS NULL AND q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns) AND coalesce(l.window_end_ns, q.last_token_ns)
                 AND (r.slo_ttft_ms IS NULL OR q.ttft_ms <= r.slo_ttft_ms)
                 AND (r.slo_tpot_ms IS NULL OR q.tpot_ms IS NULL OR q.tpot_ms <= r.slo_tpot_ms)
                 AND (r.slo_e2e_ms IS NULL OR q.e2e_ms <= r.slo_e2e_ms)
           )                                                                AS meeting_slo_completed_in_window,
           count(*) FILTER (
               WHERE q.in_window AND q.error_kind IS NULL
                 AND (r.slo_ttft_ms IS NULL OR q.ttft_ms <= r.slo_ttft_ms)
                 AND (r.slo_tpot_ms IS NULL OR q.tpot_ms IS NULL OR q.tpot_ms <= r.slo_tpot_ms)
                 AND (r.slo_e2e_ms IS NULL OR q.e2e_ms <= r.slo_e2e_ms)
           )                                                                AS meeting_slo_in_window
    FROM requests q
    LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    LEFT JOIN runs r USING (run_id)
    WHERE q.run_id IN (SELECT run_id FROM v_point_stale_slo)
    GROUP BY ALL)
SELECT p.run_id, p.deployment_id, p.load_point_id, p.requests_in_window, p.ok_in_window, p.completed_in_window,
       p.errors, p.ttft_p50_ms, p.ttft_p90_ms, p.ttft_p95_ms, p.ttft_p99_ms, p.ttft_p999_ms, p.ttft_mean_ms,
       p.ttft_stdev_ms, p.tpot_p50_ms, p.tpot_p90_ms, p.tpot_p95_ms, p.tpot_p99_ms, p.tpot_p999_ms, p.tpot_mean_ms,
       p.tpot_stdev_ms, p.e2e_p50_ms, p.e2e_p90_ms, p.e2e_p95_ms, p.e2e_p99_ms, p.e2e_p999_ms, p.e2e_mean_ms,
       p.e2e_stdev_ms,
       coalesce(s.meeting_slo_completed_in_window, p.meeting_slo_completed_in_window) AS meeting_slo_completed_in_window,
       coalesce(s.meeting_slo_in_window, p.meeting_slo_in_window) AS meeting_slo_in_window,
       p.tpot_samples, p.longest_context_tokens, p.vllm_output_throughput
FROM point_stats p
LEFT JOIN recount s USING (run_id, deployment_id, load_point_id)
WHERE p.has_requests
UNION ALL BY NAME
SELECT * FROM v_imported_request_stats;

CREATE OR REPLACE VIEW v_itl_stats_live AS
SELECT run_id, deployment_id, load_point_id,
       quantile_cont(itl_ms, 0.50)  AS itl_p50_ms,
       quantile_cont(itl_ms, 0.90)  AS itl_p90_ms,
       quantile_cont(itl_ms, 0.95)  AS itl_p95_ms,
       quantile_cont(itl_ms, 0.99)  AS itl_p99_ms,
       quantile_cont(itl_ms, 0.999) AS itl_p999_ms,
       avg(itl_ms)                  AS itl_mean_ms,
       stddev_pop(itl_ms)           AS itl_stdev_ms,
       count(*)                     AS itl_samples
FROM v_itl GROUP BY ALL;

CREATE OR REPLACE VIEW v_itl_stats AS
SELECT run_id, deployment_id, load_point_id, itl_p50_ms, itl_p90_ms, itl_p95_ms, itl_p99_ms, itl_p999_ms,
       itl_mean_ms, itl_stdev_ms, itl_samples
FROM point_stats WHERE itl_samples IS NOT NULL
UNION ALL BY NAME
SELECT * FROM v_imported_itl_stats;

-- Power and memory inside each load point's window from the sampled trace (diagnosis; the figure of record for
-- power is the energy counter over the window, v_load_points.counter_w_per_gpu). Every sample whose t_ns is inside a
-- window counts for it. Kept in window_gpu_stats at ingest (v_window_gpu reads it): over every run this join reads
-- every GPU sample of the warehouse. Samples meet windows through time buckets (a quarter of the longest window, at least 1 s; a
-- window lists the buckets it spans): an equality join pairs a sample with the few windows near it, where a join on
-- the deployment alone would pair it with every window of its run before the BETWEEN (tests/reports/
-- test_view_speed_rewrites.py checks it against that plain join).
CREATE OR REPLACE VIEW v_window_gpu_live AS
WITH bw AS (
    SELECT greatest(max(window_end_ns - window_start_ns) // 4, 1000000000) AS bucket_ns
    FROM load_runs WHERE window_end_ns >= window_start_ns),
l AS (
    SELECT run_id, deployment_id, load_point_id, window_start_ns, window_end_ns,
           unnest(range(window_start_ns // bucket_ns, window_end_ns // bucket_ns + 1)) AS bucket
    FROM load_runs, bw WHERE window_end_ns >= window_start_ns),
s AS (SELECT g.*, g.t_ns // bw.bucket_ns AS bucket FROM gpu_samples g, bw)
SELECT l.run_id, l.deployment_id, l.load_point_id,
       avg(s.power_w)                                          AS trace_mean_w_per_gpu,
       max(s.power_w)                                          AS trace_peak_w_per_gpu,
       max(s.hbm_used_mib)                                     AS peak_hbm_mib_per_gpu,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL
                WHEN s.clock_events LIKE '%power%' OR s.clock_events LIKE '%thermal%' THEN 1.0 ELSE 0.0 END)
                                                               AS capped_share,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL WHEN s.clock_events LIKE '%power%' THEN 1.0 ELSE 0.0 END)
                                                               AS power_capped_share,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL WHEN s.clock_events LIKE '%thermal%' THEN 1.0 ELSE 0.0 END)
                                                               AS thermal_capped_share,
       avg(s.sm_clock_mhz)                                     AS mean_sm_clock_mhz,
       avg(s.mem_clock_mhz)                                    AS mean_mem_clock_mhz,
       max(s.temp_c)                                           AS max_temp_c,
       max(s.hbm_temp_c)                                       AS max_hbm_temp_c,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL
                WHEN s.clock_events LIKE '%power%' OR s.clock_events LIKE '%thermal%'
                  OR s.clock_events LIKE '%hw_slowdown%' THEN 1.0 ELSE 0.0 END)
                                                               AS throttled_share,
       count(*)                                                AS samples
FROM l
JOIN s
  ON s.run_id = l.run_id AND s.deployment_id = l.deployment_id AND s.bucket = l.bucket
 AND s.t_ns BETWEEN l.window_start_ns AND l.window_end_ns
GROUP BY l.run_id, l.deployment_id, l.load_point_id;

CREATE OR REPLACE VIEW v_window_gpu AS
SELECT run_id, deployment_id, load_point_id, trace_mean_w_per_gpu, trace_peak_w_per_gpu, peak_hbm_mib_per_gpu,
       capped_share, power_capped_share, thermal_capped_share, mean_sm_clock_mhz, mean_mem_clock_mhz, max_temp_c,
       max_hbm_temp_c, throttled_share, samples
FROM window_gpu_stats;

-- What the host and the GPU were doing in each load window, and a flag where either may have held the engine back
-- (docs/MEASUREMENT.md, "Host facts"). The host was saturated when, over the window, its busy logical CPUs reached
-- 90% of them, its 1-minute load average at the window's end reached their number, the hypervisor stole 5% or more of
-- their time, or the engine's processes used 90% of the CPUs the agent may use (cpu_usable: affinity, cgroup quota).
-- The GPU was throttled when 10% or more of the window's samples name a clock-lowering reason (power cap, thermal,
-- hw slowdown; a sample may name several). A flag is NULL where nothing it rests on was measured; `flags` says why.
CREATE OR REPLACE VIEW v_window_flags AS
WITH w AS (
    SELECT l.run_id, l.deployment_id, l.load_point_id, l.window_s, d.host, d.cpu_logical, d.cpu_usable,
           l.host_load_1m, l.host_busy_cpus, l.host_steal_share, l.engine_cpu_s,
           l.engine_cpu_s / nullif(l.window_s, 0)                          AS engine_cpus,
           g.mean_sm_clock_mhz, g.mean_mem_clock_mhz, g.max_temp_c, g.max_hbm_temp_c, g.throttled_share,
           g.power_capped_share, g.thermal_capped_share,
           l.host_busy_cpus >= 0.9 * d.cpu_logical                          AS busy,
           l.host_load_1m >= d.cpu_logical                                  AS loaded,
           l.host_steal_share >= 0.05                                       AS stolen,
           l.engine_cpu_s / nullif(l.window_s, 0) >= 0.9 * d.cpu_usable     AS engine_bound
    FROM load_runs l
    JOIN deployments d USING (run_id, deployment_id)
    LEFT JOIN v_window_gpu g USING (run_id, deployment_id, load_point_id))
SELECT run_id, deployment_id, load_point_id, window_s, host, cpu_logical, cpu_usable, host_load_1m, host_busy_cpus,
       host_steal_share, engine_cpu_s, engine_cpus, mean_sm_clock_mhz, mean_mem_clock_mhz, max_temp_c, max_hbm_temp_c,
       throttled_share, power_capped_share, thermal_capped_share,
       CASE WHEN busy IS NULL AND loaded IS NULL AND stolen IS NULL AND engine_bound IS NULL THEN NULL
            ELSE coalesce(busy, false) OR coalesce(loaded, false) OR coalesce(stolen, false)
                 OR coalesce(engine_bound, false) END                      AS host_saturated,
       throttled_share >= 0.1                                               AS gpu_throttled,
       nullif(concat_ws('; ',
           CASE WHEN busy THEN printf('host CPUs %.0f%% busy (%.1f of %d)', 100 * host_busy_cpus / cpu_logical,
                                      host_busy_cpus, cpu_logical) END,
           CASE WHEN loaded THEN printf('load average %.1f on %d CPUs', host_load_1m, cpu_logical) END,
           CASE WHEN stolen THEN printf('%.0f%% of CPU time stolen by the hypervisor', 100 * host_steal_share) END,
           CASE WHEN engine_bound THEN printf('engine used %.1f of %g usable CPUs', engine_cpus, cpu_usable) END,
           CASE WHEN throttled_share >= 0.1 THEN printf('GPU clocks lowered in %.0f%% of samples (power cap %.0f%%, '
                                                        || 'thermal %.0f%%)', 100 * throttled_share,
                                                        100 * coalesce(power_capped_share, 0),
                                                        100 * coalesce(thermal_capped_share, 0)) END), '') AS flags
FROM w;

-- One row per load run that ran (status ok; a point repeated N times has N rows): every figure of
-- docs/MEASUREMENT.md, units in the names. Every W figure is energy-counter energy over time:
-- mean_power_w (deployment) and counter_w_per_gpu; idle_power_w is the deployment's idle power with the model
-- loaded (mean of the baselines before and after its points), and the *_above_idle figures subtract it.
-- trace_*_w_per_gpu come from the sampled instant power (diagnosis only): v_load_points joins them (v_window_gpu) to
-- v_load_points_core, which has every other figure and is what summaries over repeats, contrasts, comparisons and
-- capacity plans read (none of them reads the GPU samples).
-- Cost: $ per 1M output tokens = GPU-hour price x GPUs / (output tok/s x 3600) x 1e6; energy cost (second line) =
-- kWh per 1M output tokens x $/kWh x PUE. Summaries over repeats with 95% intervals: v_point_figures.
-- A load point's label (a load run of a point repeated N times is <point>#<n>) and a run's time, for the views below.
CREATE OR REPLACE MACRO point_label_of(point_label, load_point_id) AS
    coalesce(point_label, regexp_extract(load_point_id, '([^:#]*)(#[0-9]+)?$', 1));
CREATE OR REPLACE MACRO run_at_of(started_at, clock_anchor_unix_ns) AS
    coalesce(started_at, make_timestamp(clock_anchor_unix_ns // 1000));

CREATE OR REPLACE VIEW v_load_points_core_live AS
SELECT l.run_id, l.source, d.config_name AS engine, d.engine AS engine_kind, d.engine_version, d.model, d.precision,
       d.tp, d.gpu_name, coalesce(d.n_gpus, d.tp) AS n_gpus, l.deployment_id, l.load_point_id,
       point_label_of(l.point_label, l.load_point_id)                  AS point_label,
       coalesce(l.repeat, 1)                                           AS repeat,
       coalesce(l.server_start, 1)                                     AS server_start,
       run_at_of(r.started_at, r.clock_anchor_unix_ns)                 AS run_at,
       l.workload, l.shape, l.concurrency, l.rate,
       l.burstiness, l.input_tokens, l.output_tokens, l.warmup_s, l.window_s, l.achieved_rate, l.achieved_concurrency,
       l.completed, l.failed, q.errors AS failed_requests, q.requests_in_window, q.completed_in_window,
       l.output_tokens_in_window / l.window_s                          AS output_tok_s,
       q.vllm_output_throughput,
       q.completed_in_window / l.window_s                              AS requests_s,
       q.meeting_slo_completed_in_window / l.window_s                  AS goodput_requests_s,
       q.meeting_slo_completed_in_window / l.window_s / nullif(coalesce(d.n_gpus, d.tp), 0) AS goodput_requests_s_per_gpu,
       q.meeting_slo_in_window / nullif(q.requests_in_window, 0)       AS slo_attainment,
       q.ttft_p50_ms, q.ttft_p90_ms, q.ttft_p95_ms, q.ttft_p99_ms, q.ttft_p999_ms, q.ttft_mean_ms, q.ttft_stdev_ms,
       q.tpot_p50_ms, q.tpot_p90_ms, q.tpot_p95_ms, q.tpot_p99_ms, q.tpot_p999_ms, q.tpot_mean_ms, q.tpot_stdev_ms,
       i.itl_p50_ms, i.itl_p90_ms, i.itl_p95_ms, i.itl_p99_ms, i.itl_p999_ms, i.itl_mean_ms, i.itl_stdev_ms,
       q.e2e_p50_ms, q.e2e_p90_ms, q.e2e_p95_ms, q.e2e_p99_ms, q.e2e_p999_ms, q.e2e_mean_ms, q.e2e_stdev_ms,
       q.ok_in_window AS latency_samples, q.tpot_samples, i.itl_samples,
       l.energy_j,
       l.energy_trace_j,
       abs(l.energy_trace_j - l.energy_j) / nullif(l.energy_j, 0)      AS energy_trace_gap,
       l.energy_j / nullif(l.output_tokens_in_window, 0)               AS j_per_output_token,
       l.output_tokens_in_window / nullif(l.energy_j, 0)               AS output_tokens_per_j,
       l.energy_j / l.window_s                                          AS mean_power_w,
       l.energy_j / l.window_s / nullif(coalesce(d.n_gpus, d.tp), 0)   AS counter_w_per_gpu,
       p.idle_power_w,
       l.energy_j / l.window_s - p.idle_power_w                         AS above_idle_power_w,
       (l.energy_j - p.idle_power_w * l.window_s) / nullif(l.output_tokens_in_window, 0)
                                                                        AS j_per_output_token_above_idle,
       l.output_tokens_in_window / nullif(l.energy_j - p.idle_power_w * l.window_s, 0)
                                                                        AS output_tokens_per_j_above_idle,
       r.gpu_price_per_hour * coalesce(d.n_gpus, d.tp) / nullif(l.output_tokens_in_window / l.window_s * 3600, 0) * 1e6
                                                                        AS usd_per_1m_output_tokens,
       l.energy_j / nullif(l.output_tokens_in_window, 0) * 1e6 / 3.6e6 * r.energy_price_per_kwh * r.pue
                                                                        AS energy_usd_per_1m_output_tokens,
       (r.slo_ttft_ms IS NULL OR q.ttft_p99_ms <= r.slo_ttft_ms)
         AND (r.slo_tpot_ms IS NULL OR q.tpot_p99_ms <= r.slo_tpot_ms)
         AND (r.slo_e2e_ms IS NULL OR q.e2e_p99_ms <= r.slo_e2e_ms)    AS meets_slo_p99,
       r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms,
       q.longest_context_tokens,
       -- energy per request: the window's energy over the requests whose last token arrived in it (requests_s's)
       l.energy_j / nullif(q.completed_in_window, 0)                    AS j_per_request,
       (l.energy_j - p.idle_power_w * l.window_s) / nullif(q.completed_in_window, 0)
                                                                        AS j_per_request_above_idle,
       nullif(concat_ws('; ',
           CASE WHEN l.energy_j IS NULL AND l.source LIKE 'imported%' THEN 'imported: the tool measured no energy'
                WHEN l.energy_j IS NULL AND d.telemetry_source = 'none' THEN 'no energy: telemetry none'
                WHEN l.energy_j IS NULL THEN 'no energy: the counter gave no reading for this window (unavailable, '
                                             || 'or it went backwards)' END,
           CASE WHEN l.energy_j IS NOT NULL AND coalesce(q.completed_in_window, 0) = 0
                THEN 'no request ended in the window: no energy per request' END,
           CASE WHEN l.energy_j IS NOT NULL AND p.idle_power_w IS NULL
                THEN 'no idle baseline: no above-idle figures' END), '')   AS energy_note
FROM load_runs l
JOIN deployments d USING (run_id, deployment_id)
LEFT JOIN runs r USING (run_id)
LEFT JOIN v_request_stats q USING (run_id, deployment_id, load_point_id)
LEFT JOIN v_itl_stats i USING (run_id, deployment_id, load_point_id)
LEFT JOIN (SELECT run_id, deployment_id,
                  CASE WHEN idle_power_w_before IS NOT NULL AND idle_power_w_after IS NOT NULL
                       THEN (idle_power_w_before + idle_power_w_after) / 2
                       ELSE coalesce(idle_power_w_before, idle_power_w_after) END AS idle_power_w
           FROM deployments) p USING (run_id, deployment_id)
WHERE l.status = 'ok';

-- Kept in load_points_core (sql/schema.sql) rather than planned at every report from the views above: filled where
-- point_stats is (wattbench/warehouse.refresh_kept_views) and again whenever a run's own fields change
-- (warehouse.set_run_fields: its SLO, prices, start time). tests/test_point_stats.py checks they agree.
CREATE OR REPLACE VIEW v_load_points_core AS SELECT * FROM load_points_core;

-- v_load_points: the figures above, the sampled trace inside each window (v_window_gpu), the step decomposition
-- (load_runs, computed by the load generator: agent/wattbench_agent/loadgen/steps.py), the window's flags
-- (v_window_flags) and, for a capacity search's probe, its search, order, phase and verdict (NULL otherwise), columns
-- in this order.
CREATE OR REPLACE VIEW v_load_points AS
SELECT c.* EXCLUDE (usd_per_1m_output_tokens, energy_usd_per_1m_output_tokens, meets_slo_p99, slo_ttft_ms, slo_tpot_ms,
                    slo_e2e_ms, longest_context_tokens),
       g.trace_mean_w_per_gpu, g.trace_peak_w_per_gpu, g.peak_hbm_mib_per_gpu, g.capped_share,
       g.power_capped_share, g.thermal_capped_share, g.mean_sm_clock_mhz,
       l.decode_step_ms, l.stalled_gap_fraction, l.stall_ms_mean, l.expected_stalled_fraction, l.phase_state,
       l.delivery_stalled_fraction, l.delivery_stall_ms_mean, l.prefills_per_step, l.prefills_per_step_se,
       l.shared_prefill_fraction, l.phase_note,
       f.host_saturated, f.gpu_throttled,
       c.usd_per_1m_output_tokens, c.energy_usd_per_1m_output_tokens, c.meets_slo_p99, c.slo_ttft_ms, c.slo_tpot_ms,
       c.slo_e2e_ms, c.longest_context_tokens, l.search_id, l.probe, l.probe_phase, l.probe_verdict
FROM v_load_points_core c
LEFT JOIN v_window_gpu g USING (run_id, deployment_id, load_point_id)
LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)
LEFT JOIN v_window_flags f USING (run_id, deployment_id, load_point_id);

-- The figures a user may act on, one row each: its label, unit, which direction is better, and how its value over
-- repeats is summarised (v_point_figures): scale 'log' (a positive quantity: the mean of the repeats, its interval
-- a t interval on the log scale), 'reciprocal' (a cost per token: price over the mean of its denominator, e.g. $ per
-- 1M output tokens = price / mean throughput, the interval mapped from the denominator's), 'linear' (a difference
-- that may be negative: a plain t interval). quantile: the level of a latency percentile (its interval needs enough
-- requests beyond it in every repeat: MIN_BEYOND_PERCENTILE, docs/MEASUREMENT.md).
CREATE OR REPLACE VIEW v_metric_catalog AS
SELECT * FROM (VALUES
    ('output_tok_s',                    'output throughput (window)',          'tok/s',  'higher',  1, 'log', NULL),
    ('vllm_output_throughput',          'output throughput (whole run, vllm bench serve''s)', 'tok/s', 'higher', 2, 'log', NULL),
    ('requests_s',                      'request throughput',                  'req/s',  'higher',  3, 'log', NULL),
    ('goodput_requests_s',              'goodput at the SLO',                  'req/s',  'higher',  4, 'log', NULL),
    ('output_tokens_per_j',             'tokens per joule',                    'tok/J',  'higher',  5, 'log', NULL),
    ('output_tokens_per_j_above_idle',  'tokens per joule above idle',         'tok/J',  'higher',  6, 'log', NULL),
    ('mean_power_w',                    'power (energy counter)',              'W',      'lower',   7, 'log', NULL),
    ('counter_w_per_gpu',               'power per GPU (energy counter)',      'W',      'lower',   8, 'log', NULL),
    ('above_idle_power_w',              'power above idle',                    'W',      'lower',   9, 'linear', NULL),
    ('usd_per_1m_output_tokens',        '$ per 1M output tokens (GPU-hours)',  '$',      'lower',  10, 'reciprocal', NULL),
    ('energy_usd_per_1m_output_tokens', 'energy $ per 1M output tokens',       '$',      'lower',  11, 'reciprocal', NULL),
    ('j_per_request',                   'energy per request',                  'J',      'lower',  12, 'log', NULL),
    ('j_per_request_above_idle',        'energy per request above idle',       'J',      'lower',  13, 'log', NULL),
    ('j_per_output_token',              'energy per output token',             'J',      'lower',  14, 'log', NULL),
    ('j_per_output_token_above_idle',   'energy per output token above idle',  'J',      'lower',  15, 'log', NULL),
    ('ttft_p50_ms',                     'TTFT p50',                            'ms',     'lower',  20, 'log', 0.50),
    ('ttft_p90_ms',                     'TTFT p90',                            'ms',     'lower',  21, 'log', 0.90),
    ('ttft_p99_ms',                     'TTFT p99',                            'ms',     'lower',  22, 'log', 0.99),
    ('tpot_p50_ms',                     'TPOT p50',                            'ms',     'lower',  23, 'log', 0.50),
    ('tpot_p90_ms',                     'TPOT p90',                            'ms',     'lower',  24, 'log', 0.90),
    ('tpot_p99_ms',                     'TPOT p99',                            'ms',     'lower',  25, 'log', 0.99),
    ('itl_p50_ms',                      'ITL p50',                             'ms',     'lower',  26, 'log', 0.50),
    ('itl_p90_ms',                      'ITL p90',                             'ms',     'lower',  27, 'log', 0.90),
    ('itl_p99_ms',                      'ITL p99',                             'ms',     'lower',  28, 'log', 0.99),
    ('e2e_p50_ms',                      'E2E p50',                             'ms',     'lower',  29, 'log', 0.50),
    ('e2e_p90_ms',                      'E2E p90',                             'ms',     'lower',  30, 'log', 0.90),
    ('e2e_p99_ms',                      'E2E p99',                             'ms',     'lower',  31, 'log', 0.99)
) AS m(metric, label, unit, better, ord, scale, quantile);

-- A figure with its 95% interval as text: '8212.3 [8140.1, 8284.5]'; where there is no interval, the bare value and,
-- when given, why there is none: '89.7 (no interval: ...)'. fmt_fig: the same of a v_point_figures row's struct
-- (estimate, lo, hi, method).
CREATE OR REPLACE MACRO fmt_ci(v, lo, hi, d, why := NULL) AS
    CASE WHEN v IS NULL THEN NULL
         WHEN lo IS NULL OR hi IS NULL OR isnan(lo) OR isnan(hi) THEN round(v, d)::VARCHAR || coalesce(' (' || why || ')', '')
         ELSE round(v, d)::VARCHAR || ' [' || round(lo, d)::VARCHAR || ', ' || round(hi, d)::VARCHAR || ']' END;
CREATE OR REPLACE MACRO fmt_fig(f, d) AS fmt_ci(f.estimate, f.lo, f.hi, d, why := f.method);

-- Student's t, 0.975 quantile, by degrees of freedom (the 95% two-sided interval of a mean).
CREATE OR REPLACE MACRO t975(df) AS
    CASE WHEN df IS NULL OR df < 1 THEN NULL
         WHEN df <= 30 THEN [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
                             2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                             2.060, 2.056, 2.052, 2.048, 2.045, 2.042][df]
         WHEN df <= 40 THEN 2.021 WHEN df <= 60 THEN 2.000 WHEN df <= 120 THEN 1.980 ELSE 1.960 END;

-- The 95% interval of the mean m of k positive repeats (sample stdev s) on the log scale: log(m) +- t(0.975, k-1) x
-- s / (m sqrt(k)) (the delta method's standard error of log(m)), so m x exp(-+ ...): positive, and it holds m.
-- Its coverage is checked by simulation in tests/reports/test_interval_coverage.py. `side`: -1 lower, +1 upper.
CREATE OR REPLACE MACRO log_mean_bound(m, s, k, side) AS
    CASE WHEN k IS NULL OR k < 2 OR m IS NULL OR NOT (m > 0) OR s IS NULL THEN NULL
         ELSE m * exp(side * t975(k - 1) * s / (m * sqrt(k))) END;

-- Student's t, two-sided p-value P(|T| >= |t|) at df degrees of freedom (floored to an integer, as t975 reads them;
-- at most 1000), by the closed forms of the integer-df CDF (theta = atan(|t| / sqrt(df)); odd df: 1 - 2/pi (theta +
-- sin cos (1 + sum_k prod_j 2j/(2j+1) cos^2k)); even df: 1 - sin (1 + sum_k prod_j (2j-1)/(2j) cos^2k)); equal to
-- scipy's within 1e-14 (tests/test_intervals.py). The engine contrasts' false discovery rate reads it.
CREATE OR REPLACE MACRO t_two_sided_p_int(a, n) AS
    1 - CASE WHEN n % 2 = 1
             THEN 2 / pi() * (atan(a / sqrt(n)) + sin(atan(a / sqrt(n))) * cos(atan(a / sqrt(n)))
                  * CASE WHEN n >= 3
                         THEN 1 + coalesce(list_sum(list_transform(range(1, (n - 1) // 2), lambda k:
                                  list_aggregate(list_transform(range(1, k + 1), lambda j: (2 * j)::DOUBLE / (2 * j + 1)),
                                                 'product') * pow(cos(atan(a / sqrt(n))), 2 * k))), 0)
                         ELSE 0 END)
             ELSE sin(atan(a / sqrt(n))) * (1 + coalesce(list_sum(list_transform(range(1, n // 2), lambda k:
                      list_aggregate(list_transform(range(1, k + 1), lambda j: (2 * j - 1)::DOUBLE / (2 * j)),
                                     'product') * pow(cos(atan(a / sqrt(n))), 2 * k))), 0)) END;
CREATE OR REPLACE MACRO t_two_sided_p(t, df) AS
    CASE WHEN t IS NULL OR df IS NULL OR isnan(t) OR isnan(df) OR df < 1 THEN NULL
         WHEN isinf(t) THEN 0.0
         ELSE greatest(t_two_sided_p_int(abs(t), least(floor(df), 1000)::BIGINT), 0.0) END;

-- What an interval describes, in words (v_point_figures_live's interval_scope, with its starts, repeats and the
-- prior's basis): every table, JSON and HTML figure prints it beside the interval.
CREATE OR REPLACE MACRO scope_text(scope, starts, k, basis) AS
    CASE scope
        WHEN 'starts' THEN 'another server start on this machine: 95% interval over ' || starts || ' starts, '
                           || k || ' repeats'
        WHEN 'starts+prior' THEN 'another server start or machine: 95% interval over ' || starts || ' starts, '
                                 || k || ' repeats, between-start spread pooled with the prior of ' || basis
        WHEN 'prior' THEN 'another server start or machine: 95% interval over ' || k || ' repeats of one start, '
                          || 'between-start spread from the prior of ' || basis
        ELSE 'within one server start: 95% interval over ' || k || ' repeats (says nothing of another start)' END;

-- A latency percentile's interval over repeats needs at least this many requests (gaps for ITL) beyond the
-- percentile in every repeat: n x (1 - q) >= 10, i.e. 20 a repeat for p50, 100 for p90, 1,000 for p99. Fewer, and
-- a repeat's sample percentile is biased towards its middle, so an interval around it covers far less than 95%
-- (tests/reports/test_interval_coverage.py measures both sides of the rule).
CREATE OR REPLACE MACRO MIN_BEYOND_PERCENTILE() AS 10;
CREATE OR REPLACE MACRO percentile_samples_needed(q) AS ceil(MIN_BEYOND_PERCENTILE() / (1 - q) - 1e-9)::BIGINT;

-- The figures that are one number per load run (one repeat of a point), in long form: what intervals over repeats
-- (v_point_figures) and paired engine contrasts (v_engine_contrasts) are computed from. Latency percentiles are each
-- repeat's own (over its requests); samples: the requests (TPOT: requests with a TPOT; ITL: gaps) each rests on.
CREATE OR REPLACE VIEW v_repeat_figures AS
SELECT run_id, deployment_id, load_point_id, engine, workload, point_label, repeat, server_start, metric, value,
       CASE WHEN metric LIKE 'tpot_%' THEN tpot_samples WHEN metric LIKE 'itl_%' THEN itl_samples
            WHEN metric LIKE 'ttft_%' OR metric LIKE 'e2e_%' THEN latency_samples END AS samples
FROM (
    UNPIVOT (SELECT run_id, deployment_id, load_point_id, engine, workload, point_label, repeat, server_start,
                    latency_samples, tpot_samples,
                    itl_samples, output_tok_s, vllm_output_throughput, requests_s, goodput_requests_s,
                    output_tokens_per_j, output_tokens_per_j_above_idle, mean_power_w, counter_w_per_gpu,
                    above_idle_power_w, usd_per_1m_output_tokens, energy_usd_per_1m_output_tokens,
                    j_per_request, j_per_request_above_idle, j_per_output_token, j_per_output_token_above_idle,
                    ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, tpot_p50_ms, tpot_p90_ms, tpot_p99_ms,
                    itl_p50_ms, itl_p90_ms, itl_p99_ms, e2e_p50_ms, e2e_p90_ms, e2e_p99_ms
             FROM v_load_points_core)
    ON output_tok_s, vllm_output_throughput, requests_s, goodput_requests_s, output_tokens_per_j,
       output_tokens_per_j_above_idle, mean_power_w, counter_w_per_gpu, above_idle_power_w,
       usd_per_1m_output_tokens, energy_usd_per_1m_output_tokens,
       j_per_request, j_per_request_above_idle, j_per_output_token, j_per_output_token_above_idle,
       ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, tpot_p50_ms, tpot_p90_ms, tpot_p99_ms,
       itl_p50_ms, itl_p90_ms, itl_p99_ms, e2e_p50_ms, e2e_p90_ms, e2e_p99_ms
    INTO NAME metric VALUE value);

-- Every figure of every point (one engine, workload and point label of a run), over its repeats, with its 95%
-- interval: one definition for every figure (docs/MEASUREMENT.md, "Repeats and intervals"). The estimate is the mean
-- of the repeats' values (a latency percentile: the mean of each repeat's percentile); a cost per token
-- ('reciprocal') is the price over the mean of its denominator (price / mean throughput), not a mean of per-repeat
-- costs. The interval: log_mean_bound (positive quantities; mapped through 1/x for costs), a plain t interval for
-- 'linear' figures; none from one repeat, and none for a latency percentile whose repeats have too few requests
-- beyond it (the method says how many it had and needs). Long form: pivot for reading (sql/point_figures.sql,
-- sql/load_points.sql). v_point_attrs: each point's attributes and repeats, over the load runs v_load_points_core
-- has (status ok), read from the tables themselves: none of its figures is needed, and planning that view again for
-- them was most of the time of a report over one run.
CREATE OR REPLACE VIEW v_point_attrs AS
    SELECT l.run_id, l.deployment_id, l.workload, point_label_of(l.point_label, l.load_point_id) AS point_label,
           any_value(l.source) AS source, any_value(d.config_name) AS engine, any_value(d.engine) AS engine_kind,
           any_value(d.engine_version) AS engine_version, any_value(d.model) AS model,
           any_value(d.precision) AS precision, any_value(d.tp) AS tp, any_value(d.gpu_name) AS gpu_name,
           any_value(coalesce(d.n_gpus, d.tp)) AS n_gpus, any_value(l.shape) AS shape,
           any_value(l.concurrency) AS concurrency, any_value(l.rate) AS rate, any_value(l.burstiness) AS burstiness,
           any_value(l.input_tokens) AS input_tokens, any_value(l.output_tokens) AS output_tokens,
           max(run_at_of(r.started_at, r.clock_anchor_unix_ns)) AS run_at, count(*) AS repeats,
           min(l.window_s) AS min_window_s
    FROM load_runs l JOIN deployments d USING (run_id, deployment_id) LEFT JOIN runs r USING (run_id)
    WHERE l.status = 'ok'
    GROUP BY ALL;

-- The between-start spread a figure's interval borrows where a run's own server starts cannot give it (one start, or
-- too few): sd of ln(figure) between whole runs sharing a protocol, per engine kind (and GPU, NULL: any) and metric,
-- with its degrees of freedom and the rows it came from (basis). The rows between the markers are written by
-- `python -m benchmarks.interval_coverage --write-prior` from the committed real bundles (results/interval_coverage.md
-- says how, and how well intervals built with it cover other runs); the emulator's row is its own model (emulator
-- profiles.START_SPEED_SD, docs/EMULATOR.md), not a measurement. docs/MEASUREMENT.md, "Server starts".
CREATE OR REPLACE VIEW v_between_start_prior AS
SELECT engine_kind::VARCHAR AS engine_kind, gpu_name::VARCHAR AS gpu_name, metric::VARCHAR AS metric,
       sd_log::DOUBLE AS sd_log, df::INTEGER AS df, basis::VARCHAR AS basis
FROM (VALUES
    -- BEGIN between_start_prior (generated)
    ('vllm', NULL, 'above_idle_power_w', 0.0870, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'counter_w_per_gpu', 0.0667, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'e2e_p50_ms', 0.0725, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'e2e_p90_ms', 0.0987, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'e2e_p99_ms', 0.1105, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'energy_usd_per_1m_output_tokens', 0.0316, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'goodput_requests_s', 0.0770, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'itl_p50_ms', 0.0178, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'itl_p90_ms', 0.2868, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'itl_p99_ms', 0.2583, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'j_per_output_token', 0.0316, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'j_per_output_token_above_idle', 0.0393, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'j_per_request', 0.0325, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'j_per_request_above_idle', 0.0396, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'mean_power_w', 0.0667, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'output_tok_s', 0.0758, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'output_tokens_per_j', 0.0316, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'output_tokens_per_j_above_idle', 0.0393, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'requests_s', 0.0770, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'tpot_p50_ms', 0.0689, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'tpot_p90_ms', 0.0923, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'tpot_p99_ms', 0.1054, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'ttft_p50_ms', 0.1595, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'ttft_p90_ms', 0.2055, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'ttft_p99_ms', 0.2222, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'usd_per_1m_output_tokens', 0.0758, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('vllm', NULL, 'vllm_output_throughput', 0.0709, 8, 'vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, bf16 and fp8, 6 runs on 6 H200 boards (results/interval_coverage.md)'),
    ('emulator', NULL, NULL, 0.03, 1000, 'the emulator''s own between-start speed spread (START_SPEED_SD), by construction')
    -- END between_start_prior (generated)
) AS p(engine_kind, gpu_name, metric, sd_log, df, basis);

-- The between-start spread of a RATIO of two engines of one kind measured on the same machine (the contrasts'): sd of
-- ln(engine / other) between runs, per engine kind and metric. The two engines share their board and host, so their
-- ratio moves between starts far less than either figure (v_between_start_prior's two rows added would say). Written
-- with the figures' prior by `python -m benchmarks.interval_coverage --write-prior`. Where none is written, a
-- contrast adds the two figures' priors (their starts are separate; the conservative reading).
CREATE OR REPLACE VIEW v_between_start_ratio_prior AS
SELECT engine_kind::VARCHAR AS engine_kind, metric::VARCHAR AS metric, sd_log::DOUBLE AS sd_log, df::INTEGER AS df,
       basis::VARCHAR AS basis
FROM (VALUES
    -- BEGIN between_start_ratio_prior (generated)
    ('vllm', 'above_idle_power_w', 0.0392, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'counter_w_per_gpu', 0.0284, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'e2e_p50_ms', 0.0383, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'e2e_p90_ms', 0.0610, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'e2e_p99_ms', 0.0713, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'energy_usd_per_1m_output_tokens', 0.0164, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'goodput_requests_s', 0.0432, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'itl_p50_ms', 0.0037, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'itl_p90_ms', 0.3384, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'itl_p99_ms', 0.1258, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'j_per_output_token', 0.0164, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'j_per_output_token_above_idle', 0.0062, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'j_per_request', 0.0173, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'j_per_request_above_idle', 0.0086, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'mean_power_w', 0.0284, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'output_tok_s', 0.0434, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'output_tokens_per_j', 0.0164, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'output_tokens_per_j_above_idle', 0.0062, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'requests_s', 0.0432, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'tpot_p50_ms', 0.0337, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'tpot_p90_ms', 0.0519, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'tpot_p99_ms', 0.0690, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'ttft_p50_ms', 0.1316, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'ttft_p90_ms', 0.0650, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'ttft_p99_ms', 0.0445, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'usd_per_1m_output_tokens', 0.0434, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)'),
    ('vllm', 'vllm_output_throughput', 0.0468, 3, 'the fp8 / bf16 ratio of vLLM 0.25, Llama-3.1-8B shape, 16 streams 512/128, over 4 runs that measured both on one H200 (results/interval_coverage.md)')
    -- END between_start_ratio_prior (generated)
) AS p(engine_kind, metric, sd_log, df, basis)
WHERE df > 0;

-- The prior a point's figure borrows: the most specific row of v_between_start_prior for its engine kind (an
-- emulator's profile reads 'emulator'), GPU and metric (a row with metric NULL holds for every metric).
CREATE OR REPLACE VIEW v_point_prior AS
SELECT a.run_id, a.deployment_id, a.workload, a.point_label, c.metric, p.sd_log, p.df, p.basis
FROM v_point_attrs a
CROSS JOIN v_metric_catalog c
JOIN v_between_start_prior p
  ON (p.engine_kind = a.engine_kind OR (p.engine_kind = 'emulator' AND a.engine_kind LIKE 'emulator:%'))
 AND (p.gpu_name IS NULL OR p.gpu_name = a.gpu_name)
 AND (p.metric IS NULL OR p.metric = c.metric)
WHERE c.scale <> 'linear'
QUALIFY row_number() OVER (PARTITION BY a.run_id, a.deployment_id, a.workload, a.point_label, c.metric
                           ORDER BY (p.gpu_name IS NULL), (p.metric IS NULL)) = 1;

-- Every figure's estimate and its 95% interval for what ANOTHER server start of the same engine gives (docs/
-- MEASUREMENT.md, "Repeats and intervals" and "Server starts"). The estimate is the mean of the repeats' values (a
-- latency percentile: the mean of each repeat's percentile; a cost per token, 'reciprocal', the price over the mean of
-- its denominator). The model, on the log scale (the delta method, as x/m): a repeat's value = the mean + its server
-- start's offset (between-start sd b) + the repeat's own noise (within-start sd w). w pools the spread of repeats
-- inside each start; b comes from the spread of the starts' means (less what w explains), pooled with the prior of
-- v_point_prior where one applies (its df added to the starts' own S - 1). The interval holds another start's mean of
-- as many repeats: m x exp(+- t x sqrt(b^2 (1 + 1/S) + w^2 (1/N + 1/n))), N the repeats, n those per start, t at the
-- Welch-Satterthwaite degrees of freedom. interval_scope says what it describes:
--   starts         another start of the engine on this machine, from this run's S >= 2 starts alone
--   starts+prior   another start or machine: this run's starts pooled with the prior (its basis in `method`)
--   prior          another start or machine: one start here, the between-start spread from the prior alone
--   one_start      within one server start only (one start, no prior): the interval of the mean of its repeats, as
--                  before schema 12; it says nothing of another start, and no sizing or buying verdict uses it
-- 'linear' figures (differences that may be negative) take no prior. No interval from one repeat in one start, nor for
-- a latency percentile whose repeats have too few requests beyond it (the method says how many it had and needs).
-- Long form: pivot for reading (sql/point_figures.sql, sql/load_points.sql). v_point_attrs: each point's attributes
-- and repeats, read from the tables themselves.
CREATE OR REPLACE VIEW v_point_figures_live AS
WITH per_repeat AS (
    SELECT f.*, c.scale, c.quantile,
           CASE WHEN c.scale = 'reciprocal' THEN 1 / nullif(f.value, 0) ELSE f.value END AS x  -- what is averaged
    FROM v_repeat_figures f JOIN v_metric_catalog c USING (metric)),
by_start AS (  -- each server start's repeats: how many, their mean, their sum of squares about it
    SELECT run_id, deployment_id, workload, point_label, metric, server_start, count(x) AS n_s, avg(x) AS xbar,
           coalesce(var_samp(x), 0) * (count(x) - 1) AS ssw
    FROM per_repeat WHERE x IS NOT NULL GROUP BY ALL),
levels AS (
    SELECT run_id, deployment_id, workload, point_label, metric, count(*) AS starts, sum(ssw) AS ssw,
           sum(n_s - 1) AS df_w, coalesce(var_samp(xbar), 0) AS var_means, avg(1.0 / n_s) AS inv_n,
           avg(n_s) AS n_bar
    FROM by_start WHERE n_s > 0 GROUP BY ALL),
summed AS (
    SELECT run_id, deployment_id, workload, point_label, metric, any_value(scale) AS scale,
           any_value(quantile) AS quantile, avg(x) AS m, stddev_samp(x) AS s, count(x) AS k,
           min(samples) AS min_samples, sum(samples) AS samples, stddev_samp(value) AS stdev,
           list(value ORDER BY repeat) AS per_repeat
    FROM per_repeat GROUP BY run_id, deployment_id, workload, point_label, metric),
why AS (  -- a reason there is no interval, NULL where there is one
    SELECT *,
           CASE WHEN k < 2 THEN 'one repeat: no interval'
                WHEN quantile IS NOT NULL AND coalesce(min_samples, 0) < percentile_samples_needed(quantile)
                THEN 'no interval: ' || coalesce(min_samples, 0) || ' samples in a repeat, the p'
                     || round(100 * quantile)::INTEGER || ' needs ' || percentile_samples_needed(quantile)
                WHEN scale <> 'linear' AND m = 0 AND s = 0 THEN NULL
                WHEN scale <> 'linear' AND NOT (m > 0) THEN 'no interval: the mean over repeats is not positive'
           END AS no_interval
    FROM summed LEFT JOIN levels lv USING (run_id, deployment_id, workload, point_label, metric)),
parts AS (  -- the variance components, relative to m on the log scale (absolute for linear figures)
    SELECT w.*, pr.sd_log AS prior_sd, coalesce(pr.df, 0) AS prior_df, pr.basis AS prior_basis,
           CASE WHEN scale = 'linear' THEN 1.0 ELSE 1.0 / nullif(m * m, 0) END AS rel,
           ssw / nullif(df_w, 0) AS w2_raw,
           CASE WHEN scale = 'linear' OR pr.sd_log IS NULL THEN 0 ELSE pr.df END AS pdf
    FROM why w
    LEFT JOIN v_point_prior pr USING (run_id, deployment_id, workload, point_label, metric)),
comp AS (
    SELECT *,
           coalesce(w2_raw, 0) * rel AS w2,
           greatest(var_means - coalesce(w2_raw, 0) * inv_n, 0) * rel AS b2_own,
           greatest(starts - 1, 0) AS df_b
    FROM parts),
pooled AS (
    SELECT *,
           CASE WHEN df_b + pdf > 0
                THEN (df_b * b2_own + pdf * coalesce(prior_sd * prior_sd, 0)) / (df_b + pdf) END AS b2,
           CASE WHEN df_b > 0 AND pdf > 0 THEN 'starts+prior' WHEN df_b > 0 THEN 'starts'
                WHEN pdf > 0 THEN 'prior' ELSE 'one_start' END AS interval_scope
    FROM comp),
se AS (
    SELECT *,
           CASE WHEN interval_scope = 'one_start' THEN w2 / k
                ELSE b2 * (1 + 1.0 / starts) + w2 * (1.0 / k + 1.0 / n_bar) END AS se2,
           -- Welch-Satterthwaite: the between part has df_b + pdf, the within part df_w
           CASE WHEN interval_scope = 'one_start' THEN k - 1
                WHEN b2 * (1 + 1.0 / starts) + w2 * (1.0 / k + 1.0 / n_bar) = 0 THEN 1000
                ELSE floor(power(b2 * (1 + 1.0 / starts) + w2 * (1.0 / k + 1.0 / n_bar), 2)
                           / nullif(power(b2 * (1 + 1.0 / starts), 2) / nullif(df_b + pdf, 0)
                                    + CASE WHEN df_w > 0 THEN power(w2 * (1.0 / k + 1.0 / n_bar), 2) / df_w
                                           ELSE 0 END, 0)) END AS df_t
    FROM pooled),
over_repeats AS (
    SELECT run_id, deployment_id, workload, point_label, metric, starts, interval_scope,
           CASE WHEN scale = 'reciprocal' THEN 1 / nullif(m, 0) ELSE m END AS estimate,
           CASE WHEN no_interval IS NOT NULL THEN NULL
                WHEN scale = 'linear' THEN m - t975(least(df_t, 1000)::INTEGER) * sqrt(se2)
                WHEN m = 0 THEN 0.0
                WHEN scale = 'reciprocal' THEN 1 / (m * exp(t975(least(df_t, 1000)::INTEGER) * sqrt(se2)))
                ELSE m * exp(-t975(least(df_t, 1000)::INTEGER) * sqrt(se2)) END AS lo,
           CASE WHEN no_interval IS NOT NULL THEN NULL
                WHEN scale = 'linear' THEN m + t975(least(df_t, 1000)::INTEGER) * sqrt(se2)
                WHEN m = 0 THEN 0.0
                WHEN scale = 'reciprocal' THEN 1 / (m * exp(-t975(least(df_t, 1000)::INTEGER) * sqrt(se2)))
                ELSE m * exp(t975(least(df_t, 1000)::INTEGER) * sqrt(se2)) END AS hi,
           stdev, coalesce(samples, k)::BIGINT AS n, per_repeat,
           sqrt(b2) AS between_start_sd,
           sqrt(w2) AS within_start_sd,
           coalesce(no_interval,
                    CASE WHEN scale <> 'linear' AND m = 0 THEN 'every one of ' || k || ' repeats is 0' END,
                    scope_text(interval_scope, starts, k, prior_basis)
                    || CASE WHEN scale = 'reciprocal' THEN '; price over the mean of its denominator' ELSE '' END)
               AS method
    FROM se)
SELECT a.run_id, a.source, a.engine, a.engine_kind, a.engine_version, a.model, a.precision, a.tp, a.gpu_name,
       a.n_gpus, a.deployment_id, a.workload, a.point_label, a.shape, a.concurrency, a.rate, a.burstiness,
       a.input_tokens, a.output_tokens, a.run_at, a.repeats, a.min_window_s,
       f.metric, c.label, c.unit, c.better, c.ord, f.estimate, f.lo, f.hi, f.stdev, f.n, f.per_repeat, f.method,
       (f.hi - f.lo) / 2 / nullif(abs(f.estimate), 0) AS rel_half_width,
       f.starts, f.interval_scope, f.between_start_sd, f.within_start_sd
FROM v_point_attrs a
JOIN over_repeats f USING (run_id, deployment_id, workload, point_label)
JOIN v_metric_catalog c USING (metric);

-- Kept in point_figures (sql/schema.sql) with load_points_core, from which it is made, and refreshed with it
-- (wattbench/warehouse.refresh_kept_views, set_run_fields): a report reads rows, not this plan.
CREATE OR REPLACE VIEW v_point_figures AS SELECT * FROM point_figures;

-- SLO capacity (docs/MEASUREMENT.md, "SLO capacity"): per search (searches, what the agent's search found from its
-- probes), the capacity with its 95% interval and the figures measured at it, over the repeats of the probes at the
-- capacity load (point_figures of that point: a t interval over repeats; one window: no interval). capacity_per_gpu:
-- the capacity over the deployment's GPUs. NULL figures where no load met the SLO (status none) or the search ended on
-- a failed server; `note` says why. Kept in slo_capacity (refreshed with point_figures, from which it reads).
CREATE OR REPLACE VIEW v_slo_capacity_live AS
WITH f AS (
    SELECT run_id, deployment_id, workload, point_label,
           any_value(input_tokens) AS input_tokens, any_value(output_tokens) AS output_tokens,
           map_from_entries(list((metric, struct_pack(estimate := estimate, lo := lo, hi := hi)))) AS m,
           any_value(interval_scope) FILTER (WHERE metric = 'goodput_requests_s') AS interval_scope
    FROM point_figures
    WHERE metric IN ('output_tok_s', 'goodput_requests_s', 'output_tokens_per_j', 'j_per_request',
                     'j_per_request_above_idle', 'usd_per_1m_output_tokens', 'mean_power_w', 'ttft_p99_ms',
                     'tpot_p99_ms', 'e2e_p99_ms')
    GROUP BY ALL)
SELECT s.run_id, s.source, d.config_name AS engine, d.engine AS engine_kind, d.model, d.precision, d.tp, d.gpu_name,
       coalesce(d.n_gpus, d.tp) AS n_gpus, s.deployment_id, s.search_id, s.workload, s.over, s.unit, s.shape,
       f.input_tokens, f.output_tokens, s.slo_ttft_ms, s.slo_tpot_ms, s.slo_e2e_ms, s.attainment, s.status,
       s.capacity, s.capacity_lo, s.capacity_hi, s.capacity / nullif(coalesce(d.n_gpus, d.tp), 0) AS capacity_per_gpu,
       s.at_point_label, s.repeats_at_capacity, s.binding, s.binding_share, s.binding_load,
       f.m['output_tok_s'].estimate AS output_tok_s, f.m['output_tok_s'].lo AS output_tok_s_lo,
       f.m['output_tok_s'].hi AS output_tok_s_hi,
       f.m['goodput_requests_s'].estimate AS goodput_requests_s, f.m['goodput_requests_s'].lo AS goodput_requests_s_lo,
       f.m['goodput_requests_s'].hi AS goodput_requests_s_hi,
       f.m['output_tokens_per_j'].estimate AS output_tokens_per_j,
       f.m['output_tokens_per_j'].lo AS output_tokens_per_j_lo, f.m['output_tokens_per_j'].hi AS output_tokens_per_j_hi,
       f.m['j_per_request'].estimate AS j_per_request, f.m['j_per_request'].lo AS j_per_request_lo,
       f.m['j_per_request'].hi AS j_per_request_hi,
       f.m['j_per_request_above_idle'].estimate AS j_per_request_above_idle,
       f.m['j_per_request_above_idle'].lo AS j_per_request_above_idle_lo,
       f.m['j_per_request_above_idle'].hi AS j_per_request_above_idle_hi,
       f.m['usd_per_1m_output_tokens'].estimate AS usd_per_1m_output_tokens,
       f.m['usd_per_1m_output_tokens'].lo AS usd_per_1m_output_tokens_lo,
       f.m['usd_per_1m_output_tokens'].hi AS usd_per_1m_output_tokens_hi,
       f.m['mean_power_w'].estimate AS mean_power_w, f.m['mean_power_w'].lo AS mean_power_w_lo,
       f.m['mean_power_w'].hi AS mean_power_w_hi,
       f.m['ttft_p99_ms'].estimate AS ttft_p99_ms, f.m['tpot_p99_ms'].estimate AS tpot_p99_ms,
       f.m['e2e_p99_ms'].estimate AS e2e_p99_ms,
       s.probes, s.window_s, s.time_s, s.stopped_by, s.answer, coalesce(s.server_start, 1) AS server_start,
       f.interval_scope,
       nullif(concat_ws('; ',
           CASE s.status WHEN 'none' THEN 'no load meets the SLO: no capacity, no figures at it'
                         WHEN 'server_failed' THEN 'the server stopped answering: the search ended'
                         WHEN 'refused' THEN 'the server refused every request: the search ended'
                         WHEN 'at_least' THEN 'at least: no load up to the search''s bound missed the SLO' END,
           CASE WHEN s.capacity IS NOT NULL AND f.run_id IS NULL THEN 'no load run of the capacity load is in the warehouse' END,
           CASE WHEN s.capacity IS NOT NULL AND coalesce(s.repeats_at_capacity, 0) < 2
                THEN 'one window at the capacity: its figures have no interval' END,
           s.note), '')                                                 AS note
FROM searches s
JOIN deployments d USING (run_id, deployment_id)
LEFT JOIN f ON f.run_id = s.run_id AND f.deployment_id = s.deployment_id AND f.workload = s.workload
           AND f.point_label = s.at_point_label;

-- Kept in slo_capacity (sql/schema.sql), refreshed with point_figures (wattbench/warehouse.refresh_kept_views).
CREATE OR REPLACE VIEW v_slo_capacity AS SELECT * FROM slo_capacity;

-- Engines of one run compared point by point: every pair (engine, other engine) measured at the same workload and
-- point label, on every figure of v_repeat_figures (latency percentiles included: each repeat's own). Repeats pair only
-- within a round: the same server start and repeat number of a plan's point (run back to back, on the same requests
-- and arrivals); a capacity search's probes are no round and are not paired. The ratio engine / other is the
-- geometric mean of the paired ratios, its 95% interval that of the mean log ratio over server starts (the model of
-- v_point_figures_live: within-start spread of the pairs, between-start spread of the starts' means, pooled with both
-- engines' priors where one applies, b^2 = b_engine^2 + b_other^2: their starts are separate), and the finding
-- survives the run's many comparisons: Benjamini-Hochberg over every tested figure x point x engine pair of the run
-- (q_bh: the false discovery rate at which it is a finding; 5%; p from Student's t, t_two_sided_p). A difference only where q_bh < 0.05; 'no
-- significant difference' otherwise (its per-comparison interval may still exclude 1: the finding says so). Chosen
-- over Holm's familywise control: a run's ~150 comparisons are mostly the same few facts seen through correlated
-- figures (tok/s, requests/s, goodput, $ per 1M), so familywise control would hide what every repeat shows. Not tested, said so: one pair of repeats; a
-- latency percentile with too few requests beyond it in a repeat of either engine; and pairs where either value is
-- <= 0 are left out and counted (excluded).
CREATE OR REPLACE VIEW v_engine_contrasts AS
WITH pr AS (
    SELECT f.*, l.search_id IS NOT NULL AS probe
    FROM v_repeat_figures f LEFT JOIN load_runs l USING (run_id, load_point_id)),
pairs_all AS (
    SELECT a.run_id, a.workload, a.point_label, a.metric, a.engine, b.engine AS other, a.deployment_id,
           b.deployment_id AS other_deployment_id, a.server_start, a.value AS va, b.value AS vb,
           least(a.samples, b.samples) AS samples
    FROM pr a JOIN pr b
      ON b.run_id = a.run_id AND b.workload = a.workload AND b.point_label = a.point_label
     AND b.metric = a.metric AND b.repeat = a.repeat AND b.server_start = a.server_start AND b.engine <> a.engine
    WHERE NOT a.probe AND NOT b.probe),
by_start AS (
    SELECT run_id, workload, point_label, metric, engine, other, any_value(deployment_id) AS deployment_id,
           any_value(other_deployment_id) AS other_deployment_id, server_start,
           count(*) FILTER (WHERE va > 0 AND vb > 0) AS n_s,
           count(*) FILTER (WHERE NOT (va > 0 AND vb > 0)) AS excluded,
           avg(ln(va / vb)) FILTER (WHERE va > 0 AND vb > 0) AS dbar,
           coalesce(var_samp(ln(va / vb)) FILTER (WHERE va > 0 AND vb > 0), 0)
             * greatest(count(*) FILTER (WHERE va > 0 AND vb > 0) - 1, 0) AS ssw,
           min(samples) AS min_samples
    FROM pairs_all GROUP BY ALL),
paired AS (
    SELECT run_id, workload, point_label, metric, engine, other, any_value(deployment_id) AS deployment_id,
           any_value(other_deployment_id) AS other_deployment_id,
           sum(n_s) AS pairs, sum(excluded) AS excluded, count(*) FILTER (WHERE n_s > 0) AS starts,
           sum(n_s * dbar) / nullif(sum(n_s), 0) AS m, sum(ssw) AS ssw,
           sum(greatest(n_s - 1, 0)) AS df_w, coalesce(var_samp(dbar) FILTER (WHERE n_s > 0), 0) AS var_means,
           avg(1.0 / n_s) FILTER (WHERE n_s > 0) AS inv_n, min(min_samples) AS min_samples
    FROM by_start GROUP BY ALL),
with_prior AS (
    SELECT p.*, c.quantile, c.scale,
           CASE WHEN rp.sd_log IS NOT NULL THEN rp.sd_log * rp.sd_log
                WHEN pa.sd_log IS NOT NULL AND pb.sd_log IS NOT NULL
                THEN pa.sd_log * pa.sd_log + pb.sd_log * pb.sd_log END AS prior_b2,
           CASE WHEN rp.sd_log IS NOT NULL THEN rp.df
                WHEN pa.sd_log IS NOT NULL AND pb.sd_log IS NOT NULL THEN least(pa.df, pb.df) ELSE 0 END AS pdf,
           ssw / nullif(df_w, 0) AS w2,
           greatest(starts - 1, 0) AS df_b
    FROM paired p JOIN v_metric_catalog c USING (metric)
    LEFT JOIN v_point_prior pa ON pa.run_id = p.run_id AND pa.deployment_id = p.deployment_id
         AND pa.workload = p.workload AND pa.point_label = p.point_label AND pa.metric = p.metric
    LEFT JOIN v_point_prior pb ON pb.run_id = p.run_id AND pb.deployment_id = p.other_deployment_id
         AND pb.workload = p.workload AND pb.point_label = p.point_label AND pb.metric = p.metric
    LEFT JOIN (SELECT d.run_id, d.deployment_id, d.engine FROM deployments d) da
           ON da.run_id = p.run_id AND da.deployment_id = p.deployment_id
    LEFT JOIN (SELECT d.run_id, d.deployment_id, d.engine FROM deployments d) db
           ON db.run_id = p.run_id AND db.deployment_id = p.other_deployment_id
    LEFT JOIN v_between_start_ratio_prior rp
           ON rp.engine_kind = da.engine AND da.engine = db.engine AND rp.metric = p.metric),
judged AS (
    SELECT *,
           CASE WHEN coalesce(pairs, 0) < 2 THEN 'one repeat: not tested'
                WHEN quantile IS NOT NULL AND coalesce(min_samples, 0) < percentile_samples_needed(quantile)
                THEN 'too few requests per repeat for the p' || round(100 * quantile)::INTEGER || ': not tested'
           END AS untested,
           CASE WHEN df_b + pdf > 0
                THEN (df_b * greatest(var_means - coalesce(w2, 0) * inv_n, 0) + pdf * coalesce(prior_b2, 0))
                     / (df_b + pdf) END AS b2,
           CASE WHEN df_b > 0 AND pdf > 0 THEN 'starts+prior' WHEN df_b > 0 THEN 'starts'
                WHEN pdf > 0 THEN 'prior' ELSE 'one_start' END AS interval_scope
    FROM with_prior),
se AS (  -- the mean log ratio's standard error over starts; one start and no prior: over its pairs alone
    SELECT *,
           CASE WHEN interval_scope = 'one_start' THEN coalesce(w2, 0) / pairs
                ELSE b2 / starts + coalesce(w2, 0) / pairs END AS se2,
           CASE WHEN interval_scope = 'one_start' THEN pairs - 1
                WHEN b2 / starts + coalesce(w2, 0) / pairs = 0 THEN 1000
                ELSE power(b2 / starts + coalesce(w2, 0) / pairs, 2)
                     / (power(b2 / starts, 2) / (df_b + pdf)
                        + CASE WHEN df_w > 0 THEN power(coalesce(w2, 0) / pairs, 2) / df_w ELSE 0 END) END AS df_t
    FROM judged),
tested AS (
    SELECT *,
           CASE WHEN untested IS NULL THEN exp(m - t975(least(floor(df_t), 1000)::INTEGER) * sqrt(se2)) END AS ratio_lo,
           CASE WHEN untested IS NULL THEN exp(m + t975(least(floor(df_t), 1000)::INTEGER) * sqrt(se2)) END AS ratio_hi,
           CASE WHEN untested IS NULL AND se2 > 0 THEN t_two_sided_p(m / sqrt(se2), df_t)
                WHEN untested IS NULL AND m <> 0 THEN 0.0
                WHEN untested IS NULL THEN 1.0 END AS p
    FROM se),
ranked AS (  -- the run's tested comparisons, each engine pair once (engine > other), by p
    SELECT run_id, workload, point_label, metric, engine, other, p,
           row_number() OVER (PARTITION BY run_id ORDER BY p, workload, point_label, metric, engine, other) AS rk,
           count(*) OVER (PARTITION BY run_id) AS family
    FROM tested WHERE p IS NOT NULL AND engine > other),
family AS (  -- Benjamini-Hochberg: q_(i) = min over j >= i of p_(j) x m / j (the false discovery rate's q-value)
    SELECT run_id, workload, point_label, metric, engine, other, family,
           min(least(1.0, p * family / rk)) OVER (
               PARTITION BY run_id ORDER BY rk DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS q_bh
    FROM ranked),
adjusted AS (
    SELECT t.*, coalesce(f.q_bh, g.q_bh) AS q_bh, coalesce(f.family, g.family) AS family
    FROM tested t
    LEFT JOIN family f USING (run_id, workload, point_label, metric, engine, other)
    LEFT JOIN family g ON g.run_id = t.run_id AND g.workload = t.workload AND g.point_label = t.point_label
         AND g.metric = t.metric AND g.engine = t.other AND g.other = t.engine)
SELECT x.run_id, x.workload, x.point_label, x.metric, x.engine, x.other, x.pairs, exp(x.m) AS ratio, x.ratio_lo,
       x.ratio_hi,
       coalesce(x.untested, CASE WHEN x.q_bh < 0.05 THEN 'significant' ELSE 'no significant difference' END)
           AS verdict,
       'paired within rounds, log ratio over ' || x.starts || ' server start(s) ('
       || scope_text(x.interval_scope, x.starts, x.pairs, 'the two engines'' ratio between starts')
       || '); Benjamini-Hochberg over ' || coalesce(x.family, 0) || ' comparisons of the run' AS method,
       c.label, c.unit, c.better, c.ord,
       CASE WHEN x.untested IS NOT NULL THEN x.untested
            WHEN NOT (x.q_bh < 0.05) AND (x.ratio_lo > 1 OR x.ratio_hi < 1)
            THEN 'no significant difference at a 5% false discovery rate over ' || x.family || ' comparisons (p '
                 || printf('%.3g', x.p) || ', q ' || printf('%.3g', x.q_bh) || ')'
            WHEN NOT (x.q_bh < 0.05) THEN 'no significant difference'
            WHEN (x.m < 0) = (c.better = 'higher') THEN x.other || ' better'
            ELSE x.engine || ' better' END
       || CASE WHEN x.excluded > 0 THEN '; ' || x.excluded || ' pair(s) left out: a value <= 0' ELSE '' END AS finding,
       x.p, x.q_bh, x.family, x.excluded, x.starts, x.interval_scope
FROM adjusted x
JOIN v_metric_catalog c USING (metric);

-- Whether a point meets the run's SLO, judged on the conservative end of each SLO percentile (p99 TTFT, TPOT, E2E):
-- its interval's upper bound, or, where it has no interval (one repeat, or too few requests per repeat), the worst
-- repeat's value. *_bound_ms: the value judged; *_bound_from: which it was. One definition for the capacity plan and
-- the head-to-head's "at SLO" rows. meets_slo: false when a figure the SLO limits was not measured.
CREATE OR REPLACE VIEW v_point_slo AS
WITH b AS (
    SELECT run_id, deployment_id, engine, workload, point_label, metric,
           coalesce(hi, list_max(per_repeat)) AS bound,
           CASE WHEN hi IS NOT NULL THEN '95% upper bound' ELSE 'worst of ' || repeats || ' repeat(s)' END AS bound_from
    FROM point_figures WHERE metric IN ('ttft_p99_ms', 'tpot_p99_ms', 'e2e_p99_ms')),
p AS (
    SELECT run_id, deployment_id, engine, workload, point_label
    FROM point_figures GROUP BY ALL),
w AS (
    SELECT p.run_id, p.deployment_id, p.engine, p.workload, p.point_label,
           max(b.bound) FILTER (WHERE b.metric = 'ttft_p99_ms') AS ttft_p99_bound_ms,
           any_value(b.bound_from) FILTER (WHERE b.metric = 'ttft_p99_ms') AS ttft_p99_bound_from,
           max(b.bound) FILTER (WHERE b.metric = 'tpot_p99_ms') AS tpot_p99_bound_ms,
           any_value(b.bound_from) FILTER (WHERE b.metric = 'tpot_p99_ms') AS tpot_p99_bound_from,
           max(b.bound) FILTER (WHERE b.metric = 'e2e_p99_ms') AS e2e_p99_bound_ms,
           any_value(b.bound_from) FILTER (WHERE b.metric = 'e2e_p99_ms') AS e2e_p99_bound_from
    FROM p LEFT JOIN b USING (run_id, deployment_id, workload, point_label)
    GROUP BY ALL)
SELECT w.*, r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms,
       coalesce((r.slo_ttft_ms IS NULL OR w.ttft_p99_bound_ms <= r.slo_ttft_ms)
                AND (r.slo_tpot_ms IS NULL OR w.tpot_p99_bound_ms <= r.slo_tpot_ms)
                AND (r.slo_e2e_ms IS NULL OR w.e2e_p99_bound_ms <= r.slo_e2e_ms), false) AS meets_slo,
       concat_ws(', ',
                 CASE WHEN r.slo_ttft_ms IS NOT NULL THEN 'TTFT p99 ' || round(w.ttft_p99_bound_ms, 1) || ' ms ('
                      || w.ttft_p99_bound_from || ') vs ' || r.slo_ttft_ms || ' ms' END,
                 CASE WHEN r.slo_tpot_ms IS NOT NULL THEN 'TPOT p99 ' || round(w.tpot_p99_bound_ms, 2) || ' ms ('
                      || w.tpot_p99_bound_from || ') vs ' || r.slo_tpot_ms || ' ms' END,
                 CASE WHEN r.slo_e2e_ms IS NOT NULL THEN 'E2E p99 ' || round(w.e2e_p99_bound_ms, 1) || ' ms ('
                      || w.e2e_p99_bound_from || ') vs ' || r.slo_e2e_ms || ' ms' END) AS slo_judged_on
FROM w LEFT JOIN runs r USING (run_id);

-- Capacity plan (sql/capacity_plan.sql, sql/hybrid_plan.sql; docs/REPORTS.md). Per engine config of one run:
-- its points (each summarised over its repeats, v_point_figures) measured at the workload lengths nearest the
-- traffic profile's (|ln(in/in')| + |ln(out/out')|; all points when the profile gives no lengths); of those that meet
-- the p99 SLO on the conservative end of their intervals (v_point_slo), the one whose goodput's 95% lower bound is
-- highest sizes the replica, on that lower bound (a point of one repeat: on its measured value, said so): a rate the
-- fleet will reach, never the best repeat. Replicas = ceil(QPS / capacity) for the steady and for the peak QPS;
-- GPUs = replicas x GPUs per deployment; monthly cost = GPUs x $/GPU-hour x 730 h; the energy line = replicas x the
-- deployment's mean W at the sizing point x 730 h x $/kWh x PUE. sized_on names the point, sized_bound the bound it
-- used. No point meeting the SLO: capacity, replicas and cost are NULL and `note` says why.
-- Where an SLO capacity search of the engine config exists (slo_capacity, at lengths at least as near the profile's as
-- the nearest points', searched under an SLO at least as tight as the run's with attainment >= 0.99), it sizes instead, on its conservative bound:
-- the goodput's lower 95% bound at the capacity (its estimate from one window), scaled by capacity_lo / capacity when
-- the capacity's own interval reaches below the load measured.
CREATE OR REPLACE MACRO capacity_plan(p_run_id, p_steady_qps, p_peak_qps, p_input_tokens, p_output_tokens) AS TABLE
WITH cfg AS (
    SELECT d.run_id, d.source, d.config_name AS engine, d.engine AS engine_kind, d.model, d.precision, d.tp,
           coalesce(d.n_gpus, d.tp) AS gpus_per_replica, d.status AS deployment_status, d.error_kind AS deployment_error,
           d.startup_s AS deployment_startup_s,
           r.gpu_price_per_hour, r.energy_price_per_kwh, r.pue, r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms
    FROM deployments d LEFT JOIN runs r USING (run_id)
    WHERE d.run_id = p_run_id),
pts AS (
    SELECT f.engine, f.workload, f.point_label, any_value(f.shape) AS shape, bool_or(t.bursty) AS bursty,
           any_value(f.input_tokens) AS input_tokens,
           any_value(f.output_tokens) AS output_tokens, any_value(f.repeats) AS repeats,
           any_value(f.estimate) FILTER (WHERE f.metric = 'goodput_requests_s') AS goodput,
           any_value(f.lo) FILTER (WHERE f.metric = 'goodput_requests_s') AS goodput_lo,
           any_value(f.hi) FILTER (WHERE f.metric = 'goodput_requests_s') AS goodput_hi,
           any_value(f.method) FILTER (WHERE f.metric = 'goodput_requests_s') AS goodput_method,
           any_value(f.interval_scope) FILTER (WHERE f.metric = 'goodput_requests_s') AS goodput_scope,
           any_value(f.estimate) FILTER (WHERE f.metric = 'mean_power_w') AS mean_power_w
    FROM v_point_figures f
    LEFT JOIN (SELECT deployment_id, workload, point_label_of(point_label, load_point_id) AS point_label,
                      bool_or(bursty) AS bursty  -- the shape's trait (load_runs, written at ingest), not its name
               FROM load_runs WHERE run_id = p_run_id GROUP BY ALL) t USING (deployment_id, workload, point_label)
    WHERE f.run_id = p_run_id
    GROUP BY f.engine, f.workload, f.point_label),
lp AS (
    SELECT p.*, s.meets_slo, s.slo_judged_on, s.ttft_p99_bound_ms, s.tpot_p99_bound_ms,
           p.engine || ':' || p.workload || ':' || p.point_label AS point,
           -- a figure of one server start (no second start, no prior) says nothing of another: it sizes nothing
           CASE WHEN p.goodput_scope IS DISTINCT FROM 'one_start' THEN coalesce(p.goodput_lo, p.goodput) END AS capacity,
           p.goodput_scope = 'one_start' AS one_start,
           CASE WHEN p.goodput_scope IS DISTINCT FROM 'one_start' THEN p.goodput END AS capacity_mean,
           CASE WHEN p.goodput_scope IS DISTINCT FROM 'one_start' THEN coalesce(p.goodput_hi, p.goodput) END
               AS capacity_hi,
           CASE WHEN p.goodput_lo IS NOT NULL
                THEN 'goodput 95% lower bound ' || round(p.goodput_lo, 2) || ' req/s (mean ' || round(p.goodput, 2)
                     || ' over ' || p.repeats || ' repeats)'
                ELSE 'goodput ' || round(p.goodput, 2) || ' req/s as measured (' || p.goodput_method || ')' END
               || '; ' || s.slo_judged_on AS bound_text,
           coalesce(abs(ln(p.input_tokens / p_input_tokens::DOUBLE)), 0)
             + coalesce(abs(ln(p.output_tokens / p_output_tokens::DOUBLE)), 0) AS len_distance
    FROM pts p
    LEFT JOIN (SELECT * FROM v_point_slo WHERE run_id = p_run_id) s USING (engine, workload, point_label)),
near AS (SELECT * FROM lp QUALIFY len_distance = min(len_distance) OVER (PARTITION BY engine)),
pts_cap AS (
    SELECT engine,
           count(*)                                                   AS points_at_lengths,
           count(*) FILTER (WHERE meets_slo)                          AS points_meeting_slo,
           count(*) FILTER (WHERE meets_slo AND one_start)            AS points_one_start,
           max(capacity) FILTER (WHERE meets_slo)                     AS goodput_per_replica,
           arg_max(capacity_mean, capacity) FILTER (WHERE meets_slo)  AS goodput_mean_per_replica,
           arg_max(capacity_hi, capacity) FILTER (WHERE meets_slo)    AS goodput_hi_per_replica,
           arg_max(point, capacity) FILTER (WHERE meets_slo)          AS sized_on,
           arg_max(bound_text, capacity) FILTER (WHERE meets_slo)     AS sized_bound,
           arg_max(mean_power_w, capacity) FILTER (WHERE meets_slo)   AS power_w_per_replica,
           arg_max(ttft_p99_bound_ms, capacity) FILTER (WHERE meets_slo) AS sized_ttft_p99_ms,
           arg_max(tpot_p99_bound_ms, capacity) FILTER (WHERE meets_slo) AS sized_tpot_p99_ms,
           min(input_tokens)                                          AS measured_input_tokens,
           min(output_tokens)                                         AS measured_output_tokens,
           min(len_distance)                                          AS len_distance
    FROM near GROUP BY engine),
srch AS (
    SELECT *, coalesce(goodput_requests_s_lo, goodput_requests_s)
                * least(1.0, coalesce(capacity_lo / nullif(capacity, 0), 1.0)) AS search_rps
    FROM (SELECT s.*, coalesce(abs(ln(s.input_tokens / p_input_tokens::DOUBLE)), 0)
                      + coalesce(abs(ln(s.output_tokens / p_output_tokens::DOUBLE)), 0) AS len_distance
          FROM slo_capacity s JOIN runs r USING (run_id)
          WHERE s.run_id = p_run_id AND s.capacity IS NOT NULL AND s.goodput_requests_s > 0 AND s.attainment >= 0.99
            AND s.interval_scope IS DISTINCT FROM 'one_start'  -- one start and no prior: it sizes nothing
            -- searched under an SLO at least as tight as the run's: the load found meets the run's too
            AND (r.slo_ttft_ms IS NULL OR s.slo_ttft_ms <= r.slo_ttft_ms)
            AND (r.slo_tpot_ms IS NULL OR s.slo_tpot_ms <= r.slo_tpot_ms)
            AND (r.slo_e2e_ms IS NULL OR s.slo_e2e_ms <= r.slo_e2e_ms))
    -- one search a server start: the lowest start's conservative figure sizes (another start may be that one)
    QUALIFY row_number() OVER (PARTITION BY engine ORDER BY len_distance, search_rps ASC NULLS LAST) = 1),
srch_near AS (  -- a search sizes only at lengths as near the profile's as the nearest points'
    SELECT s.* FROM srch s LEFT JOIN pts_cap p USING (engine)
    WHERE s.len_distance <= coalesce(p.len_distance, 'infinity'::DOUBLE) + 1e-9),
cap AS (  -- a capacity search of the config sizes where there is one; else the best point on its conservative bounds
    SELECT coalesce(p.engine, s.engine) AS engine, p.points_at_lengths, p.points_meeting_slo, p.points_one_start,
           s.engine IS NOT NULL AS sized_by_search,
           CASE WHEN s.engine IS NOT NULL THEN s.search_rps ELSE p.goodput_per_replica END AS goodput_per_replica,
           CASE WHEN s.engine IS NOT NULL THEN s.goodput_requests_s ELSE p.goodput_mean_per_replica END
               AS goodput_mean_per_replica,
           CASE WHEN s.engine IS NOT NULL THEN coalesce(s.goodput_requests_s_hi, s.goodput_requests_s)
                ELSE p.goodput_hi_per_replica END AS goodput_hi_per_replica,
           CASE WHEN s.engine IS NOT NULL
                THEN 'SLO capacity search ' || s.search_id || ': ' || printf('%.4g', s.capacity) || ' ' || s.unit
                     || coalesce(' [' || printf('%.4g', s.capacity_lo) || ', ' || printf('%.4g', s.capacity_hi) || ']',
                                 '')
                     || ' at ' || s.at_point_label
                ELSE p.sized_on END                                   AS sized_on,
           CASE WHEN s.engine IS NOT NULL
                THEN CASE WHEN s.goodput_requests_s_lo IS NOT NULL
                          THEN 'goodput 95% lower bound ' || printf('%.4g', s.goodput_requests_s_lo) || ' req/s over '
                               || s.repeats_at_capacity || ' repeats at the capacity'
                          ELSE 'goodput ' || printf('%.4g', s.goodput_requests_s) || ' req/s from one window' END
                     || CASE WHEN s.capacity_lo < s.capacity
                             THEN ', scaled by capacity_lo / capacity to ' || printf('%.4g', s.search_rps) || ' req/s'
                             ELSE '' END
                ELSE p.sized_bound END                                AS sized_bound,
           CASE WHEN s.engine IS NOT NULL THEN s.mean_power_w ELSE p.power_w_per_replica END AS power_w_per_replica,
           CASE WHEN s.engine IS NOT NULL THEN s.ttft_p99_ms ELSE p.sized_ttft_p99_ms END AS sized_ttft_p99_ms,
           CASE WHEN s.engine IS NOT NULL THEN s.tpot_p99_ms ELSE p.sized_tpot_p99_ms END AS sized_tpot_p99_ms,
           CASE WHEN s.engine IS NOT NULL THEN s.input_tokens ELSE p.measured_input_tokens END AS measured_input_tokens,
           CASE WHEN s.engine IS NOT NULL THEN s.output_tokens ELSE p.measured_output_tokens END AS measured_output_tokens
    FROM pts_cap p FULL JOIN srch_near s ON s.engine = p.engine),
burst AS (
    SELECT engine, max(ttft_p99_bound_ms) AS burst_ttft_p99_ms, arg_max(point, ttft_p99_bound_ms) AS burst_point,
           bool_and(coalesce(meets_slo, false)) AS burst_meets_slo
    FROM near WHERE bursty GROUP BY engine),
sized AS (
    SELECT c.*, cap.* EXCLUDE (engine), b.* EXCLUDE (engine),
           p_steady_qps::DOUBLE AS steady_qps, p_peak_qps::DOUBLE AS peak_qps,
           p_input_tokens::INTEGER AS profile_input_tokens, p_output_tokens::INTEGER AS profile_output_tokens,
           ceil(p_steady_qps::DOUBLE / nullif(cap.goodput_per_replica, 0))::INTEGER AS steady_replicas,
           ceil(p_peak_qps::DOUBLE / nullif(cap.goodput_per_replica, 0))::INTEGER   AS peak_replicas,
           -- the fleet at the capacity's estimate and at its upper bound: the cost's interval runs from the fewest
           -- GPUs the interval allows (upper bound) to the conservative fleet above (lower bound)
           ceil(p_peak_qps::DOUBLE / nullif(cap.goodput_mean_per_replica, 0))::INTEGER AS peak_replicas_mean,
           ceil(p_peak_qps::DOUBLE / nullif(cap.goodput_hi_per_replica, 0))::INTEGER AS peak_replicas_fewest
    FROM cfg c LEFT JOIN cap USING (engine) LEFT JOIN burst b USING (engine))
SELECT run_id, source, engine, engine_kind, model, precision, tp, gpus_per_replica,
       steady_qps, peak_qps, profile_input_tokens, profile_output_tokens,
       measured_input_tokens, measured_output_tokens,
       goodput_per_replica, goodput_per_replica / gpus_per_replica AS goodput_per_gpu, sized_on, sized_bound,
       sized_ttft_p99_ms, sized_tpot_p99_ms,
       steady_replicas, steady_replicas * gpus_per_replica AS steady_gpus,
       peak_replicas, peak_replicas * gpus_per_replica AS peak_gpus,
       peak_replicas * gpus_per_replica * gpu_price_per_hour * 730 AS monthly_gpu_usd,
       peak_replicas_mean * gpus_per_replica * gpu_price_per_hour * 730 AS monthly_gpu_usd_mean,
       peak_replicas_fewest * gpus_per_replica * gpu_price_per_hour * 730 AS monthly_gpu_usd_fewest,
       goodput_mean_per_replica, goodput_hi_per_replica,
       peak_replicas * power_w_per_replica / 1000 * 730 * energy_price_per_kwh * pue AS monthly_energy_usd,
       power_w_per_replica, gpu_price_per_hour, energy_price_per_kwh, pue,
       burst_point, burst_ttft_p99_ms, burst_meets_slo,
       CASE
         WHEN deployment_status IS DISTINCT FROM 'healthy'
           THEN 'deployment ' || coalesce(deployment_status, '?') || coalesce(' (' || deployment_error || ')', '')
                || CASE WHEN deployment_startup_s IS NOT NULL THEN ' during the run' ELSE '' END
                || ': no capacity claimed'
         WHEN coalesce(points_at_lengths, 0) = 0 AND NOT coalesce(sized_by_search, false)
           THEN 'no load point measured for this engine config'
         WHEN NOT coalesce(sized_by_search, false) AND coalesce(points_one_start, 0) > 0
              AND coalesce(goodput_per_replica, 0) = 0
           THEN points_one_start || ' point(s) meet the SLO, every one within one server start only (one start, '
                || 'no between-start prior for ' || engine_kind || '): what another start gives is unknown, so no '
                || 'fleet is sized on it; run the plan with server_starts: 2 or more'
         WHEN NOT coalesce(sized_by_search, false)
              AND (coalesce(points_meeting_slo, 0) = 0 OR coalesce(goodput_per_replica, 0) = 0)
           THEN 'no load point meets the p99 SLO (' || concat_ws(', ', 'TTFT <= ' || slo_ttft_ms || ' ms',
                'TPOT <= ' || slo_tpot_ms || ' ms', 'E2E <= ' || slo_e2e_ms || ' ms')
                || ') on the conservative end of its intervals: no capacity can be claimed'
         ELSE 'sized on ' || sized_on || ', ' || sized_bound
              || CASE WHEN (profile_input_tokens IS NOT NULL AND profile_input_tokens <> measured_input_tokens)
                        OR (profile_output_tokens IS NOT NULL AND profile_output_tokens <> measured_output_tokens)
                      THEN '; measured at ' || measured_input_tokens || '/' || measured_output_tokens
                           || ' tokens in/out, profile asks ' || coalesce(profile_input_tokens::VARCHAR, '?') || '/'
                           || coalesce(profile_output_tokens::VARCHAR, '?') || ' (not rescaled)'
                      ELSE '' END
              || CASE WHEN burst_point IS NULL THEN '; no gamma/surge point measured'
                      WHEN NOT burst_meets_slo THEN '; misses the SLO under bursts (' || burst_point || ')'
                      ELSE '' END
       END AS note
FROM sized;

-- The client's side of v_client_vs_server, per load point (kept in point_stats as client_*): TTFT of requests whose
-- first token arrived in the window, E2E of those whose last token did, inter-token gaps whose later event did.
CREATE OR REPLACE VIEW v_client_stats_live AS
WITH client_req AS (
    SELECT q.run_id, q.deployment_id, q.load_point_id,
           avg(q.ttft_ms) FILTER (WHERE q.first_token_ns BETWEEN l.window_start_ns AND l.window_end_ns) AS ttft_ms,
           count(*) FILTER (WHERE q.first_token_ns BETWEEN l.window_start_ns AND l.window_end_ns) AS ttft_n,
           avg(q.e2e_ms) FILTER (WHERE q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns) AND coalesce(l.window_end_ns, q.last_token_ns)) AS e2e_ms,
           count(*) FILTER (WHERE q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns) AND coalesce(l.window_end_ns, q.last_token_ns)) AS e2e_n
    FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE q.error_kind IS NULL
    GROUP BY ALL),
client_itl AS (
    SELECT run_id, deployment_id, load_point_id, avg(e.g) AS itl_ms, count(*) AS itl_n
    FROM (SELECT q.run_id, q.deployment_id, q.load_point_id, l.window_start_ns, l.window_end_ns,
                 unnest(list_transform(range(1, least(len(q.chunk_ns), coalesce(q.chunks_exact, len(q.chunk_ns)))),
                        lambda i: struct_pack(t := q.chunk_ns[i + 1], g := (q.chunk_ns[i + 1] - q.chunk_ns[i]) / 1e6))) AS e
          FROM (SELECT * REPLACE (request_ns(chunk_ns, events_file, events_at, events_n) AS chunk_ns) FROM requests
                WHERE error_kind IS NULL AND request_events(chunk_ns, events_n) > 1) q
          JOIN load_runs l USING (run_id, deployment_id, load_point_id))
    WHERE e.t BETWEEN window_start_ns AND window_end_ns
    GROUP BY ALL)
SELECT c.run_id, c.deployment_id, c.load_point_id, c.ttft_ms AS client_ttft_ms, c.ttft_n AS client_ttft_n,
       c.e2e_ms AS client_e2e_ms, c.e2e_n AS client_e2e_n, i.itl_ms AS client_itl_ms, i.itl_n AS client_itl_n
FROM client_req c LEFT JOIN client_itl i USING (run_id, deployment_id, load_point_id);

-- How much of each named histogram an engine's /metrics counted inside a load point's window: the change of its _sum
-- and _count between the window_start and window_end scrapes, summed over label sets (so a mean from them is exact).
-- `names`: histogram base names. Read by v_client_vs_server and v_engine_ttft_split.
CREATE OR REPLACE MACRO histogram_window_change(names) AS TABLE
SELECT m.run_id, m.deployment_id, m.load_point_id, n.metric,
       sum(m.value) FILTER (WHERE m.scrape = 'window_end' AND m.metric = n.metric || '_sum')
         - sum(m.value) FILTER (WHERE m.scrape = 'window_start' AND m.metric = n.metric || '_sum') AS d_sum,
       sum(m.value) FILTER (WHERE m.scrape = 'window_end' AND m.metric = n.metric || '_count')
         - sum(m.value) FILTER (WHERE m.scrape = 'window_start' AND m.metric = n.metric || '_count') AS d_count
FROM server_metrics m JOIN (SELECT unnest(names) AS metric) n ON m.metric IN (n.metric || '_sum', n.metric || '_count')
WHERE m.scrape IN ('window_start', 'window_end')
GROUP BY ALL;

-- The engine's own latency histograms (its /metrics, scraped at each load point's window edges) against the
-- client's figures over the same requests: the client's error, measured on every real run. Server: the change of a
-- histogram's _sum and _count between the window_start and window_end scrapes, summed over label sets, so its mean is
-- exact. Client, the same requests as the server counted: TTFT of requests whose first token arrived in the
-- window, E2E of requests whose last token did, inter-token gaps whose later event did. client_minus_server_ms > 0:
-- what the network, the HTTP stack and the client add to what the engine saw. Names: vLLM 0.25 (0.10 in
-- brackets): time_to_first_token_seconds, inter_token_latency_seconds (time_per_output_token_seconds),
-- e2e_request_latency_seconds; SGLang's likewise with the sglang: prefix.
CREATE OR REPLACE VIEW v_client_vs_server AS
WITH fam(family, metric) AS (VALUES
        ('ttft', 'vllm:time_to_first_token_seconds'), ('ttft', 'sglang:time_to_first_token_seconds'),
        ('itl', 'vllm:inter_token_latency_seconds'), ('itl', 'vllm:time_per_output_token_seconds'),
        ('itl', 'sglang:inter_token_latency_seconds'), ('e2e', 'vllm:e2e_request_latency_seconds'),
        ('e2e', 'sglang:e2e_request_latency_seconds')),
edge_sums AS (
    SELECT h.run_id, h.deployment_id, h.load_point_id, f.family, f.metric, h.d_sum, h.d_count
    FROM histogram_window_change((SELECT list(metric) FROM fam)) h JOIN fam f USING (metric)),
edges AS (  -- an engine exporting two names of one family (old and new): the one that counted most
    SELECT * FROM edge_sums
    QUALIFY row_number() OVER (PARTITION BY run_id, deployment_id, load_point_id, family
                               ORDER BY d_count DESC NULLS LAST, metric) = 1),
server AS (
    SELECT run_id, deployment_id, load_point_id, family, metric AS server_metric,
           1000 * d_sum / nullif(d_count, 0) AS server_mean_ms, d_count AS server_n
    FROM edges WHERE d_count > 0),
client AS (
    SELECT c.run_id, c.deployment_id, c.load_point_id, f.family,
           CASE f.family WHEN 'ttft' THEN c.client_ttft_ms WHEN 'e2e' THEN c.client_e2e_ms ELSE c.client_itl_ms END AS client_mean_ms,
           CASE f.family WHEN 'ttft' THEN c.client_ttft_n WHEN 'e2e' THEN c.client_e2e_n ELSE c.client_itl_n END AS client_n
    FROM point_stats c
    CROSS JOIN (VALUES ('ttft'), ('itl'), ('e2e')) f(family)
    WHERE c.has_client)
SELECT s.run_id, s.deployment_id, s.load_point_id, s.family, s.server_metric, s.server_mean_ms, s.server_n,
       c.client_mean_ms, c.client_n, c.client_mean_ms - s.server_mean_ms AS client_minus_server_ms,
       (c.client_mean_ms - s.server_mean_ms) / nullif(s.server_mean_ms, 0) AS client_minus_server_rel
FROM server s JOIN client c USING (run_id, deployment_id, load_point_id, family);

-- Where a load point's TTFT went, from the engine's own histograms over the window (real vLLM; NULL for engines that
-- do not export them): server_ttft_ms from the API server's arrival (after tokenisation) to the first token;
-- prefill_ms from the engine core scheduling the request to its first token (the prefill step, waiting behind a step
-- already running, and returning the token); queue_ms from the engine core receiving it to scheduling it;
-- to_scheduled_ms = the client's TTFT minus prefill_ms: network, API server, hand-over and queue. Means of the change
-- of each histogram's _sum and _count between the window_start and window_end scrapes. The queue and prefill
-- histograms count requests as they finish, TTFT as their first token arrives: the populations differ at the window's
-- edges (the *_n columns say how many each mean has). source: measured, or emulated (the emulator exports the twin's
-- own split under the same names); the digital twin's split is compared with the measured one in benchmarks/twin_fit.py.
CREATE OR REPLACE VIEW v_engine_ttft_split AS
WITH fam(family, metric) AS (VALUES
        ('ttft', 'vllm:time_to_first_token_seconds'), ('queue', 'vllm:request_queue_time_seconds'),
        ('prefill', 'vllm:request_prefill_time_seconds')),
edges AS (
    SELECT h.run_id, h.deployment_id, h.load_point_id, f.family, h.d_sum, h.d_count
    FROM histogram_window_change((SELECT list(metric) FROM fam)) h JOIN fam f USING (metric)),
wide AS (
    SELECT run_id, deployment_id, load_point_id,
           1000 * any_value(d_sum) FILTER (WHERE family = 'ttft') / nullif(any_value(d_count) FILTER (WHERE family = 'ttft'), 0) AS server_ttft_ms,
           any_value(d_count) FILTER (WHERE family = 'ttft') AS server_ttft_n,
           1000 * any_value(d_sum) FILTER (WHERE family = 'queue') / nullif(any_value(d_count) FILTER (WHERE family = 'queue'), 0) AS queue_ms,
           any_value(d_count) FILTER (WHERE family = 'queue') AS queue_n,
           1000 * any_value(d_sum) FILTER (WHERE family = 'prefill') / nullif(any_value(d_count) FILTER (WHERE family = 'prefill'), 0) AS prefill_ms,
           any_value(d_count) FILTER (WHERE family = 'prefill') AS prefill_n
    FROM edges GROUP BY ALL)
SELECT w.run_id, w.deployment_id, w.load_point_id, l.source, p.client_ttft_ms, p.client_ttft_n, w.server_ttft_ms,
       w.server_ttft_n, w.queue_ms, w.queue_n, w.prefill_ms, w.prefill_n,
       p.client_ttft_ms - w.prefill_ms AS to_scheduled_ms
FROM wide w JOIN load_runs l USING (run_id, deployment_id, load_point_id)
LEFT JOIN point_stats p USING (run_id, deployment_id, load_point_id)
WHERE w.prefill_ms IS NOT NULL OR w.server_ttft_ms IS NOT NULL;

-- Steady state, checked after the fact: output tokens that arrived in the first and the second half of each load
-- point's window, and their relative difference (window_drift). A window still ramping up, or draining, shows a
-- drift; validation warns above 5% (load_runs.steady_window). warmup_lifetimes: the warm-up in median request
-- lifetimes (E2E p50); validation warns below 2 (load_runs.warmup_two_lifetimes).
CREATE OR REPLACE VIEW v_window_steadiness_live AS
WITH tok AS (
    SELECT l.run_id, l.deployment_id, l.load_point_id, l.window_start_ns, l.window_end_ns, unnest(q.times) AS t,
           unnest(request_tokens(q.chunk_tokens, q.chunk_tokens_each, q.counts_file, q.events_at, q.events_n,
                                 q.times)) AS n
    FROM (SELECT *, request_ns(chunk_ns, events_file, events_at, events_n) AS times FROM requests) q
    JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE q.error_kind IS NULL AND l.window_end_ns > l.window_start_ns)
SELECT run_id, deployment_id, load_point_id,
       sum(n) FILTER (WHERE t >= window_start_ns AND t < (window_start_ns + window_end_ns) / 2) AS first_half_tokens,
       sum(n) FILTER (WHERE t >= (window_start_ns + window_end_ns) / 2 AND t <= window_end_ns) AS second_half_tokens,
       abs(second_half_tokens - first_half_tokens) / nullif((second_half_tokens + first_half_tokens) / 2, 0)
                                                                                       AS window_drift
FROM tok GROUP BY ALL;

CREATE OR REPLACE VIEW v_window_steadiness AS
SELECT run_id, load_point_id, first_half_tokens, second_half_tokens, window_drift
FROM point_stats WHERE has_steadiness;

-- Load points of two runs side by side, one row per (point, metric), with the band a change must leave and a flag
-- (sql/regressions.sql, sql/compare_runs.sql; docs/REPORTS.md). A point is the same point in both runs when
-- (model, engine kind, config name, precision, tp, GPU, source, workload, point label) agree; its figure in a run is
-- the summary over that run's repeats (v_point_figures). Baseline: run p_base, or, when p_base is NULL, the latest
-- earlier run (by start time) that measured the same point. Runs whose error-level validation failed
-- (validation_results) serve neither as baseline nor as history unless named.
-- The band comes from the repeats where both runs have 95% intervals (band_from 'repeat intervals'): band = the two
-- intervals' half-widths added, relative to the baseline, and a change is a change only when the intervals do not
-- overlap. Where either run has no interval (one repeat of a repeat-level figure), from the run history
-- (band_from 'run history'): noise = 1.4826 x MAD / |median| of the figure over every run of that point up to and
-- including the baseline (2 or more), band = max(k x noise, floor_rel). Flag: inside the band 'within noise';
-- beyond it 'REGRESSION' in the worse direction, 'improvement' otherwise; 'no baseline' when never measured before.
CREATE OR REPLACE MACRO compare_points(p_new, p_base, k := 3.0, floor_rel := 0.05) AS TABLE
WITH metrics(metric, better, ord) AS (VALUES
        ('output_tok_s', 'higher', 1), ('goodput_requests_s', 'higher', 2), ('output_tokens_per_j', 'higher', 3),
        ('ttft_p50_ms', 'lower', 4), ('ttft_p99_ms', 'lower', 5), ('tpot_p50_ms', 'lower', 6),
        ('tpot_p99_ms', 'lower', 7), ('e2e_p99_ms', 'lower', 8), ('usd_per_1m_output_tokens', 'lower', 9)),
invalid AS (SELECT DISTINCT run_id FROM validation_results WHERE NOT success AND severity = 'error'),
pts AS (
    SELECT f.run_id, f.run_at, f.model, f.engine_kind, f.engine, f.precision, f.tp, f.gpu_name, f.source, f.workload,
           f.point_label, f.engine || ':' || f.workload || ':' || f.point_label AS load_point_id, f.metric,
           f.estimate AS value, f.lo, f.hi, f.repeats, m.better, m.ord,
           concat_ws('|', f.model, f.engine_kind, f.engine, f.precision, f.tp, f.gpu_name, f.source, f.workload,
                     f.point_label) AS point_key
    FROM v_point_figures f JOIN metrics m USING (metric)
    WHERE f.run_id = p_new OR f.run_id = p_base OR f.run_id NOT IN (SELECT run_id FROM invalid)),
paired AS (
    SELECT n.*, b.run_id AS base_run_id, b.run_at AS base_run_at, b.value AS base_value, b.lo AS base_lo,
           b.hi AS base_hi, b.load_point_id AS base_load_point_id
    FROM (SELECT * FROM pts WHERE run_id = p_new) n
    LEFT JOIN pts b
      ON b.point_key = n.point_key AND b.metric = n.metric AND b.run_id <> n.run_id
     AND (CASE WHEN p_base IS NULL THEN b.run_at < n.run_at ELSE b.run_id = p_base END)
    QUALIFY row_number() OVER (PARTITION BY n.point_key, n.metric ORDER BY b.run_at DESC NULLS LAST) = 1),
noise AS (
    SELECT p.point_key, p.metric, count(h.value) AS history_runs,
           CASE WHEN count(h.value) >= 2 THEN 1.4826 * mad(h.value) / nullif(abs(median(h.value)), 0) END AS noise_rel
    FROM paired p
    JOIN pts h ON h.point_key = p.point_key AND h.metric = p.metric AND h.run_id <> p.run_id
              AND h.run_at <= p.base_run_at
    GROUP BY ALL),
judged AS (
    SELECT p.*, coalesce(z.history_runs, 0) AS history_runs, z.noise_rel,
           (p.value - p.base_value) / nullif(abs(p.base_value), 0) AS change_rel,
           p.lo IS NOT NULL AND p.hi IS NOT NULL AND p.base_lo IS NOT NULL AND p.base_hi IS NOT NULL
             AND NOT isnan(p.lo) AND NOT isnan(p.base_lo) AS by_intervals
    FROM paired p LEFT JOIN noise z USING (point_key, metric)),
banded AS (
    SELECT *,
           CASE WHEN by_intervals THEN ((hi - lo) / 2 + (base_hi - base_lo) / 2) / nullif(abs(base_value), 0)
                ELSE greatest(k * coalesce(noise_rel, 0), floor_rel) END AS band_rel,
           CASE WHEN by_intervals THEN 'repeat intervals' ELSE 'run history' END AS band_from
    FROM judged)
SELECT run_id, base_run_id, engine, engine_kind, workload, point_label, metric, better, base_value, value,
       change_rel, repeats, history_runs, noise_rel, band_rel, band_from,
       CASE WHEN base_run_id IS NULL THEN 'no baseline'
            WHEN change_rel IS NULL THEN 'not comparable'
            WHEN by_intervals AND lo <= base_hi AND hi >= base_lo THEN 'within noise'
            WHEN NOT by_intervals AND abs(change_rel) <= band_rel THEN 'within noise'
            WHEN (change_rel > 0) = (better = 'higher') THEN 'improvement'
            ELSE 'REGRESSION' END AS flag,
       load_point_id, base_load_point_id, model, precision, tp, gpu_name, source, ord
FROM banded;
