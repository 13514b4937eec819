-- The head-to-head table in long form: one row per (figure, engine), with the load point it came from.
-- Reports pivot it so that rows are figures and columns are engines. $run_id: the run.
WITH lp AS (SELECT * FROM v_load_points WHERE run_id = $run_id),
peak AS (
    SELECT engine, arg_max(output_tok_s, output_tok_s) AS v, arg_max(load_point_id, output_tok_s) AS lp FROM lp GROUP BY engine),
tpj AS (
    SELECT engine, arg_max(output_tokens_per_j, output_tokens_per_j) AS v, arg_max(load_point_id, output_tokens_per_j) AS lp
    FROM lp WHERE meets_slo_p99 GROUP BY engine),
cost AS (
    SELECT engine, arg_min(usd_per_1m_output_tokens, usd_per_1m_output_tokens) AS v, arg_min(load_point_id, usd_per_1m_output_tokens) AS lp
    FROM lp WHERE meets_slo_p99 GROUP BY engine),
burst AS (
    SELECT engine, arg_max(ttft_p99_ms, ttft_p99_ms) AS v, arg_max(load_point_id, ttft_p99_ms) AS lp
    FROM lp WHERE shape IN ('gamma', 'surge', 'poisson') GROUP BY engine),
steady AS (
    SELECT engine, arg_max(ttft_p50_ms, concurrency) AS ttft, arg_max(e2e_p50_ms, concurrency) AS e2e,
           arg_max(load_point_id, concurrency) AS lp
    FROM lp WHERE shape = 'concurrency' GROUP BY engine),
ctx AS (SELECT engine, max(longest_context_tokens) AS v FROM lp GROUP BY engine),
builds AS (
    SELECT d.config_name AS engine, b.status, b.build_s, d.startup_s, d.status AS dstatus, d.error_kind
    FROM deployments d LEFT JOIN engine_builds b ON b.run_id = d.run_id AND b.build_id = d.build_id
    WHERE d.run_id = $run_id),
failures AS (
    SELECT d.config_name AS engine, sum(l.failed) AS failed, sum(l.completed) AS completed
    FROM load_runs l JOIN deployments d USING (run_id, deployment_id) WHERE l.run_id = $run_id GROUP BY ALL)
SELECT 1 AS ord, 'peak output throughput' AS figure, 'tok/s' AS unit, engine, round(v, 1)::VARCHAR AS value, lp AS load_point_id FROM peak
UNION ALL SELECT 2, 'tokens per joule at SLO (best)', 'tok/J', engine, round(v, 3)::VARCHAR, lp FROM tpj
UNION ALL SELECT 3, '$ per 1M output tokens at SLO (best)', '$', engine, round(v, 3)::VARCHAR, lp FROM cost
UNION ALL SELECT 4, 'p99 TTFT under bursty arrivals', 'ms', engine, round(v, 1)::VARCHAR, lp FROM burst
UNION ALL SELECT 5, 'median TTFT at highest steady concurrency', 'ms', engine, round(ttft, 1)::VARCHAR, lp FROM steady
UNION ALL SELECT 6, 'median E2E at highest steady concurrency', 'ms', engine, round(e2e, 1)::VARCHAR, lp FROM steady
UNION ALL SELECT 7, 'build', 's', engine,
    CASE WHEN status = 'no_build' THEN 'no build step' ELSE round(build_s, 1)::VARCHAR || ' (' || status || ')' END, NULL FROM builds
UNION ALL SELECT 8, 'startup to healthy', 's', engine, round(startup_s, 2)::VARCHAR, NULL FROM builds
UNION ALL SELECT 9, 'longest context served', 'tokens', engine, v::VARCHAR, NULL FROM ctx
UNION ALL SELECT 10, 'failed requests / completed', 'requests', engine, failed::VARCHAR || ' / ' || completed::VARCHAR, NULL FROM failures
UNION ALL SELECT 11, 'deployment status', '', engine, dstatus || coalesce(' (' || error_kind || ')', ''), NULL FROM builds
ORDER BY ord, engine;
