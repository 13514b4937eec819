-- What a run's intervals describe, one line per engine and scope (sql/views.sql v_point_figures_live's
-- interval_scope): printed under every table of figures (`wattbench run`, `report`, the HTML report), so that no
-- interval is read as more than it is. A capacity search's probes are left out (their figures are the search's, slo_capacity).
SELECT f.run_id, f.engine, f.interval_scope, max(f.starts) AS starts, count(DISTINCT f.workload || ':' || f.point_label)
       AS points,
       f.engine || ': ' || CASE f.interval_scope
           WHEN 'starts' THEN '95% intervals hold another server start on this machine (' || max(f.starts)
                              || ' starts measured)'
           WHEN 'starts+prior' THEN '95% intervals hold another server start or machine (' || max(f.starts)
                                    || ' starts measured, pooled with the between-start prior)'
           WHEN 'prior' THEN '95% intervals hold another server start or machine (1 start measured, the '
                             || 'between-start spread from the prior)'
           ELSE '95% intervals within ONE server start only: they say nothing of another start, and no fleet is '
                || 'sized on them' END
       || ', ' || count(DISTINCT f.workload || ':' || f.point_label) || ' point(s)' AS scope
FROM point_figures f
WHERE f.run_id = $run_id AND f.metric = 'output_tok_s'
  AND NOT EXISTS (SELECT 1 FROM load_runs l WHERE l.run_id = f.run_id AND l.deployment_id = f.deployment_id
                  AND l.workload = f.workload AND l.point_label = f.point_label AND l.search_id IS NOT NULL)
GROUP BY f.run_id, f.engine, f.interval_scope
ORDER BY f.engine, f.interval_scope;
