-- What to buy: one traffic profile sized on several runs - typically the same plan measured on different GPU
-- kinds, each run with its own $/GPU-hour - and every engine config of every run ranked by what meeting the
-- profile at the SLO costs a month (GPUs sized for the peak, always on, plus the energy line). Per run the
-- arithmetic is MACRO capacity_plan in sql/views.sql (the same as sql/capacity_plan.sql); configs with no
-- capacity within the SLO rank last, NULL, with the reason in `note`.
-- $runs (a list of run ids); traffic profile: $steady_qps, $peak_qps, $input_tokens, $output_tokens.
WITH asked AS (SELECT unnest($runs::VARCHAR[]) AS run_id),
sized AS (
    SELECT c.*
    FROM asked a, LATERAL capacity_plan(a.run_id, $steady_qps, $peak_qps, $input_tokens, $output_tokens) c),
gpu AS (
    SELECT run_id, config_name AS engine, any_value(gpu_name) AS gpu_name
    FROM deployments GROUP BY run_id, config_name)
SELECT row_number() OVER (ORDER BY s.monthly_gpu_usd + coalesce(s.monthly_energy_usd, 0) NULLS LAST,
                                   g.gpu_name, s.engine)                    AS rank,
       g.gpu_name, s.engine, s.engine_kind, s.precision, s.tp, s.gpus_per_replica,
       round(s.goodput_per_replica, 2)                                      AS capacity_rps_per_replica,
       s.steady_gpus, s.peak_gpus,
       s.gpu_price_per_hour,
       round(s.monthly_gpu_usd, 0)                                          AS monthly_gpu_usd,
       round(s.monthly_energy_usd, 0)                                       AS monthly_energy_usd,
       round(s.monthly_gpu_usd + coalesce(s.monthly_energy_usd, 0), 0)      AS monthly_total_usd,
       s.burst_meets_slo, s.note, r.source, s.run_id
FROM sized s
LEFT JOIN gpu g USING (run_id, engine)
LEFT JOIN runs r USING (run_id)
ORDER BY rank;
