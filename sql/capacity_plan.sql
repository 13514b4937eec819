-- Capacity plan: for the traffic profile and the run's SLO, the fewest GPUs per engine config and their monthly
-- cost (always on, sized for the peak). Per-replica capacity = the 95% lower bound of a point's goodput (requests/s
-- meeting every SLO, over its repeats), at the point with the highest such bound among those whose p99 TTFT/TPOT/E2E
-- meet the SLO on their upper bounds (a point without an interval: its measured value, its worst repeat), at the
-- measured workload lengths nearest the profile's; sized_on names the point, sized_bound the bounds used.
-- replicas = ceil(QPS / capacity); GPUs = replicas x GPUs per deployment; $/month = GPUs x $/GPU-hour x 730 h;
-- energy $/month = replicas x measured deployment W at the sizing point x 730 h x $/kWh x PUE (second line).
-- NULL with a `note` when no point meets the SLO. Arithmetic: MACRO capacity_plan in sql/views.sql.
-- $run_id; traffic profile (plan section `capacity`): $steady_qps, $peak_qps, $input_tokens, $output_tokens
-- (the last two may be NULL: use every measured length). source: measured | emulated | predicted (wattbench
-- predict: the twin's figures, not a measurement).
SELECT engine, source, engine_kind, precision, tp, gpus_per_replica,
       steady_qps, peak_qps,
       round(goodput_per_replica, 2)   AS capacity_rps_per_replica,
       round(goodput_per_gpu, 3)       AS capacity_rps_per_gpu,
       steady_replicas, steady_gpus, peak_replicas, peak_gpus,
       round(monthly_gpu_usd, 0)       AS monthly_gpu_usd,
       round(monthly_energy_usd, 0)    AS monthly_energy_usd,
       round(sized_ttft_p99_ms, 1)     AS sized_ttft_p99_ms,
       round(sized_tpot_p99_ms, 2)     AS sized_tpot_p99_ms,
       round(burst_ttft_p99_ms, 1)     AS burst_ttft_p99_ms,
       burst_meets_slo,
       measured_input_tokens, measured_output_tokens,
       note, sized_on, sized_bound, burst_point, run_id
FROM capacity_plan($run_id, $steady_qps, $peak_qps, $input_tokens, $output_tokens)
ORDER BY monthly_gpu_usd NULLS LAST, engine;
