-- The head-to-head table (the one the seed article announces and leaves empty), in long form: one row per
-- (figure, engine) with the run and the load point each value came from, and a note saying why a value is NULL.
-- Reports pivot it (resources/reporting.pivot_head_to_head): rows are capabilities and figures, columns engines.
-- "At SLO": among load points whose p99 TTFT/TPOT/E2E meet the plan's SLO. "Under a surge": the worst p99 TTFT
-- over the gamma and surge load points. $run_id: the run.
WITH eng AS (
    SELECT d.config_name AS engine, d.engine AS engine_kind, d.engine_version, d.precision, d.tp, d.gpu_name,
           coalesce(d.n_gpus, d.tp) AS n_gpus, d.status AS dstatus, d.error_kind AS derror, d.error_text AS dtext,
           d.startup_s, b.status AS bstatus, b.build_s, b.error_kind AS berror, b.hardware_lock
    FROM deployments d LEFT JOIN engine_builds b ON b.run_id = d.run_id AND b.build_id = d.build_id
    WHERE d.run_id = $run_id),
lp AS (SELECT * FROM v_load_points WHERE run_id = $run_id),
agg AS (
    SELECT engine,
           count(*)                                                                     AS n_points,
           count(*) FILTER (WHERE meets_slo_p99)                                        AS n_slo,
           count(*) FILTER (WHERE shape IN ('gamma', 'surge'))                          AS n_burst,
           max(output_tok_s)                                                            AS peak_v,
           arg_max(load_point_id, output_tok_s)                                         AS peak_lp,
           max(goodput_requests_s) FILTER (WHERE meets_slo_p99)                         AS good_v,
           arg_max(load_point_id, goodput_requests_s) FILTER (WHERE meets_slo_p99)      AS good_lp,
           max(output_tokens_per_j) FILTER (WHERE meets_slo_p99)                        AS tpj_v,
           arg_max(load_point_id, output_tokens_per_j) FILTER (WHERE meets_slo_p99)     AS tpj_lp,
           min(usd_per_1m_output_tokens) FILTER (WHERE meets_slo_p99)                   AS usd_v,
           arg_min(load_point_id, usd_per_1m_output_tokens) FILTER (WHERE meets_slo_p99) AS usd_lp,
           min(energy_usd_per_1m_output_tokens) FILTER (WHERE meets_slo_p99)            AS eusd_v,
           arg_min(load_point_id, energy_usd_per_1m_output_tokens) FILTER (WHERE meets_slo_p99) AS eusd_lp,
           max(ttft_p99_ms) FILTER (WHERE shape IN ('gamma', 'surge'))                  AS surge_v,
           arg_max(load_point_id, ttft_p99_ms) FILTER (WHERE shape IN ('gamma', 'surge')) AS surge_lp,
           arg_max(ttft_p50_ms, concurrency) FILTER (WHERE shape = 'concurrency')       AS steady_v,
           arg_max(load_point_id, concurrency) FILTER (WHERE shape = 'concurrency')     AS steady_lp,
           max(longest_context_tokens)                                                  AS ctx_v,
           arg_max(load_point_id, longest_context_tokens)                               AS ctx_lp
    FROM lp GROUP BY engine),
req AS (
    SELECT d.config_name AS engine,
           count(*)                                                                     AS sent,
           count(*) FILTER (WHERE q.error_kind IS NOT NULL)                             AS failed,
           count(*) FILTER (WHERE q.error_kind IS NOT NULL AND l.shape IN ('gamma', 'surge')) AS failed_burst,
           count(*) FILTER (WHERE q.error_kind IS NULL AND q.max_tokens IS NOT NULL
                              AND q.completion_tokens < q.max_tokens)                   AS short
    FROM requests q
    JOIN deployments d USING (run_id, deployment_id)
    LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE q.run_id = $run_id GROUP BY ALL),
req_kinds AS (
    SELECT engine, string_agg(error_kind || ' x' || n, ', ' ORDER BY n DESC, error_kind) AS kinds
    FROM (SELECT d.config_name AS engine, q.error_kind, count(*) AS n
          FROM requests q JOIN deployments d USING (run_id, deployment_id)
          WHERE q.run_id = $run_id AND q.error_kind IS NOT NULL GROUP BY ALL)
    GROUP BY engine),
lr AS (
    SELECT d.config_name AS engine, count(*) AS points, count(*) FILTER (WHERE l.status <> 'ok') AS points_failed,
           string_agg(DISTINCT l.error_kind, ', ') AS point_kinds
    FROM load_runs l JOIN deployments d USING (run_id, deployment_id) WHERE l.run_id = $run_id GROUP BY ALL),
no_slo AS (SELECT 'no load point meets the p99 SLO' AS why),
rows AS (
    SELECT 1 AS ord, 'engine' AS figure, '' AS unit, e.engine, e.engine_kind || coalesce(' ' || e.engine_version, '') AS value,
           NULL AS load_point_id, NULL AS note FROM eng e
    UNION ALL SELECT 2, 'precision on GPUs', '', e.engine, e.precision || ' on ' || e.n_gpus || ' x ' || e.gpu_name, NULL, NULL FROM eng e
    UNION ALL SELECT 3, 'peak output throughput', 'tok/s', e.engine, round(a.peak_v, 1)::VARCHAR, a.peak_lp,
           CASE WHEN a.n_points IS NULL THEN 'no load point ran' END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 4, 'goodput at SLO (best)', 'req/s', e.engine, round(a.good_v, 2)::VARCHAR, a.good_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 5, 'tokens per joule at SLO (best)', 'tok/J', e.engine, round(a.tpj_v, 3)::VARCHAR, a.tpj_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 6, '$ per 1M output tokens at SLO (best)', '$', e.engine, round(a.usd_v, 3)::VARCHAR, a.usd_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 7, 'energy $ per 1M output tokens at SLO (best)', '$', e.engine, round(a.eusd_v, 4)::VARCHAR, a.eusd_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 8, 'p99 TTFT under a surge (worst gamma/surge point)', 'ms', e.engine, round(a.surge_v, 1)::VARCHAR,
           a.surge_lp, CASE WHEN coalesce(a.n_burst, 0) = 0 THEN 'no gamma/surge load point measured' END
           FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 9, 'median TTFT at highest steady concurrency', 'ms', e.engine, round(a.steady_v, 1)::VARCHAR,
           a.steady_lp, CASE WHEN a.steady_lp IS NULL THEN 'no fixed-concurrency load point measured' END
           FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 10, 'build time', 's', e.engine,
           CASE WHEN e.bstatus = 'no_build' THEN 'no build step'
                WHEN e.bstatus = 'failed' THEN 'failed' || coalesce(' (' || e.berror || ')', '')
                ELSE round(e.build_s, 1)::VARCHAR || ' (' || e.bstatus || ')' END, NULL,
           CASE WHEN e.bstatus IS NULL THEN 'no build recorded' END FROM eng e
    UNION ALL SELECT 11, 'hardware-locked artifact', '', e.engine,
           CASE WHEN e.bstatus = 'no_build' OR (e.bstatus IS NOT NULL AND e.hardware_lock IS NULL) THEN 'no'
                WHEN e.hardware_lock IS NOT NULL THEN 'yes: ' || coalesce(e.hardware_lock->>'gpu_name', '?')
                     || coalesce(', driver ' || (e.hardware_lock->>'driver'), '') END, NULL,
           CASE WHEN e.bstatus IS NULL THEN 'no build recorded' END FROM eng e
    UNION ALL SELECT 12, 'startup to healthy', 's', e.engine, round(e.startup_s, 2)::VARCHAR, NULL,
           CASE WHEN e.startup_s IS NULL THEN 'did not become healthy' END FROM eng e
    UNION ALL SELECT 13, 'longest context served', 'tokens', e.engine, a.ctx_v::VARCHAR, a.ctx_lp,
           CASE WHEN a.ctx_v IS NULL THEN 'no successful request' END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 14, 'behaviour on failure', '', e.engine,
           CASE WHEN e.dstatus IS DISTINCT FROM 'healthy'
                THEN 'did not start: ' || coalesce(e.derror, e.dstatus, '?') || coalesce(': ' || left(e.dtext, 80), '')
                ELSE concat_ws('; ',
                     coalesce(r.failed, 0) || ' of ' || coalesce(r.sent, 0) || ' requests failed'
                         || coalesce(' (' || k.kinds || ')', ''),
                     CASE WHEN r.failed_burst > 0 THEN r.failed_burst || ' of them under gamma/surge arrivals' END,
                     CASE WHEN coalesce(lr.points_failed, 0) > 0
                          THEN lr.points_failed || ' of ' || lr.points || ' load points failed'
                               || coalesce(' (' || lr.point_kinds || ')', '') END,
                     CASE WHEN r.short > 0 THEN r.short || ' responses shorter than max_tokens' END) END,
           NULL, NULL
    FROM eng e LEFT JOIN req r USING (engine) LEFT JOIN req_kinds k USING (engine) LEFT JOIN lr USING (engine))
SELECT ord, figure, unit, engine, value, $run_id AS run_id, load_point_id, note
FROM rows
ORDER BY ord, engine;
