-- Fill deployments.hbm_used_mib / hbm_total_mib (after load, before traffic) from the GPU samples taken in
-- each deployment's idle_before window, summed over its GPUs. Run at ingest; leaves values the agent gave.
UPDATE deployments AS d
SET hbm_used_mib = coalesce(d.hbm_used_mib, x.used), hbm_total_mib = coalesce(d.hbm_total_mib, x.total)
FROM (
    SELECT deployment_id, sum(used) AS used, sum(total) AS total
    FROM (
        SELECT s.deployment_id, s.gpu_uuid, max(s.hbm_used_mib) AS used, max(s.hbm_total_mib) AS total
        FROM gpu_samples s
        JOIN energy_windows w
          ON w.run_id = s.run_id AND w.deployment_id = s.deployment_id AND w.gpu_uuid = s.gpu_uuid
         AND w.window_name = 'idle_before' AND s.t_ns BETWEEN w.start_ns AND w.end_ns
        WHERE s.run_id = $run_id
        GROUP BY ALL
    )
    GROUP BY deployment_id
) AS x
WHERE d.run_id = $run_id AND d.deployment_id = x.deployment_id;
