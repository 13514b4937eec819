-- Every load point of one run, summarised over its repeats, with 95% intervals (<figure>_lo, <figure>_hi): one row
-- per engine x workload x point. Definitions in docs/MEASUREMENT.md; intervals: repeat-level figures (throughput,
-- power, tokens per joule, cost) a t interval over repeats, NULL with one repeat; latency percentiles the percentile
-- of the pooled requests with a two-stage bootstrap (repeats, then requests). Power figures are energy-counter
-- energy over the window; *_above_idle subtract the deployment's idle power with the model loaded. Energy per
-- request: the window's energy over the requests that ended in it (J); per output token likewise.
-- Per repeat: sql/load_runs.sql; every figure in long form: sql/point_figures.sql. `phase_states` counts the repeats'
-- phase states (bunched | spread: docs/MEASUREMENT.md, "Step decomposition"); `mixed_phase` is true when the repeats
-- fell in both: the point's mean is then a mixture of two states, not a typical figure (NULL: no phase verdict).
-- $run_id: the run (wattbench sql fills in the latest run when omitted).
-- shown by default: engine, workload, point_label, shape, concurrency, rate, repeats, window_s, output_tok_s,
--   output_tok_s_lo, output_tok_s_hi, requests_s, goodput_requests_s, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms,
--   tpot_p99_ms, e2e_p50_ms, output_tokens_per_j, output_tokens_per_j_lo, output_tokens_per_j_hi, j_per_request,
--   usd_per_1m_output_tokens, source
WITH per_metric AS (  -- one row per metric of a point (max: should two deployments of a run share an engine name)
    SELECT engine, workload, point_label, metric, max(estimate) AS estimate, max(lo) AS lo, max(hi) AS hi,
           any_value(shape) AS shape, any_value(concurrency) AS concurrency, any_value(rate) AS rate,
           any_value(repeats) AS repeats, any_value(min_window_s) AS window_s, any_value(source) AS source
    FROM v_point_figures
    WHERE run_id = $run_id
    GROUP BY engine, workload, point_label, metric),
point AS (  -- a point's figures as one map (metric -> estimate, lo, hi): one aggregate, not three per figure
    SELECT engine, workload, point_label, any_value(shape) AS shape, any_value(concurrency) AS concurrency,
           any_value(rate) AS rate, any_value(repeats) AS repeats, any_value(window_s) AS window_s,
           any_value(source) AS source,
           map_from_entries(list((metric, struct_pack(estimate := estimate, lo := lo, hi := hi)))) AS m
    FROM per_metric
    GROUP BY engine, workload, point_label),
phase_counts AS (
    SELECT c.engine, c.workload, c.point_label, l.phase_state, count(*) AS n
    FROM v_load_points_core c JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE c.run_id = $run_id AND l.phase_state IS NOT NULL
    GROUP BY ALL),
phases AS (
    SELECT engine, workload, point_label,
           string_agg(phase_state || ' x' || n, ', ' ORDER BY phase_state DESC) AS phase_states,
           count(*) > 1 AS mixed_phase
    FROM phase_counts
    GROUP BY ALL)
SELECT engine, workload, point_label, shape, concurrency, rate, repeats, window_s,
       round(m['output_tok_s'].estimate, 1) AS output_tok_s,
       round(m['output_tok_s'].lo, 1) AS output_tok_s_lo,
       round(m['output_tok_s'].hi, 1) AS output_tok_s_hi,
       round(m['vllm_output_throughput'].estimate, 1) AS vllm_output_throughput,
       round(m['vllm_output_throughput'].lo, 1) AS vllm_output_throughput_lo,
       round(m['vllm_output_throughput'].hi, 1) AS vllm_output_throughput_hi,
       round(m['requests_s'].estimate, 2) AS requests_s,
       round(m['requests_s'].lo, 2) AS requests_s_lo,
       round(m['requests_s'].hi, 2) AS requests_s_hi,
       round(m['goodput_requests_s'].estimate, 2) AS goodput_requests_s,
       round(m['goodput_requests_s'].lo, 2) AS goodput_requests_s_lo,
       round(m['goodput_requests_s'].hi, 2) AS goodput_requests_s_hi,
       round(m['output_tokens_per_j'].estimate, 3) AS output_tokens_per_j,
       round(m['output_tokens_per_j'].lo, 3) AS output_tokens_per_j_lo,
       round(m['output_tokens_per_j'].hi, 3) AS output_tokens_per_j_hi,
       round(m['output_tokens_per_j_above_idle'].estimate, 3) AS output_tokens_per_j_above_idle,
       round(m['output_tokens_per_j_above_idle'].lo, 3) AS output_tokens_per_j_above_idle_lo,
       round(m['output_tokens_per_j_above_idle'].hi, 3) AS output_tokens_per_j_above_idle_hi,
       round(m['counter_w_per_gpu'].estimate, 1) AS counter_w_per_gpu,
       round(m['counter_w_per_gpu'].lo, 1) AS counter_w_per_gpu_lo,
       round(m['counter_w_per_gpu'].hi, 1) AS counter_w_per_gpu_hi,
       round(m['above_idle_power_w'].estimate, 1) AS above_idle_power_w,
       round(m['above_idle_power_w'].lo, 1) AS above_idle_power_w_lo,
       round(m['above_idle_power_w'].hi, 1) AS above_idle_power_w_hi,
       round(m['usd_per_1m_output_tokens'].estimate, 3) AS usd_per_1m_output_tokens,
       round(m['usd_per_1m_output_tokens'].lo, 3) AS usd_per_1m_output_tokens_lo,
       round(m['usd_per_1m_output_tokens'].hi, 3) AS usd_per_1m_output_tokens_hi,
       round(m['energy_usd_per_1m_output_tokens'].estimate, 4) AS energy_usd_per_1m_output_tokens,
       round(m['energy_usd_per_1m_output_tokens'].lo, 4) AS energy_usd_per_1m_output_tokens_lo,
       round(m['energy_usd_per_1m_output_tokens'].hi, 4) AS energy_usd_per_1m_output_tokens_hi,
       round(m['j_per_request'].estimate, 2) AS j_per_request,
       round(m['j_per_request'].lo, 2) AS j_per_request_lo,
       round(m['j_per_request'].hi, 2) AS j_per_request_hi,
       round(m['j_per_request_above_idle'].estimate, 2) AS j_per_request_above_idle,
       round(m['j_per_request_above_idle'].lo, 2) AS j_per_request_above_idle_lo,
       round(m['j_per_request_above_idle'].hi, 2) AS j_per_request_above_idle_hi,
       round(m['j_per_output_token'].estimate, 4) AS j_per_output_token,
       round(m['j_per_output_token'].lo, 4) AS j_per_output_token_lo,
       round(m['j_per_output_token'].hi, 4) AS j_per_output_token_hi,
       round(m['j_per_output_token_above_idle'].estimate, 4) AS j_per_output_token_above_idle,
       round(m['j_per_output_token_above_idle'].lo, 4) AS j_per_output_token_above_idle_lo,
       round(m['j_per_output_token_above_idle'].hi, 4) AS j_per_output_token_above_idle_hi,
       round(m['ttft_p50_ms'].estimate, 1) AS ttft_p50_ms,
       round(m['ttft_p50_ms'].lo, 1) AS ttft_p50_ms_lo,
       round(m['ttft_p50_ms'].hi, 1) AS ttft_p50_ms_hi,
       round(m['ttft_p99_ms'].estimate, 1) AS ttft_p99_ms,
       round(m['ttft_p99_ms'].lo, 1) AS ttft_p99_ms_lo,
       round(m['ttft_p99_ms'].hi, 1) AS ttft_p99_ms_hi,
       round(m['tpot_p50_ms'].estimate, 2) AS tpot_p50_ms,
       round(m['tpot_p50_ms'].lo, 2) AS tpot_p50_ms_lo,
       round(m['tpot_p50_ms'].hi, 2) AS tpot_p50_ms_hi,
       round(m['tpot_p99_ms'].estimate, 2) AS tpot_p99_ms,
       round(m['tpot_p99_ms'].lo, 2) AS tpot_p99_ms_lo,
       round(m['tpot_p99_ms'].hi, 2) AS tpot_p99_ms_hi,
       round(m['itl_p50_ms'].estimate, 2) AS itl_p50_ms,
       round(m['itl_p50_ms'].lo, 2) AS itl_p50_ms_lo,
       round(m['itl_p50_ms'].hi, 2) AS itl_p50_ms_hi,
       round(m['e2e_p50_ms'].estimate, 1) AS e2e_p50_ms,
       round(m['e2e_p50_ms'].lo, 1) AS e2e_p50_ms_lo,
       round(m['e2e_p50_ms'].hi, 1) AS e2e_p50_ms_hi,
       round(m['e2e_p99_ms'].estimate, 1) AS e2e_p99_ms,
       round(m['e2e_p99_ms'].lo, 1) AS e2e_p99_ms_lo,
       round(m['e2e_p99_ms'].hi, 1) AS e2e_p99_ms_hi,
       source, ph.phase_states, ph.mixed_phase
FROM point LEFT JOIN phases ph USING (engine, workload, point_label)
ORDER BY engine, workload, coalesce(concurrency, 0), coalesce(rate, 0), point_label;
