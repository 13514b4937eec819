-- What to buy: one traffic profile sized on several runs - typically the same plan measured on different GPU
-- kinds, each run with its own $/GPU-hour - and every engine config of every run ranked by what meeting the
-- profile at the SLO costs a month (GPUs sized for the peak, always on, plus the energy line). Per run the
-- arithmetic is MACRO capacity_plan in sql/views.sql (the same as sql/capacity_plan.sql); configs with no
-- capacity within the SLO rank last, NULL, with the reason in `note`.
-- Every cost carries its interval: the fleet at the upper end of the capacity's 95% interval (the fewest GPUs it
-- allows) to the fleet at its lower end (what the plan buys: monthly_total_usd), around the fleet at its estimate.
-- Configs rank by the estimate; `verdict` says whether the cheapest is a clear winner: its interval's upper end
-- below every other's lower end. Where intervals overlap the cheapest's, those configs share 'no clear winner'.
-- An interval's scope is the capacity's (sql/views.sql v_point_figures_live: another start, or within one start, which
-- sizes nothing); two runs of the same GPU kind are two machines, each sized on its own.
-- $runs (a list of run ids); traffic profile: $steady_qps, $peak_qps, $input_tokens, $output_tokens.
WITH asked AS (SELECT unnest($runs::VARCHAR[]) AS run_id),
sized AS (
    SELECT c.*
    FROM asked a, LATERAL capacity_plan(a.run_id, $steady_qps, $peak_qps, $input_tokens, $output_tokens) c),
gpu AS (
    SELECT run_id, config_name AS engine, any_value(gpu_name) AS gpu_name
    FROM deployments GROUP BY run_id, config_name),
costed AS (
    SELECT s.*, g.gpu_name, r.source AS run_source,
           s.monthly_gpu_usd_mean + coalesce(s.monthly_energy_usd, 0)    AS total_mean,
           s.monthly_gpu_usd_fewest + coalesce(s.monthly_energy_usd, 0)  AS total_lo,
           s.monthly_gpu_usd + coalesce(s.monthly_energy_usd, 0)         AS total_hi
    FROM sized s LEFT JOIN gpu g USING (run_id, engine) LEFT JOIN runs r USING (run_id)),
ranked AS (
    SELECT *, row_number() OVER (ORDER BY total_mean NULLS LAST, total_hi NULLS LAST, gpu_name, engine) AS rank
    FROM costed),
best AS (SELECT total_lo AS best_lo, total_hi AS best_hi FROM ranked WHERE rank = 1 AND total_mean IS NOT NULL),
rivals AS (  -- how many other sized configs' intervals reach the cheapest's
    SELECT count(*) FILTER (WHERE r.rank > 1 AND r.total_lo <= b.best_hi) AS overlapping
    FROM ranked r, best b WHERE r.total_mean IS NOT NULL)
SELECT r.rank, r.gpu_name, r.engine, r.engine_kind, r.precision, r.tp, r.gpus_per_replica,
       round(r.goodput_per_replica, 2)                                      AS capacity_rps_per_replica,
       round(r.goodput_mean_per_replica, 2)                                 AS capacity_rps_estimate,
       r.steady_gpus, r.peak_gpus,
       r.gpu_price_per_hour,
       round(r.total_mean, 0)                                               AS monthly_total_usd_estimate,
       round(r.total_lo, 0)                                                 AS monthly_total_usd_lo,
       round(r.total_hi, 0)                                                 AS monthly_total_usd,
       round(r.monthly_gpu_usd, 0)                                          AS monthly_gpu_usd,
       round(r.monthly_energy_usd, 0)                                       AS monthly_energy_usd,
       CASE WHEN r.total_mean IS NULL THEN 'not sized'
            WHEN r.rank = 1 AND x.overlapping = 0 THEN 'cheapest: a clear winner (its interval ends below every other)'
            WHEN r.rank = 1 THEN 'no clear winner: its interval overlaps ' || x.overlapping || ' other(s)'
            WHEN r.total_lo <= b.best_hi THEN 'no clear winner: overlaps the cheapest'
            ELSE 'costs more than the cheapest (intervals apart)' END       AS verdict,
       r.burst_meets_slo, r.note, r.run_source AS source, r.run_id
FROM ranked r LEFT JOIN best b ON true LEFT JOIN rivals x ON true
ORDER BY r.rank;
