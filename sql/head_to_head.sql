-- The head-to-head table (the one the seed article announces and leaves empty), in long form: one row per
-- (figure, engine) with the run and the load point each value came from, and a note saying why a value is NULL.
-- Reports pivot it (resources/reporting.pivot_head_to_head): rows are capabilities and figures, columns engines.
-- Each point is its repeats' summary (v_point_figures): a value carries its 95% interval in brackets (none from one
-- repeat), and the point it came from is workload:point. "At SLO": among points whose pooled p99 TTFT/TPOT/E2E meet
-- the plan's SLO. "Under a surge": the worst p99 TTFT over the gamma and surge points. Whether two engines differ
-- is sql/engine_contrasts.sql's call. $run_id: the run.
WITH eng AS (
    SELECT d.config_name AS engine, d.engine AS engine_kind, d.engine_version, d.precision, d.tp, d.gpu_name,
           coalesce(d.n_gpus, d.tp) AS n_gpus, d.status AS dstatus, d.error_kind AS derror, d.error_text AS dtext,
           d.startup_s, b.status AS bstatus, b.build_s, b.error_kind AS berror, b.hardware_lock
    FROM deployments d LEFT JOIN engine_builds b ON b.run_id = d.run_id AND b.build_id = d.build_id
    WHERE d.run_id = $run_id),
-- one row per metric of a point (max: as a pivot of filtered maxima takes it), then a point's figures as one map
-- (metric -> estimate, lo, hi), read into columns: one aggregate per point, not three per figure
pf AS (
    SELECT engine, workload, point_label, metric, max(estimate) AS estimate, max(lo) AS lo, max(hi) AS hi,
           any_value(shape) AS shape, any_value(concurrency) AS concurrency, any_value(repeats) AS repeats
    FROM v_point_figures WHERE run_id = $run_id
    GROUP BY engine, workload, point_label, metric),
-- one row per engine and point, summarised over its repeats (means; latency: pooled percentiles), with intervals
pt AS (
    SELECT engine, workload, point_label, point, shape, concurrency, repeats,
           m['output_tok_s'].estimate AS tok, m['output_tok_s'].lo AS tok_lo, m['output_tok_s'].hi AS tok_hi,
           m['goodput_requests_s'].estimate AS good,
           m['goodput_requests_s'].lo AS good_lo,
           m['goodput_requests_s'].hi AS good_hi,
           m['output_tokens_per_j'].estimate AS tpj,
           m['output_tokens_per_j'].lo AS tpj_lo,
           m['output_tokens_per_j'].hi AS tpj_hi,
           m['output_tokens_per_j_above_idle'].estimate AS tpja,
           m['output_tokens_per_j_above_idle'].lo AS tpja_lo,
           m['output_tokens_per_j_above_idle'].hi AS tpja_hi,
           m['usd_per_1m_output_tokens'].estimate AS usd,
           m['usd_per_1m_output_tokens'].lo AS usd_lo,
           m['usd_per_1m_output_tokens'].hi AS usd_hi,
           m['energy_usd_per_1m_output_tokens'].estimate AS eusd,
           m['energy_usd_per_1m_output_tokens'].lo AS eusd_lo,
           m['energy_usd_per_1m_output_tokens'].hi AS eusd_hi,
           m['ttft_p50_ms'].estimate AS ttft50, m['ttft_p50_ms'].lo AS ttft50_lo, m['ttft_p50_ms'].hi AS ttft50_hi,
           m['ttft_p99_ms'].estimate AS ttft99, m['ttft_p99_ms'].lo AS ttft99_lo, m['ttft_p99_ms'].hi AS ttft99_hi,
           m['tpot_p99_ms'].estimate AS tpot99,
           m['e2e_p99_ms'].estimate AS e2e99
    FROM (SELECT engine, workload, point_label, workload || ':' || point_label AS point,
                 any_value(shape) AS shape, any_value(concurrency) AS concurrency, any_value(repeats) AS repeats,
                 map_from_entries(list((metric, struct_pack(estimate := estimate, lo := lo, hi := hi)))) AS m
          FROM pf GROUP BY engine, workload, point_label)),
lp AS (
    SELECT pt.*, (r.slo_ttft_ms IS NULL OR pt.ttft99 <= r.slo_ttft_ms)
                 AND (r.slo_tpot_ms IS NULL OR pt.tpot99 <= r.slo_tpot_ms)
                 AND (r.slo_e2e_ms IS NULL OR pt.e2e99 <= r.slo_e2e_ms) AS meets_slo_p99
    FROM pt LEFT JOIN runs r ON r.run_id = $run_id),
ctx AS (SELECT d.config_name AS engine, max(q.prompt_tokens::BIGINT + q.completion_tokens) AS ctx_v,
               regexp_extract(arg_max(q.load_point_id, q.prompt_tokens::BIGINT + q.completion_tokens),
                              '^[^:]*:(.*?)(#[0-9]+)?$', 1) AS ctx_lp
        FROM requests q JOIN deployments d USING (run_id, deployment_id)
        WHERE q.run_id = $run_id AND q.error_kind IS NULL GROUP BY ALL),
agg AS (
    SELECT engine,
           count(*)                                                                     AS n_points,
           count(*) FILTER (WHERE meets_slo_p99)                                        AS n_slo,
           count(*) FILTER (WHERE shape IN ('gamma', 'surge'))                          AS n_burst,
           arg_max(fmt_ci(tok, tok_lo, tok_hi, 1), tok)                                 AS peak_v,
           arg_max(point, tok)                                                          AS peak_lp,
           arg_max(fmt_ci(good, good_lo, good_hi, 2), good) FILTER (WHERE meets_slo_p99) AS good_v,
           arg_max(point, good) FILTER (WHERE meets_slo_p99)                            AS good_lp,
           arg_max(fmt_ci(tpj, tpj_lo, tpj_hi, 3), tpj) FILTER (WHERE meets_slo_p99)    AS tpj_v,
           arg_max(point, tpj) FILTER (WHERE meets_slo_p99)                             AS tpj_lp,
           arg_max(fmt_ci(tpja, tpja_lo, tpja_hi, 3), tpja) FILTER (WHERE meets_slo_p99) AS tpja_v,
           arg_max(point, tpja) FILTER (WHERE meets_slo_p99)                            AS tpja_lp,
           arg_min(fmt_ci(usd, usd_lo, usd_hi, 3), usd) FILTER (WHERE meets_slo_p99)    AS usd_v,
           arg_min(point, usd) FILTER (WHERE meets_slo_p99)                             AS usd_lp,
           arg_min(fmt_ci(eusd, eusd_lo, eusd_hi, 4), eusd) FILTER (WHERE meets_slo_p99) AS eusd_v,
           arg_min(point, eusd) FILTER (WHERE meets_slo_p99)                            AS eusd_lp,
           arg_max(fmt_ci(ttft99, ttft99_lo, ttft99_hi, 1), ttft99) FILTER (WHERE shape IN ('gamma', 'surge')) AS surge_v,
           arg_max(point, ttft99) FILTER (WHERE shape IN ('gamma', 'surge'))            AS surge_lp,
           arg_max(fmt_ci(ttft50, ttft50_lo, ttft50_hi, 1), concurrency) FILTER (WHERE shape = 'concurrency') AS steady_v,
           arg_max(point, concurrency) FILTER (WHERE shape = 'concurrency')             AS steady_lp
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
    UNION ALL SELECT 3, 'peak output throughput', 'tok/s', e.engine, a.peak_v, a.peak_lp,
           CASE WHEN a.n_points IS NULL THEN 'no load point ran' END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 4, 'goodput at SLO (best)', 'req/s', e.engine, a.good_v, a.good_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 5, 'tokens per joule at SLO (best)', 'tok/J', e.engine, a.tpj_v, a.tpj_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 5.5, 'tokens per joule above idle at SLO (best)', 'tok/J', e.engine, a.tpja_v, a.tpja_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo)
                WHEN a.tpja_v IS NULL THEN 'no idle baseline measured' END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 6, '$ per 1M output tokens at SLO (best)', '$', e.engine, a.usd_v, a.usd_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 7, 'energy $ per 1M output tokens at SLO (best)', '$', e.engine, a.eusd_v, a.eusd_lp,
           CASE WHEN coalesce(a.n_slo, 0) = 0 THEN (SELECT why FROM no_slo) END FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 8, 'p99 TTFT under a surge (worst gamma/surge point)', 'ms', e.engine, a.surge_v,
           a.surge_lp, CASE WHEN coalesce(a.n_burst, 0) = 0 THEN 'no gamma/surge load point measured' END
           FROM eng e LEFT JOIN agg a USING (engine)
    UNION ALL SELECT 9, 'median TTFT at highest steady concurrency', 'ms', e.engine, a.steady_v,
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
    UNION ALL SELECT 13, 'longest context served', 'tokens', e.engine, c.ctx_v::VARCHAR, c.ctx_lp,
           CASE WHEN c.ctx_v IS NULL THEN 'no successful request' END FROM eng e LEFT JOIN ctx c USING (engine)
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
