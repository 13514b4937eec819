-- The engines of one run compared at every point they share: engine / other, the 95% interval of that ratio where
-- repeats pair up (throughput, power, tokens per joule, cost), and the finding: '<engine> better', or 'no
-- significant difference' when the interval holds 1 (latency percentiles: when the two intervals overlap).
-- A capacity search's probe measured once by either engine is left out: the search chose where to probe, so two
-- engines sharing one probe window is chance, and the search's own comparison is slo_capacity (with its interval).
-- Logic: v_engine_contrasts (sql/views.sql). $run_id: the run.
SELECT workload, point_label, label AS figure, unit, engine, other, round(ratio, 3) AS ratio,
       round(ratio_lo, 3) AS ratio_lo, round(ratio_hi, 3) AS ratio_hi, pairs, finding, method, metric
FROM v_engine_contrasts c
WHERE run_id = $run_id AND engine > other
  AND NOT (pairs < 2 AND EXISTS (SELECT 1 FROM load_runs l WHERE l.run_id = c.run_id AND l.workload = c.workload
                                 AND l.point_label = c.point_label AND l.search_id IS NOT NULL))
ORDER BY workload, point_label, ord, engine, other;
