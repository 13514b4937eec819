-- Every load run of one run (each repeat of each point) with its latency, throughput, energy and cost figures
-- (units in the names; definitions in docs/MEASUREMENT.md, formulas in docs/REPORTS.md, columns from v_load_points
-- in sql/views.sql). Summaries over repeats with 95% intervals: sql/load_points.sql.
-- goodput: requests/s meeting every SLO of the plan; tok/J = output tokens in the window / counter energy;
-- counter_w_per_gpu: energy counter over the window / window / GPUs (figure of record); trace mean/peak W per GPU
-- and capped shares from the sampled power trace (diagnosis); $ per 1M = GPU-hour price x GPUs / (output tok/s x 3600) x 1e6;
-- energy $ per 1M = kWh per 1M output tokens x $/kWh x PUE (second line).
-- $run_id: the run (wattbench sql fills in the latest run when omitted).
SELECT engine, workload, point_label, repeat, shape, concurrency, rate, window_s,
       round(achieved_rate, 2)              AS achieved_rate,
       round(achieved_concurrency, 1)       AS achieved_concurrency,
       round(output_tok_s, 1)               AS output_tok_s,
       round(requests_s, 2)                 AS requests_s,
       round(goodput_requests_s, 2)         AS goodput_requests_s,
       round(ttft_p50_ms, 1) AS ttft_p50_ms, round(ttft_p90_ms, 1) AS ttft_p90_ms, round(ttft_p99_ms, 1) AS ttft_p99_ms,
       round(tpot_p50_ms, 2) AS tpot_p50_ms, round(tpot_p90_ms, 2) AS tpot_p90_ms, round(tpot_p99_ms, 2) AS tpot_p99_ms,
       round(itl_p50_ms, 2)  AS itl_p50_ms,  round(itl_p90_ms, 2)  AS itl_p90_ms,  round(itl_p99_ms, 2)  AS itl_p99_ms,
       round(e2e_p50_ms, 1)  AS e2e_p50_ms,  round(e2e_p90_ms, 1)  AS e2e_p90_ms,  round(e2e_p99_ms, 1)  AS e2e_p99_ms,
       round(j_per_output_token, 4)         AS j_per_output_token,
       round(output_tokens_per_j, 3)        AS output_tokens_per_j,
       round(output_tokens_per_j_above_idle, 3) AS output_tokens_per_j_above_idle,
       round(counter_w_per_gpu, 1)          AS counter_w_per_gpu,
       round(idle_power_w, 1)               AS idle_power_w,
       round(trace_mean_w_per_gpu, 1)       AS trace_mean_w_per_gpu,
       round(trace_peak_w_per_gpu, 1)       AS trace_peak_w_per_gpu,
       round(peak_hbm_mib_per_gpu / 1024, 1) AS peak_hbm_gib_per_gpu,
       round(power_capped_share, 3)         AS power_capped_share,
       round(thermal_capped_share, 3)       AS thermal_capped_share,
       round(usd_per_1m_output_tokens, 3)   AS usd_per_1m_output_tokens,
       round(energy_usd_per_1m_output_tokens, 4) AS energy_usd_per_1m_output_tokens,
       meets_slo_p99, failed_requests, source, load_point_id
FROM v_load_points
WHERE run_id = $run_id
ORDER BY engine, workload, coalesce(concurrency, 0), coalesce(rate, 0), repeat;
