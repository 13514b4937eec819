-- The hybrid topology of the seed article (a steady baseline pool on one engine, an elastic pool for the bursts on
-- another) against each engine alone. Every (baseline, elastic) pair of engine configs that meets the SLO, plus
-- each config alone always on for the peak:
--   baseline pool: ceil(steady QPS / capacity) replicas, billed 730 h/month;
--   elastic pool:  ceil((peak - steady QPS) / capacity) replicas, billed burst_hours_per_day x 730/24 h/month at
--                  the elastic $/GPU-hour ($elastic_gpu_hour_usd, NULL = the plan's GPU-hour price);
--   always on:     ceil(peak QPS / capacity) replicas, billed 730 h/month.
-- `pick` marks the cheapest topologies and the rule's hybrid: baseline = highest capacity per GPU (best at steady state); elastic = lowest
-- worst-case p99 TTFT under gamma/surge arrivals among configs meeting the SLO there (best under bursts; the
-- baseline engine when none was measured under bursts). Capacity per config: MACRO capacity_plan (sql/views.sql).
-- $run_id, $steady_qps, $peak_qps, $input_tokens, $output_tokens, $burst_hours_per_day, $elastic_gpu_hour_usd.
WITH c AS (
    SELECT * FROM capacity_plan($run_id, $steady_qps, $peak_qps, $input_tokens, $output_tokens)
    WHERE goodput_per_replica > 0),
prm AS (SELECT $burst_hours_per_day::DOUBLE * 730 / 24 AS burst_hours_month,
               $elastic_gpu_hour_usd::DOUBLE AS elastic_price),
best_steady AS (SELECT engine FROM c ORDER BY goodput_per_gpu DESC, engine LIMIT 1),
best_burst AS (
    SELECT coalesce((SELECT engine FROM c WHERE burst_meets_slo ORDER BY burst_ttft_p99_ms, engine LIMIT 1),
                    (SELECT engine FROM best_steady)) AS engine),
topo AS (
    SELECT CASE WHEN b.engine = e.engine THEN b.engine || ' alone, steady + elastic pools'
                ELSE 'hybrid: ' || b.engine || ' baseline + ' || e.engine || ' elastic' END AS topology,
           b.engine AS baseline_engine,
           b.steady_replicas AS baseline_replicas, b.steady_replicas * b.gpus_per_replica AS baseline_gpus,
           e.engine AS elastic_engine,
           ceil(greatest(e.peak_qps - e.steady_qps, 0) / e.goodput_per_replica)::INTEGER AS elastic_replicas,
           ceil(greatest(e.peak_qps - e.steady_qps, 0) / e.goodput_per_replica)::INTEGER * e.gpus_per_replica AS elastic_gpus,
           b.steady_replicas * b.gpus_per_replica * 730 AS baseline_gpu_hours,
           ceil(greatest(e.peak_qps - e.steady_qps, 0) / e.goodput_per_replica) * e.gpus_per_replica * prm.burst_hours_month
               AS elastic_gpu_hours,
           b.steady_replicas * b.gpus_per_replica * 730 * b.gpu_price_per_hour
             + ceil(greatest(e.peak_qps - e.steady_qps, 0) / e.goodput_per_replica) * e.gpus_per_replica
               * prm.burst_hours_month * coalesce(prm.elastic_price, e.gpu_price_per_hour) AS monthly_gpu_usd,
           (b.steady_replicas * b.power_w_per_replica * 730 * b.energy_price_per_kwh * b.pue
             + ceil(greatest(e.peak_qps - e.steady_qps, 0) / e.goodput_per_replica) * e.power_w_per_replica
               * prm.burst_hours_month * e.energy_price_per_kwh * e.pue) / 1000 AS monthly_energy_usd,
           (b.engine = (SELECT engine FROM best_steady) AND e.engine = (SELECT engine FROM best_burst)) AS pick,
           b.sized_on AS baseline_sized_on, e.sized_on AS elastic_sized_on
    FROM c b CROSS JOIN c e CROSS JOIN prm
    UNION ALL
    SELECT engine || ' alone, always on for the peak', engine, peak_replicas, peak_gpus, NULL, 0, 0,
           peak_gpus * 730, 0, monthly_gpu_usd, monthly_energy_usd, false, sized_on, NULL
    FROM c),
rule AS (SELECT monthly_gpu_usd AS pick_usd FROM topo WHERE pick),
cheapest AS (SELECT min(monthly_gpu_usd) AS usd FROM topo)
SELECT topology,
       concat_ws(', ', CASE WHEN pick THEN 'rule pick' END,
                 CASE WHEN monthly_gpu_usd <= (SELECT usd FROM cheapest) THEN 'cheapest' END) AS pick,
       baseline_engine, baseline_replicas, baseline_gpus, elastic_engine, elastic_replicas, elastic_gpus,
       round(baseline_gpu_hours + elastic_gpu_hours, 0) AS gpu_hours_per_month,
       round(monthly_gpu_usd, 0)    AS monthly_gpu_usd,
       round(monthly_energy_usd, 0) AS monthly_energy_usd,
       round(100 * (monthly_gpu_usd - (SELECT pick_usd FROM rule)) / nullif((SELECT pick_usd FROM rule), 0), 1)
           AS vs_pick_pct,
       baseline_sized_on, elastic_sized_on, NULL::VARCHAR AS note
FROM topo
UNION ALL
SELECT 'none', '', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       'no engine config meets the p99 SLO at any measured load point: no topology can be sized'
WHERE NOT EXISTS (SELECT 1 FROM c)
ORDER BY monthly_gpu_usd NULLS LAST, topology;
