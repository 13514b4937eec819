-- Regressions: this run's load points against the previous run of the same point (same model, engine kind,
-- config name, precision, tp, GPU, source, workload and point label), one row per (point, metric).
-- change = (this - previous) / |previous|. Band: from the two runs' 95% intervals where both have them (repeats,
-- or a latency bootstrap): a change only when the intervals do not overlap; else from the run history: noise =
-- robust relative stdev (1.4826 x MAD / |median|) over the earlier runs of the point (2 or more), band =
-- max(3 x noise, 5%). Flag: within the band 'within noise', else 'REGRESSION' in the worse direction ('better' says
-- which is better), 'improvement' otherwise. Logic: MACRO compare_points
-- (sql/views.sql). $run_id: the run.
SELECT engine, workload, point_label, metric, better,
       base_value AS previous, value AS this_run,
       round(100 * change_rel, 1) AS change_pct,
       round(100 * band_rel, 1)   AS band_pct,
       repeats, history_runs, band_from, flag, base_run_id AS previous_run_id, load_point_id
FROM compare_points($run_id, NULL)
ORDER BY CASE flag WHEN 'REGRESSION' THEN 0 WHEN 'improvement' THEN 1 ELSE 2 END, engine, workload, point_label, ord;
