-- The head-to-head table (the one the seed article announces and leaves empty), in long form: one row per
-- (figure, engine) with the run and the load point each value came from, and a note saying why a value is NULL.
-- Reports pivot it (resources/reporting.pivot_head_to_head): rows are capabilities and figures, columns engines.
-- Each point is its repeats' summary (v_point_figures): a value carries its 95% interval in brackets (none from one
-- repeat), and the point it came from is workload:point. "At SLO": among points whose p99 TTFT/TPOT/E2E meet the
-- plan's SLO on the conservative end of their intervals (v_point_slo). "Under a surge": the worst p99 TTFT over the
-- bursty points (load_runs.bursty, the shape's trait: gamma and surge today; the labels below name those). Whether
-- two engines differ is sql/engine_contrasts.sql's call. A capacity search's probes are not candidates here (most are one window, and the
-- best of many single windows is the best repeat under another name): the search answers in slo_capacity, with its
-- interval. $run_id: the run.
WITH eng AS (
    SELECT d.config_name AS engine, d.engine AS engine_kind, d.engine_version, d.precision, d.tp, d.gpu_name,
           coalesce(d.n_gpus, d.tp) AS n_gpus, d.status AS dstatus, d.error_kind AS derror, d.error_text AS dtext,
           d.startup_s, d.source AS dsource, b.status AS bstatus, b.build_s, b.error_kind AS berror, b.hardware_lock
    FROM deployments d LEFT JOIN engine_builds b ON b.run_id = d.run_id AND b.build_id = d.build_id
    WHERE d.run_id = $run_id),
-- each point's shape traits (written at ingest from the shape registry): SQL asks these, never a shape's name
traits AS (
    SELECT deployment_id, workload, point_label_of(point_label, load_point_id) AS point_label,
           bool_or(closed_loop) AS closed_loop, bool_or(bursty) AS bursty
    FROM load_runs WHERE run_id = $run_id GROUP BY ALL),
-- one row per metric of a point (max: as a pivot of filtered maxima takes it), then a point's figures as one map
-- (metric -> estimate, lo, hi), read into columns: one aggregate per point, not three per figure
pf AS (
    SELECT engine, workload, point_label, metric, max(estimate) AS estimate, max(lo) AS lo, max(hi) AS hi,
           any_value(method) AS method, any_value(shape) AS shape, any_value(concurrency) AS concurrency,
           any_value(repeats) AS repeats, bool_or(closed_loop) AS closed_loop, bool_or(bursty) AS bursty
    FROM v_point_figures f LEFT JOIN traits USING (deployment_id, workload, point_label) WHERE run_id = $run_id
      AND NOT EXISTS (SELECT 1 FROM load_runs l
                      WHERE l.run_id = f.run_id AND l.deployment_id = f.deployment_id AND l.workload = f.workload
                        AND l.point_label = f.point_label AND l.search_id IS NOT NULL)
    GROUP BY engine, workload, point_label, metric),
-- one row per engine and point, summarised over its repeats (means, with their intervals): m[metric] is the figure
-- (estimate, lo, hi, method), the named columns its estimate, by which the rows below pick a point
pt AS (
    SELECT engine, workload, point_label, point, shape, closed_loop, bursty, concurrency, repeats, m,
           m['output_tok_s'].estimate AS tok, m['goodput_requests_s'].estimate AS good,
           m['output_tokens_per_j'].estimate AS tpj, m['output_tokens_per_j_above_idle'].estimate AS tpja,
           m['usd_per_1m_output_tokens'].estimate AS usd, m['energy_usd_per_1m_output_tokens'].estimate AS eusd,
           m['ttft_p99_ms'].estimate AS ttft99
    FROM (SELECT engine, workload, point_label, workload || ':' || point_label AS point,
                 any_value(shape) AS shape, bool_or(closed_loop) AS closed_loop, bool_or(bursty) AS bursty,
                 any_value(concurrency) AS concurrency, any_value(repeats) AS repeats,
                 map_from_entries(list((metric, struct_pack(estimate := estimate, lo := lo, hi := hi,
                                                            method := method)))) AS m
          FROM pf GROUP BY engine, workload, point_label)),
lp AS (  -- "at SLO": the p99s on the conservative end of their intervals (v_point_slo), as the capacity plan judges
    SELECT pt.*, coalesce(s.meets_slo, false) AS meets_slo_p99
    FROM pt LEFT JOIN (SELECT * FROM v_point_slo WHERE run_id = $run_id) s USING (engine, workload, point_label)),
agg AS (
    SELECT engine,
           count(*)                                                                     AS n_points,
           count(*) FILTER (WHERE meets_slo_p99)                                        AS n_slo,
           count(*) FILTER (WHERE bursty)                                               AS n_burst,
           arg_max(fmt_fig(m['output_tok_s'], 1), tok)                                  AS peak_v,
           arg_max(point, tok)                                                          AS peak_lp,
           arg_max(fmt_fig(m['goodput_requests_s'], 2), good) FILTER (WHERE meets_slo_p99) AS good_v,
           arg_max(point, good) FILTER (WHERE meets_slo_p99)                            AS good_lp,
           arg_max(fmt_fig(m['output_tokens_per_j'], 3), tpj) FILTER (WHERE meets_slo_p99) AS tpj_v,
           arg_max(point, tpj) FILTER (WHERE meets_slo_p99)                             AS tpj_lp,
           arg_max(fmt_fig(m['output_tokens_per_j_above_idle'], 3), tpja) FILTER (WHERE meets_slo_p99) AS tpja_v,
           arg_max(point, tpja) FILTER (WHERE meets_slo_p99)                            AS tpja_lp,
           arg_min(fmt_fig(m['usd_per_1m_output_tokens'], 3), usd) FILTER (WHERE meets_slo_p99) AS usd_v,
           arg_min(point, usd) FILTER (WHERE meets_slo_p99)                             AS usd_lp,
           arg_min(fmt_fig(m['energy_usd_per_1m_output_tokens'], 4), eusd) FILTER (WHERE meets_slo_p99) AS eusd_v,
           arg_min(point, eusd) FILTER (WHERE meets_slo_p99)                            AS eusd_lp,
           arg_max(fmt_fig(m['ttft_p99_ms'], 1), ttft99) FILTER (WHERE bursty)          AS surge_v,
           arg_max(point, ttft99) FILTER (WHERE bursty)                                 AS surge_lp,
           arg_max(fmt_fig(m['ttft_p50_ms'], 1), concurrency) FILTER (WHERE closed_loop) AS steady_v,
           arg_max(point, concurrency) FILTER (WHERE closed_loop)                       AS steady_lp
    FROM lp GROUP BY engine),
-- the run's requests, from their tallies per load point (v_request_tallies, kept at ingest): one row per load point
-- read, not every request
req AS (
    SELECT d.config_name AS engine,
           sum(t.requests)                                                              AS sent,
           sum(t.failed)                                                                AS failed,
           sum(t.failed) FILTER (WHERE l.bursty)                                        AS failed_burst,
           sum(t.short_responses)                                                       AS short,
           max(t.longest_context_tokens)                                                AS ctx_v,
           regexp_extract(arg_max(t.load_point_id, t.longest_context_tokens), '^[^:]*:(.*?)(#[0-9]+)?$', 1) AS ctx_lp
    FROM v_request_tallies t
    JOIN deployments d USING (run_id, deployment_id)
    LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE t.run_id = $run_id GROUP BY ALL),
req_kinds AS (
    SELECT engine, string_agg(error_kind || ' x' || n, ', ' ORDER BY n DESC, error_kind) AS kinds
    FROM (SELECT engine, e.key AS error_kind, sum(e.value) AS n
          FROM (SELECT d.config_name AS engine, unnest(map_entries(t.error_kinds)) AS e
                FROM v_request_tallies t JOIN deployments d USING (run_id, deployment_id) WHERE t.run_id = $run_id)
          GROUP BY ALL)
    GROUP BY engine),
lr AS (
    SELECT d.config_name AS engine, count(*) AS points, count(*) FILTER (WHERE l.status <> 'ok') AS points_failed,
           string_agg(DISTINCT l.error_kind, ', ') AS point_kinds
    FROM load_runs l JOIN deployments d USING (run_id, deployment_id) WHERE l.run_id = $run_id GROUP BY ALL),
-- every figure of an engine in one row of its joins, laid out as rows (one list of structs, unnested): one join per
-- engine, not one per figure
rows AS (
    SELECT e.engine, unnest([
        {'ord': 1, 'figure': 'engine', 'unit': '', 'value': e.engine_kind || coalesce(' ' || e.engine_version, ''),
         'load_point_id': NULL, 'note': NULL},
        {'ord': 2, 'figure': 'precision on GPUs', 'unit': '',
         'value': e.precision || ' on ' || e.n_gpus || ' x ' || e.gpu_name, 'load_point_id': NULL, 'note': NULL},
        {'ord': 3, 'figure': 'peak output throughput', 'unit': 'tok/s', 'value': a.peak_v, 'load_point_id': a.peak_lp,
         'note': CASE WHEN a.n_points IS NULL THEN 'no load point ran' END},
        {'ord': 4, 'figure': 'goodput at SLO (best)', 'unit': 'req/s', 'value': a.good_v, 'load_point_id': a.good_lp,
         'note': CASE WHEN coalesce(a.n_slo, 0) = 0 THEN 'no load point meets the p99 SLO' END},
        {'ord': 5, 'figure': 'tokens per joule at SLO (best)', 'unit': 'tok/J', 'value': a.tpj_v,
         'load_point_id': a.tpj_lp, 'note': CASE WHEN coalesce(a.n_slo, 0) = 0 THEN 'no load point meets the p99 SLO' END},
        {'ord': 5.5, 'figure': 'tokens per joule above idle at SLO (best)', 'unit': 'tok/J', 'value': a.tpja_v,
         'load_point_id': a.tpja_lp,
         'note': CASE WHEN coalesce(a.n_slo, 0) = 0 THEN 'no load point meets the p99 SLO'
                      WHEN a.tpja_v IS NULL THEN 'no idle baseline measured' END},
        {'ord': 6, 'figure': '$ per 1M output tokens at SLO (best)', 'unit': '$', 'value': a.usd_v,
         'load_point_id': a.usd_lp, 'note': CASE WHEN coalesce(a.n_slo, 0) = 0 THEN 'no load point meets the p99 SLO' END},
        {'ord': 7, 'figure': 'energy $ per 1M output tokens at SLO (best)', 'unit': '$', 'value': a.eusd_v,
         'load_point_id': a.eusd_lp, 'note': CASE WHEN coalesce(a.n_slo, 0) = 0 THEN 'no load point meets the p99 SLO' END},
        {'ord': 8, 'figure': 'p99 TTFT under a surge (worst gamma/surge point)', 'unit': 'ms', 'value': a.surge_v,
         'load_point_id': a.surge_lp,
         'note': CASE WHEN coalesce(a.n_burst, 0) = 0 THEN 'no gamma/surge load point measured' END},
        {'ord': 9, 'figure': 'median TTFT at highest steady concurrency', 'unit': 'ms', 'value': a.steady_v,
         'load_point_id': a.steady_lp,
         'note': CASE WHEN a.steady_lp IS NULL THEN 'no fixed-concurrency load point measured' END},
        {'ord': 10, 'figure': 'build time', 'unit': 's',
         'value': CASE WHEN e.bstatus = 'no_build' THEN 'no build step'
                       WHEN e.bstatus = 'failed' THEN 'failed' || coalesce(' (' || e.berror || ')', '')
                       ELSE round(e.build_s, 1)::VARCHAR || ' (' || e.bstatus || ')' END,
         'load_point_id': NULL, 'note': CASE WHEN e.bstatus IS NULL THEN 'no build recorded' END},
        {'ord': 11, 'figure': 'hardware-locked artifact', 'unit': '',
         'value': CASE WHEN e.bstatus = 'no_build' OR (e.bstatus IS NOT NULL AND e.hardware_lock IS NULL) THEN 'no'
                       WHEN e.hardware_lock IS NOT NULL THEN 'yes: ' || coalesce(e.hardware_lock->>'gpu_name', '?')
                            || coalesce(', driver ' || (e.hardware_lock->>'driver'), '') END,
         'load_point_id': NULL, 'note': CASE WHEN e.bstatus IS NULL THEN 'no build recorded' END},
        {'ord': 12, 'figure': 'startup to healthy', 'unit': 's', 'value': round(e.startup_s, 2)::VARCHAR,
         'load_point_id': NULL,
         'note': CASE WHEN e.startup_s IS NULL AND e.dsource LIKE 'imported%' THEN 'imported: the tool did not measure startup'
                      WHEN e.startup_s IS NULL THEN 'did not become healthy' END},
        {'ord': 13, 'figure': 'longest context served', 'unit': 'tokens', 'value': r.ctx_v::VARCHAR,
         'load_point_id': r.ctx_lp, 'note': CASE WHEN r.ctx_v IS NULL THEN 'no successful request' END},
        {'ord': 14, 'figure': 'behaviour on failure', 'unit': '',
         'value': CASE WHEN e.dstatus IS DISTINCT FROM 'healthy' AND e.startup_s IS NOT NULL AND lr.points > 0
                THEN 'failed during the run: ' || coalesce(e.derror, e.dstatus, '?')
                     || coalesce(': ' || left(e.dtext, 80), '') || '; ' || coalesce(r.failed, 0) || ' of '
                     || coalesce(r.sent, 0) || ' requests failed; ' || lr.points_failed || ' of ' || lr.points
                     || ' load points run failed'
              WHEN e.dstatus IS DISTINCT FROM 'healthy'
                THEN 'did not start: ' || coalesce(e.derror, e.dstatus, '?') || coalesce(': ' || left(e.dtext, 80), '')
                ELSE concat_ws('; ',
                     coalesce(r.failed, 0) || ' of ' || coalesce(r.sent, 0) || ' requests failed'
                         || coalesce(' (' || k.kinds || ')', ''),
                     CASE WHEN r.failed_burst > 0 THEN r.failed_burst || ' of them under gamma/surge arrivals' END,
                     CASE WHEN coalesce(lr.points_failed, 0) > 0
                          THEN lr.points_failed || ' of ' || lr.points || ' load points failed'
                               || coalesce(' (' || lr.point_kinds || ')', '') END,
                     CASE WHEN r.short > 0 THEN r.short || ' responses shorter than max_tokens' END) END,
         'load_point_id': NULL, 'note': NULL}
    ], recursive := true)
    FROM eng e LEFT JOIN agg a USING (engine) LEFT JOIN req r USING (engine)
    LEFT JOIN req_kinds k USING (engine) LEFT JOIN lr USING (engine))
SELECT ord, figure, unit, engine, value, $run_id AS run_id, load_point_id, note
FROM rows
ORDER BY ord, engine;
