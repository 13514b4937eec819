-- Two runs side by side (`wattbench report --compare RUN_A RUN_B`): every load point both measured, one row per
-- (point, metric), B against A. change = (B - A) / |A|; band = max(3 x noise, 5%), noise = robust relative stdev
-- (1.4826 x MAD / |median|) of the metric over runs of the point up to and including A. Flags as in sql/regressions.sql ('no baseline': the point
-- is not in run A). Logic: MACRO compare_points (sql/views.sql). $run_a: the baseline, $run_b: the new run.
SELECT engine, workload, point_label, metric, better,
       base_value AS run_a, value AS run_b,
       round(100 * change_rel, 1) AS change_pct,
       round(100 * band_rel, 1)   AS band_pct,
       repeats, history_runs, band_from, flag, load_point_id
FROM compare_points($run_b, $run_a)
ORDER BY engine, workload, point_label, ord;
