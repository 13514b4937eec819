-- SLO capacity: per engine config and capacity search of one run, the highest load meeting the SLO in every one of
-- its windows with its 95% interval (the search's step up to the lowest load that missed, and the repeats' spread:
-- agent/wattbench_agent/loadgen/search.py load_meets, _decide), the bound that binds just above it, and what the capacity costs: tokens/s, tokens per joule, joules per
-- request, $ per 1M output tokens and W, each with its 95% interval over the repeats at the capacity, plus the probes
-- and seconds of windows the search used (docs/MEASUREMENT.md, "SLO capacity"; v_slo_capacity_live in sql/views.sql).
-- NULL with a `note` where no load met the SLO or the server failed. $run_id: the run.
SELECT engine, source, engine_kind, precision, tp, n_gpus, workload, over, shape, status,
       round(capacity, 3) AS capacity, round(capacity_lo, 3) AS capacity_lo, round(capacity_hi, 3) AS capacity_hi,
       unit, round(capacity_per_gpu, 3) AS capacity_per_gpu,
       concat_ws(', ', 'TTFT <= ' || slo_ttft_ms || ' ms', 'TPOT <= ' || slo_tpot_ms || ' ms',
                 'E2E <= ' || slo_e2e_ms || ' ms') || ' for ' || round(100 * attainment, 2) || '% of requests' AS slo,
       binding, round(binding_share, 4) AS binding_share, round(binding_load, 3) AS binding_load,
       at_point_label, repeats_at_capacity,
       round(output_tok_s, 1) AS output_tok_s, round(output_tok_s_lo, 1) AS output_tok_s_lo,
       round(output_tok_s_hi, 1) AS output_tok_s_hi,
       round(goodput_requests_s, 3) AS goodput_requests_s, round(goodput_requests_s_lo, 3) AS goodput_requests_s_lo,
       round(goodput_requests_s_hi, 3) AS goodput_requests_s_hi,
       round(output_tokens_per_j, 3) AS output_tokens_per_j, round(output_tokens_per_j_lo, 3) AS output_tokens_per_j_lo,
       round(output_tokens_per_j_hi, 3) AS output_tokens_per_j_hi,
       round(j_per_request, 2) AS j_per_request, round(j_per_request_lo, 2) AS j_per_request_lo,
       round(j_per_request_hi, 2) AS j_per_request_hi,
       round(j_per_request_above_idle, 2) AS j_per_request_above_idle,
       round(usd_per_1m_output_tokens, 4) AS usd_per_1m_output_tokens,
       round(usd_per_1m_output_tokens_lo, 4) AS usd_per_1m_output_tokens_lo,
       round(usd_per_1m_output_tokens_hi, 4) AS usd_per_1m_output_tokens_hi,
       round(mean_power_w, 1) AS mean_power_w, round(mean_power_w_lo, 1) AS mean_power_w_lo,
       round(mean_power_w_hi, 1) AS mean_power_w_hi,
       round(ttft_p99_ms, 1) AS ttft_p99_ms, round(tpot_p99_ms, 2) AS tpot_p99_ms,
       probes, round(window_s, 1) AS window_s, round(time_s, 1) AS time_s, stopped_by, answer, note, server_start,
       interval_scope, search_id, run_id
FROM v_slo_capacity
WHERE run_id = $run_id
ORDER BY engine, workload, server_start;
