-- Every figure of every point of one run in long form, with its 95% interval, unit, better direction and how the
-- interval was made (v_point_figures in sql/views.sql). $run_id: the run.
SELECT engine, workload, point_label, label AS figure, unit, estimate, lo, hi, repeats, n, method, metric, better
FROM v_point_figures
WHERE run_id = $run_id
ORDER BY engine, workload, coalesce(concurrency, 0), coalesce(rate, 0), point_label, ord;
