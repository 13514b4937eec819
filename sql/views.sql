-- Derived views over the stage tables, recreated with the schema. Definitions follow docs/MEASUREMENT.md:
-- latency percentiles over successful requests sent inside the steady-state window; throughput over the
-- window; energy from the GPU energy counter over the same window, summed over the deployment's GPUs.

-- Inter-token latency: every gap between consecutive content-bearing events, pooled over requests.
CREATE OR REPLACE VIEW v_itl AS
SELECT run_id, deployment_id, load_point_id,
       (chunk_ns[i + 1] - chunk_ns[i]) / 1e6 AS itl_ms
FROM (
    SELECT run_id, deployment_id, load_point_id, chunk_ns,
           unnest(range(1, len(chunk_ns))) AS i
    FROM requests
    WHERE in_window AND error_kind IS NULL AND len(chunk_ns) > 1
);

CREATE OR REPLACE VIEW v_request_stats AS
SELECT q.run_id, q.deployment_id, q.load_point_id,
       count(*) FILTER (WHERE q.in_window)                              AS requests_in_window,
       count(*) FILTER (WHERE q.in_window AND q.error_kind IS NULL)     AS ok_in_window,
       count(*) FILTER (WHERE q.error_kind IS NOT NULL)                 AS errors,
       quantile_cont(q.ttft_ms, 0.50) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p50_ms,
       quantile_cont(q.ttft_ms, 0.90) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p90_ms,
       quantile_cont(q.ttft_ms, 0.99) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS ttft_p99_ms,
       quantile_cont(q.tpot_ms, 0.50) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p50_ms,
       quantile_cont(q.tpot_ms, 0.90) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p90_ms,
       quantile_cont(q.tpot_ms, 0.99) FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS tpot_p99_ms,
       quantile_cont(q.e2e_ms, 0.50)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p50_ms,
       quantile_cont(q.e2e_ms, 0.90)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p90_ms,
       quantile_cont(q.e2e_ms, 0.99)  FILTER (WHERE q.in_window AND q.error_kind IS NULL) AS e2e_p99_ms,
       count(*) FILTER (
           WHERE q.in_window AND q.error_kind IS NULL
             AND (r.slo_ttft_ms IS NULL OR q.ttft_ms <= r.slo_ttft_ms)
             AND (r.slo_tpot_ms IS NULL OR q.tpot_ms IS NULL OR q.tpot_ms <= r.slo_tpot_ms)
             AND (r.slo_e2e_ms IS NULL OR q.e2e_ms <= r.slo_e2e_ms)
       )                                                                AS meeting_slo_in_window,
       max(q.prompt_tokens + q.completion_tokens) FILTER (WHERE q.error_kind IS NULL) AS longest_context_tokens
FROM requests q
LEFT JOIN runs r USING (run_id)
GROUP BY ALL;

CREATE OR REPLACE VIEW v_itl_stats AS
SELECT run_id, deployment_id, load_point_id,
       quantile_cont(itl_ms, 0.50) AS itl_p50_ms,
       quantile_cont(itl_ms, 0.99) AS itl_p99_ms
FROM v_itl GROUP BY ALL;

-- Power and memory inside each load point's window, per GPU then over the deployment.
CREATE OR REPLACE VIEW v_window_gpu AS
SELECT l.run_id, l.deployment_id, l.load_point_id,
       avg(s.power_w)                                          AS mean_power_w_per_gpu,
       max(s.power_w)                                          AS peak_power_w_per_gpu,
       max(s.hbm_used_mib)                                     AS peak_hbm_mib_per_gpu,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL
                WHEN s.clock_events LIKE '%power%' OR s.clock_events LIKE '%thermal%' THEN 1.0 ELSE 0.0 END)
                                                               AS capped_share,
       count(*)                                                AS samples
FROM load_runs l
JOIN gpu_samples s
  ON s.run_id = l.run_id AND s.deployment_id = l.deployment_id
 AND s.t_ns BETWEEN l.window_start_ns AND l.window_end_ns
GROUP BY ALL;

CREATE OR REPLACE VIEW v_load_points AS
SELECT l.run_id, l.source, d.config_name AS engine, d.engine AS engine_kind, d.model, d.precision, d.tp,
       d.gpu_name, d.n_gpus, l.deployment_id, l.load_point_id, l.workload, l.shape, l.concurrency, l.rate,
       l.burstiness, l.input_tokens, l.output_tokens, l.window_s, l.achieved_rate, l.achieved_concurrency,
       l.completed, l.failed,
       l.output_tokens_in_window / l.window_s                          AS output_tok_s,
       q.ok_in_window / l.window_s                                     AS requests_s,
       q.meeting_slo_in_window / l.window_s                            AS goodput_requests_s,
       q.ttft_p50_ms, q.ttft_p90_ms, q.ttft_p99_ms,
       q.tpot_p50_ms, q.tpot_p90_ms, q.tpot_p99_ms,
       i.itl_p50_ms, i.itl_p99_ms,
       q.e2e_p50_ms, q.e2e_p90_ms, q.e2e_p99_ms,
       l.energy_j,
       l.energy_trace_j,
       l.energy_j / nullif(l.output_tokens_in_window, 0)               AS j_per_output_token,
       l.output_tokens_in_window / nullif(l.energy_j, 0)               AS output_tokens_per_j,
       l.energy_j / l.window_s                                          AS mean_power_w,
       (l.energy_j - l.idle_power_w * l.window_s) / nullif(l.output_tokens_in_window, 0)
                                                                        AS j_per_output_token_above_idle,
       g.mean_power_w_per_gpu, g.peak_power_w_per_gpu, g.peak_hbm_mib_per_gpu, g.capped_share,
       r.gpu_price_per_hour * d.n_gpus / nullif(l.output_tokens_in_window / l.window_s * 3600, 0) * 1e6
                                                                        AS usd_per_1m_output_tokens,
       l.energy_j / nullif(l.output_tokens_in_window, 0) * 1e6 / 3.6e6 * r.energy_price_per_kwh * r.pue
                                                                        AS energy_usd_per_1m_output_tokens,
       (r.slo_ttft_ms IS NULL OR q.ttft_p99_ms <= r.slo_ttft_ms)
         AND (r.slo_tpot_ms IS NULL OR q.tpot_p99_ms <= r.slo_tpot_ms)
         AND (r.slo_e2e_ms IS NULL OR q.e2e_p99_ms <= r.slo_e2e_ms)    AS meets_slo_p99,
       q.longest_context_tokens
FROM load_runs l
JOIN deployments d USING (run_id, deployment_id)
LEFT JOIN runs r USING (run_id)
LEFT JOIN v_request_stats q USING (run_id, deployment_id, load_point_id)
LEFT JOIN v_itl_stats i USING (run_id, deployment_id, load_point_id)
LEFT JOIN v_window_gpu g USING (run_id, deployment_id, load_point_id)
WHERE l.status = 'ok';
