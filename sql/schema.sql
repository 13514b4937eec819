-- wattbench warehouse schema. Applied idempotently by wattbench/warehouse.py; bump SCHEMA_VERSION there
-- and add a migration block below when a table changes. Every table carries run_id and source
-- ('emulated' for rows produced by the built-in emulator, 'measured' for real engines and real NVML).
-- Values that were not measured are NULL, never 0.
-- Clocks: *_ns columns are CLOCK_MONOTONIC nanoseconds (time.perf_counter_ns) of the host that measured
-- them; runs.clock_anchor_* converts them to wall-clock time.

CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    applied_at  TIMESTAMP DEFAULT current_timestamp
);

CREATE TABLE IF NOT EXISTS runs (
    run_id              VARCHAR PRIMARY KEY,
    source              VARCHAR NOT NULL,
    plan_name           VARCHAR,
    plan_path           VARCHAR,
    plan_sha256         VARCHAR,
    started_at          TIMESTAMP,
    finished_at         TIMESTAMP,
    status              VARCHAR,            -- running | complete | blocked | failed | interrupted | ingested | incomplete (docs/RELIABILITY.md)
    host                VARCHAR,
    wattbench_version   VARCHAR,
    clock_anchor_mono_ns BIGINT,            -- perf_counter_ns() ...
    clock_anchor_unix_ns BIGINT,            -- ... read together with time.time_ns()
    gpu_price_per_hour  DOUBLE,             -- $ per GPU-hour used for the cost reports
    energy_price_per_kwh DOUBLE,
    pue                 DOUBLE,
    slo_ttft_ms         DOUBLE,             -- the plan's SLO; goodput counts requests meeting all of them
    slo_tpot_ms         DOUBLE,
    slo_e2e_ms          DOUBLE
);

CREATE TABLE IF NOT EXISTS engine_builds (
    run_id          VARCHAR NOT NULL,
    source          VARCHAR NOT NULL,
    build_id        VARCHAR NOT NULL,       -- content address: sha256 of the build config
    model           VARCHAR NOT NULL,
    engine          VARCHAR NOT NULL,       -- trtllm | vllm | sglang | transformers | external | emulator:<profile>
    config_name     VARCHAR NOT NULL,
    precision       VARCHAR,
    tp              INTEGER,
    gpu_name        VARCHAR,
    status          VARCHAR NOT NULL,       -- built | cached | no_build | failed
    build_s         DOUBLE,                 -- wall time of the build (modelled for the emulator)
    artifact_sha256 VARCHAR,
    artifact_bytes  BIGINT,
    engine_version  VARCHAR,
    hardware_lock   JSON,                   -- gpu name, compute capability, driver, engine version
    config          JSON,
    error_kind      VARCHAR,
    error_text      VARCHAR,
    PRIMARY KEY (run_id, build_id)
);

CREATE TABLE IF NOT EXISTS deployments (
    run_id              VARCHAR NOT NULL,
    source              VARCHAR NOT NULL,
    deployment_id       VARCHAR NOT NULL,
    build_id            VARCHAR,
    model               VARCHAR NOT NULL,
    engine              VARCHAR NOT NULL,
    config_name         VARCHAR NOT NULL,
    precision           VARCHAR,
    tp                  INTEGER,
    gpu_name            VARCHAR,
    n_gpus              INTEGER,
    gpu_uuids           VARCHAR[],
    target              VARCHAR,            -- local | kubernetes | external
    url                 VARCHAR,
    engine_version      VARCHAR,            -- as the running engine says it (/version or its log); NULL if it did not
    engine_version_source VARCHAR,          -- where engine_version was read: /version | log | unknown
    version_checked     BOOLEAN,            -- the adapter was checked against this version (false: validation warns)
    status              VARCHAR NOT NULL,   -- healthy | failed
    startup_s           DOUBLE,             -- process start -> health OK (the first server start's; each start's in config.starts)
    server_starts       INTEGER,            -- how many times the agent started the engine (NULL: one, before schema 12)
    hbm_used_mib        DOUBLE,             -- after load, before traffic, summed over the deployment's GPUs
    hbm_total_mib       DOUBLE,
    idle_power_w_before DOUBLE,             -- engine loaded, no traffic; summed over GPUs
    idle_power_w_after  DOUBLE,
    idle_settle_s_before DOUBLE,            -- seconds waited for the GPUs to go quiet before the idle_before window
    idle_settled_before BOOLEAN,            -- they did (utilisation 0, power steady); false: taken at the timeout
    idle_settle_s_after DOUBLE,
    idle_settled_after  BOOLEAN,
    driver_version      VARCHAR,
    power_limit_w       DOUBLE,             -- per GPU
    persistence_mode    BOOLEAN,
    telemetry_source    VARCHAR,            -- nvml | emulated | none
    sampler_hz          DOUBLE,
    sampler_cpu_share   DOUBLE,             -- share of one core used by the sampler process
    sampler_call_ms     DOUBLE,             -- mean latency of one sampling call
    log_path            VARCHAR,
    error_kind          VARCHAR,
    error_text          VARCHAR,
    config              JSON,
    gpu_serials         VARCHAR[],          -- per GPU (gpu_uuids' order), as NVML says; NULL where it does not
    gpu_pci_bus_ids     VARCHAR[],          -- per GPU, PCI bus id (domain:bus:device.function)
    host                VARCHAR,            -- the node the agent ran on (its host name)
    cpu_model           VARCHAR,            -- /proc/cpuinfo model name
    cpu_logical         INTEGER,            -- logical CPUs of the host
    cpu_usable          DOUBLE,             -- CPUs the agent may use: its affinity, lowered to a cgroup quota
    cpu_mhz             DOUBLE,             -- mean current CPU clock over the logical CPUs when the agent started
    cpu_max_mhz         DOUBLE,             -- the highest clock cpufreq allows
    hypervisor          VARCHAR,            -- none (bare metal) | the hypervisor's name (DMI, else kvm/hyperv/xen) | unknown
    kernel              VARCHAR,
    model_weights_hash  VARCHAR,            -- sampled-v1:<sha256> of a model that is a local folder or file (docs/MEASUREMENT.md); NULL otherwise
    PRIMARY KEY (run_id, deployment_id)
);

CREATE TABLE IF NOT EXISTS load_runs (
    run_id                  VARCHAR NOT NULL,
    source                  VARCHAR NOT NULL,
    deployment_id           VARCHAR NOT NULL,
    load_point_id           VARCHAR NOT NULL,   -- <deployment>:<workload>:<point_label>[#<repeat>]
    point_label             VARCHAR,            -- c32, gamma-r6-b0.25, ...: the same for every repeat and engine
    repeat                  INTEGER,            -- 1-based; repeats of a point run interleaved across engines
    server_start            INTEGER,            -- which start of the engine ran it, 1-based (NULL before schema 12: 1)
    workload                VARCHAR NOT NULL,
    shape                   VARCHAR NOT NULL,   -- concurrency | poisson | gamma | surge | trace
    api                     VARCHAR,            -- chat | completions
    concurrency             INTEGER,
    rate                    DOUBLE,             -- requested requests/s
    burstiness              DOUBLE,
    input_tokens            INTEGER,
    output_tokens           INTEGER,
    warmup_s                DOUBLE,
    duration_s              DOUBLE,
    window_start_ns         BIGINT,
    window_end_ns           BIGINT,
    window_s                DOUBLE,
    drain_s                 DOUBLE,
    achieved_rate           DOUBLE,             -- requests/s sent inside the window
    achieved_concurrency    DOUBLE,             -- time-averaged in-flight requests inside the window
    send_lateness_p50_ms    DOUBLE,
    send_lateness_p99_ms    DOUBLE,
    sent                    INTEGER,
    completed               INTEGER,
    failed                  INTEGER,
    output_tokens_in_window BIGINT,             -- tokens whose content event arrived inside the window
    energy_j                DOUBLE,             -- energy counter delta over the window, summed over GPUs
    energy_trace_j          DOUBLE,             -- integrated instant-power trace over the same window
    energy_crosscheck_j     DOUBLE,             -- an independent reading of the same window (e.g. nvidia-smi)
    energy_crosscheck_source VARCHAR,
    idle_power_w            DOUBLE,             -- deployment idle baseline (mean of before/after), summed over GPUs
    status                  VARCHAR NOT NULL,   -- ok | failed
    error_kind              VARCHAR,
    error_text              VARCHAR,
    summary                 JSON,               -- the load generator's summary (percentiles etc.)
    step_gaps               BIGINT,             -- gaps between tokens the step decomposition read (per token)
    decode_step_ms          DOUBLE,             -- the median gap between consecutive tokens of a request, pooled
    stalled_gap_fraction    DOUBLE,             -- share of those gaps that are GPU stalls (longer than 1.5 decode steps, no delivery burst)
    stall_ms_mean           DOUBLE,             -- the GPU stalls' mean length; NULL without one
    gpu_stalls              BIGINT,             -- gaps that are GPU stalls (per token)
    delivery_stalls         BIGINT,             -- gaps that are delivery stalls: a stall ended by a burst of tokens within 0.5 ms, no prefill in it
    delivery_stalled_fraction DOUBLE,           -- their share of the gaps
    delivery_stall_ms_mean  DOUBLE,             -- their mean length; NULL without one
    prefills                BIGINT,             -- the window's requests with a first token (one prefill each)
    prefill_steps           BIGINT,             -- the prefill steps they ran in: first tokens within 0.5 ms of the next form one
    prefills_per_step       DOUBLE,             -- mean prefills a prefill step (every request of the load point counted in it)
    prefills_per_step_se    DOUBLE,             -- its standard error over the steps (a lower bound: a closed loop's groups persist)
    shared_prefill_fraction DOUBLE,             -- share of the window's prefills that shared their step with another
    expected_stalled_fraction DOUBLE,           -- closed loop of c streams, o tokens each: (c - 1) / (o - 1); NULL where undefined
    phase_state             VARCHAR,            -- bunched | spread, from prefills_per_step (docs/MEASUREMENT.md); NULL: phase_note says why
    phase_note              VARCHAR,            -- why phase_state is NULL (or what the decomposition could not read)
    host_load_1m            DOUBLE,             -- the host's 1-minute load average at the window's end
    host_busy_cpus          DOUBLE,             -- mean busy logical CPUs of the host over the window (/proc/stat)
    host_steal_share        DOUBLE,             -- share of the host's CPU time its hypervisor gave to others over the window
    engine_cpu_s            DOUBLE,             -- CPU seconds of the engine's processes and their children over the window
    search_id               VARCHAR,            -- a capacity search's probe: <deployment>:<workload> (searches); NULL: a plan's load point
    probe                   INTEGER,            -- its order in the search, 1-based
    probe_phase             VARCHAR,            -- bracket | bisect | repeat
    probe_verdict           VARCHAR,            -- meets | misses | oversaturated (its queue grew without bound: ended early)
    closed_loop             BOOLEAN,            -- the shape's traits (loadgen/shapes), written at ingest: streams resend on completion
    bursty                  BOOLEAN,            -- arrivals meant to come in bursts (gamma, surge); SQL asks these, not shape names
    PRIMARY KEY (run_id, load_point_id)
);

CREATE TABLE IF NOT EXISTS requests (
    run_id                  VARCHAR NOT NULL,
    source                  VARCHAR NOT NULL,
    deployment_id           VARCHAR NOT NULL,
    load_point_id           VARCHAR NOT NULL,
    request_id              VARCHAR NOT NULL,
    scheduled_ns            BIGINT,
    sent_ns                 BIGINT,
    first_token_ns          BIGINT,
    last_token_ns           BIGINT,
    ttft_ms                 DOUBLE,
    e2e_ms                  DOUBLE,
    tpot_ms                 DOUBLE,
    prompt_tokens           INTEGER,
    completion_tokens       INTEGER,
    token_count_source      VARCHAR,            -- usage | tokenizer | estimate
    input_tokens_requested  INTEGER,
    max_tokens              INTEGER,
    finish_reason           VARCHAR,
    http_status             INTEGER,
    error_kind              VARCHAR,            -- NULL when the request succeeded
    error_text              VARCHAR,
    chunk_ns                BIGINT[],           -- arrival of each content-bearing SSE event
    chunk_tokens            INTEGER[],          -- tokens carried by each of those events; NULL where chunk_tokens_each says
    chunk_tokens_each       INTEGER,            -- every event carried this many tokens (a token-by-token stream: 1), and chunk_tokens is not stored; read both through event_tokens() (sql/views.sql)
    events_file             VARCHAR,            -- the token store's file (its SHA-256; resources/token_store.py) holding this request's chunk_ns, which is then NULL; read both through request_ns() (sql/views.sql)
    events_at               BIGINT,             -- its first event in that file
    events_n                INTEGER,            -- its events there
    counts_file             VARCHAR,            -- the store's file holding its chunk_tokens at the same places, where chunk_tokens_each does not say them
    chunks_exact            INTEGER,            -- NULL: one entry per event; n: the first n are, the rest one per second (the last event's time, all their tokens): inter-token gaps from the first n only
    in_window               BOOLEAN,            -- sent inside the steady-state window
    PRIMARY KEY (run_id, load_point_id, request_id)
);

-- One row per SLO capacity search (agent/wattbench_agent/loadgen/search.py; docs/MEASUREMENT.md "SLO capacity"): per
-- deployment and search workload, the highest load meeting the SLO with attainment, found by the agent from its
-- probes (load_runs rows with this search_id). capacity: the highest load every window of which met the SLO;
-- capacity_lo/hi: its 95% interval, holding the search's step (up to the lowest load that missed above it) and the
-- repeats' spread (where attainment's interval crosses the target; docs/MEASUREMENT.md); NULL where none met
-- (status none) or the server failed (server_failed, refused); capacity_hi NULL when no load up to the search's
-- bound missed (status at_least).
CREATE TABLE IF NOT EXISTS searches (
    run_id              VARCHAR NOT NULL,
    source              VARCHAR NOT NULL,
    deployment_id       VARCHAR NOT NULL,
    search_id           VARCHAR NOT NULL,   -- <deployment>:<workload>[@s<start>]
    server_start        INTEGER,            -- which start of the engine ran the search, 1-based
    workload            VARCHAR NOT NULL,
    over                VARCHAR NOT NULL,   -- rate | concurrency
    unit                VARCHAR,            -- req/s | streams
    shape               VARCHAR,            -- poisson | gamma | concurrency
    burstiness          DOUBLE,
    slo_ttft_ms         DOUBLE,             -- the SLO searched for: per-request bounds ...
    slo_tpot_ms         DOUBLE,
    slo_e2e_ms          DOUBLE,
    attainment          DOUBLE,             -- ... and the share of a window's requests that must meet all of them
    status              VARCHAR NOT NULL,   -- found | at_least | none | server_failed | refused
    capacity            DOUBLE,
    capacity_lo         DOUBLE,
    capacity_hi         DOUBLE,
    at_point_label      VARCHAR,            -- the probes at the capacity (their point label; figures over their repeats)
    repeats_at_capacity INTEGER,
    binding             VARCHAR,            -- ttft_ms | tpot_ms | e2e_ms | no_error: the bound most missed just above
    binding_share       DOUBLE,             -- the share of requests meeting it there
    binding_load        DOUBLE,             -- the load it was read at
    probes              INTEGER,            -- probes used, repeats included
    window_s            DOUBLE,             -- seconds of measured windows over every probe
    time_s              DOUBLE,             -- wall time of the search
    stopped_by          VARCHAR,            -- max_probes | max_time: ended on a bound before the tolerance; NULL otherwise
    tolerance           DOUBLE,
    answer              VARCHAR,            -- the search's answer in words
    note                VARCHAR,
    search              JSON,               -- its settings
    probe_verdicts      JSON,               -- every probe: load point, verdict, attainment, the over-saturation reading
    PRIMARY KEY (run_id, search_id)
);

CREATE TABLE IF NOT EXISTS gpu_samples (
    run_id              VARCHAR NOT NULL,
    source              VARCHAR NOT NULL,
    deployment_id       VARCHAR NOT NULL,
    gpu_uuid            VARCHAR NOT NULL,
    gpu_index           INTEGER,
    t_ns                BIGINT NOT NULL,
    power_w             DOUBLE,             -- NVML_FI_DEV_POWER_INSTANT
    power_avg_w         DOUBLE,             -- NVML_FI_DEV_POWER_AVERAGE
    energy_mj           DOUBLE,             -- total energy counter, mJ since driver load
    hbm_used_mib        DOUBLE,
    hbm_total_mib       DOUBLE,
    util_gpu_pct        DOUBLE,
    util_mem_pct        DOUBLE,
    sm_clock_mhz        DOUBLE,
    mem_clock_mhz       DOUBLE,
    temp_c              DOUBLE,
    hbm_temp_c          DOUBLE,
    power_limit_w       DOUBLE,
    clock_event_reasons BIGINT,             -- NVML bitmask
    clock_events        VARCHAR             -- decoded, comma separated (sw_power_cap, hw_thermal_slowdown, ...)
);

CREATE TABLE IF NOT EXISTS energy_windows (
    run_id          VARCHAR NOT NULL,
    source          VARCHAR NOT NULL,
    deployment_id   VARCHAR NOT NULL,
    window_name     VARCHAR NOT NULL,       -- idle_before | idle_after | <load_point_id>
    gpu_uuid        VARCHAR NOT NULL,
    start_ns        BIGINT NOT NULL,
    end_ns          BIGINT NOT NULL,
    energy_start_mj DOUBLE,
    energy_end_mj   DOUBLE,
    energy_j        DOUBLE,                 -- NULL when the counter was unavailable or reset
    counter_reset   BOOLEAN,
    PRIMARY KEY (run_id, deployment_id, window_name, gpu_uuid)
);

CREATE TABLE IF NOT EXISTS server_metrics (
    run_id          VARCHAR NOT NULL,
    source          VARCHAR NOT NULL,
    deployment_id   VARCHAR NOT NULL,
    load_point_id   VARCHAR,                -- NULL for scrapes outside a load point
    t_ns            BIGINT NOT NULL,
    metric          VARCHAR NOT NULL,       -- the sample's name (histograms: <name>_bucket, _sum, _count)
    labels          MAP(VARCHAR, VARCHAR),  -- the sample's labels (le for histogram buckets)
    value           DOUBLE,
    scrape          VARCHAR,                -- window_start | window_end (scraped at a load point's window edge) | NULL
    -- labels as text in one order ('' for none), written by ingest: the unique key server_metrics_key is
    -- (run_id, deployment_id, t_ns, metric, labels_key), plain columns (wattbench/ingest_checks.py LABELS_KEY: the
    -- same expression; version 14 made it a column, an index on the expression crashed DuckDB at checkpoint)
    labels_key      VARCHAR NOT NULL,
    CHECK (labels_key = coalesce(list_sort(map_entries(labels))::VARCHAR, ''))
);

-- Per-load-point figures over its requests, kept rather than recomputed from the raw token arrays at every report:
-- filled at ingest (wattbench/warehouse.refresh_point_stats) from the *_live views of sql/views.sql, whose columns
-- these are (v_request_stats_live, v_itl_stats_live, v_window_steadiness_live, v_client_stats_live as client_*);
-- has_* say which of them had a row. meeting_slo_*: counted against slo_* (the run's SLO then; v_request_stats
-- counts again, live, when the run's SLO changed since). Views v_request_stats, v_itl_stats, v_window_steadiness
-- and v_client_vs_server read it.
CREATE TABLE IF NOT EXISTS point_stats (
    run_id                  VARCHAR NOT NULL,
    source                  VARCHAR NOT NULL,   -- the load point's (load_runs.source)
    deployment_id           VARCHAR NOT NULL,
    load_point_id           VARCHAR NOT NULL,
    has_requests            BOOLEAN NOT NULL,
    requests_in_window      BIGINT,
    ok_in_window            BIGINT,
    completed_in_window     BIGINT,
    errors                  BIGINT,
    ttft_p50_ms DOUBLE, ttft_p90_ms DOUBLE, ttft_p95_ms DOUBLE, ttft_p99_ms DOUBLE, ttft_p999_ms DOUBLE,
    ttft_mean_ms DOUBLE, ttft_stdev_ms DOUBLE,
    tpot_p50_ms DOUBLE, tpot_p90_ms DOUBLE, tpot_p95_ms DOUBLE, tpot_p99_ms DOUBLE, tpot_p999_ms DOUBLE,
    tpot_mean_ms DOUBLE, tpot_stdev_ms DOUBLE,
    e2e_p50_ms DOUBLE, e2e_p90_ms DOUBLE, e2e_p95_ms DOUBLE, e2e_p99_ms DOUBLE, e2e_p999_ms DOUBLE,
    e2e_mean_ms DOUBLE, e2e_stdev_ms DOUBLE,
    tpot_samples            BIGINT,
    longest_context_tokens  BIGINT,             -- prompt + completion tokens of the longest request
    vllm_output_throughput  DOUBLE,
    slo_ttft_ms DOUBLE, slo_tpot_ms DOUBLE, slo_e2e_ms DOUBLE,
    meeting_slo_completed_in_window BIGINT,
    meeting_slo_in_window   BIGINT,
    itl_p50_ms DOUBLE, itl_p90_ms DOUBLE, itl_p95_ms DOUBLE, itl_p99_ms DOUBLE, itl_p999_ms DOUBLE,
    itl_mean_ms DOUBLE, itl_stdev_ms DOUBLE,
    itl_samples             BIGINT,             -- NULL: no inter-token gap (no v_itl_stats row)
    has_steadiness          BOOLEAN NOT NULL,
    first_half_tokens       HUGEINT,
    second_half_tokens      HUGEINT,
    window_drift            DOUBLE,
    has_client              BOOLEAN NOT NULL,
    client_ttft_ms DOUBLE, client_ttft_n BIGINT, client_e2e_ms DOUBLE, client_e2e_n BIGINT,
    client_itl_ms DOUBLE, client_itl_n BIGINT,
    PRIMARY KEY (run_id, deployment_id, load_point_id)
);

-- Per-window figures of the sampled GPU trace, kept rather than joined from every GPU sample at each report (schema 4):
-- filled where point_stats is (wattbench/warehouse.refresh_kept_views, called by refresh_point_stats) from
-- v_window_gpu_live in sql/views.sql, whose columns these are; one row per load window holding at least one sample.
-- v_window_gpu (and so v_load_points) reads it; tests/test_point_stats.py checks they agree.
CREATE TABLE IF NOT EXISTS window_gpu_stats (
    run_id                  VARCHAR NOT NULL,
    source                  VARCHAR NOT NULL,   -- the load point's (load_runs.source)
    deployment_id           VARCHAR NOT NULL,
    load_point_id           VARCHAR NOT NULL,
    trace_mean_w_per_gpu    DOUBLE,
    trace_peak_w_per_gpu    DOUBLE,
    peak_hbm_mib_per_gpu    DOUBLE,
    capped_share            DOUBLE,
    power_capped_share      DOUBLE,
    thermal_capped_share    DOUBLE,
    mean_sm_clock_mhz       DOUBLE,
    samples                 BIGINT,
    mean_mem_clock_mhz      DOUBLE,
    max_temp_c              DOUBLE,
    max_hbm_temp_c          DOUBLE,
    throttled_share         DOUBLE,             -- samples with a clock-lowering reason: power cap, thermal, hw slowdown
    PRIMARY KEY (run_id, deployment_id, load_point_id)
);

-- The tool's own statistics of imported load points that came without per-request rows (v_imported_request_stats_live
-- and v_imported_itl_stats_live in sql/views.sql, whose columns these are), kept where point_stats is (schema 4): a
-- report no longer looks up, at every query, which imported points have requests. v_imported_request_stats and
-- v_imported_itl_stats read them; tests/test_point_stats.py checks they agree.
CREATE TABLE IF NOT EXISTS imported_request_stats (
    run_id VARCHAR NOT NULL, source VARCHAR NOT NULL, deployment_id VARCHAR NOT NULL, load_point_id VARCHAR NOT NULL,
    requests_in_window INTEGER, ok_in_window INTEGER, completed_in_window INTEGER, errors INTEGER,
    ttft_p50_ms DOUBLE, ttft_p90_ms DOUBLE, ttft_p95_ms DOUBLE, ttft_p99_ms DOUBLE, ttft_p999_ms DOUBLE,
    ttft_mean_ms DOUBLE, ttft_stdev_ms DOUBLE,
    tpot_p50_ms DOUBLE, tpot_p90_ms DOUBLE, tpot_p95_ms DOUBLE, tpot_p99_ms DOUBLE, tpot_p999_ms DOUBLE,
    tpot_mean_ms DOUBLE, tpot_stdev_ms DOUBLE,
    e2e_p50_ms DOUBLE, e2e_p90_ms DOUBLE, e2e_p95_ms DOUBLE, e2e_p99_ms DOUBLE, e2e_p999_ms DOUBLE,
    e2e_mean_ms DOUBLE, e2e_stdev_ms DOUBLE,
    meeting_slo_in_window DOUBLE, meeting_slo_completed_in_window DOUBLE, longest_context_tokens INTEGER,
    PRIMARY KEY (run_id, deployment_id, load_point_id)
);

CREATE TABLE IF NOT EXISTS imported_itl_stats (
    run_id VARCHAR NOT NULL, source VARCHAR NOT NULL, deployment_id VARCHAR NOT NULL, load_point_id VARCHAR NOT NULL,
    itl_p50_ms DOUBLE, itl_p90_ms DOUBLE, itl_p95_ms DOUBLE, itl_p99_ms DOUBLE, itl_p999_ms DOUBLE,
    itl_mean_ms DOUBLE, itl_stdev_ms DOUBLE,
    PRIMARY KEY (run_id, deployment_id, load_point_id)
);

-- Every request of each load point tallied (v_request_tallies_live in sql/views.sql, whose columns these are), kept
-- where point_stats is (schema 5): the head-to-head's longest context and failures read a row per load point.
CREATE TABLE IF NOT EXISTS request_tallies (
    run_id VARCHAR NOT NULL, source VARCHAR NOT NULL, deployment_id VARCHAR NOT NULL, load_point_id VARCHAR NOT NULL,
    requests BIGINT, failed BIGINT, short_responses BIGINT, longest_context_tokens BIGINT,
    error_kinds MAP(VARCHAR, BIGINT),
    PRIMARY KEY (run_id, deployment_id, load_point_id)
);

-- Every figure of each load run that ran (v_load_points_core_live in sql/views.sql, whose columns these are, in its
-- order), kept rather than planned from the nested per-point views at every report (schema 5): filled where
-- point_stats is (wattbench/warehouse.refresh_kept_views), and again for a run whenever its own fields change
-- (warehouse.set_run_fields: SLO, prices, start time), since cost, goodput and the SLO verdict read them.
-- v_load_points_core reads it; tests/test_point_stats.py checks they agree.
CREATE TABLE IF NOT EXISTS load_points_core (
    run_id VARCHAR NOT NULL, source VARCHAR, engine VARCHAR, engine_kind VARCHAR, engine_version VARCHAR,
    model VARCHAR, precision VARCHAR, tp INTEGER, gpu_name VARCHAR, n_gpus INTEGER, deployment_id VARCHAR NOT NULL,
    load_point_id VARCHAR NOT NULL, point_label VARCHAR, repeat INTEGER, server_start INTEGER, run_at TIMESTAMP,
    workload VARCHAR,
    shape VARCHAR, concurrency INTEGER, rate DOUBLE, burstiness DOUBLE, input_tokens INTEGER, output_tokens INTEGER,
    warmup_s DOUBLE, window_s DOUBLE, achieved_rate DOUBLE, achieved_concurrency DOUBLE, completed INTEGER,
    failed INTEGER, failed_requests BIGINT, requests_in_window BIGINT, completed_in_window BIGINT,
    output_tok_s DOUBLE, vllm_output_throughput DOUBLE, requests_s DOUBLE, goodput_requests_s DOUBLE,
    goodput_requests_s_per_gpu DOUBLE, slo_attainment DOUBLE,
    ttft_p50_ms DOUBLE, ttft_p90_ms DOUBLE, ttft_p95_ms DOUBLE, ttft_p99_ms DOUBLE, ttft_p999_ms DOUBLE,
    ttft_mean_ms DOUBLE, ttft_stdev_ms DOUBLE,
    tpot_p50_ms DOUBLE, tpot_p90_ms DOUBLE, tpot_p95_ms DOUBLE, tpot_p99_ms DOUBLE, tpot_p999_ms DOUBLE,
    tpot_mean_ms DOUBLE, tpot_stdev_ms DOUBLE,
    itl_p50_ms DOUBLE, itl_p90_ms DOUBLE, itl_p95_ms DOUBLE, itl_p99_ms DOUBLE, itl_p999_ms DOUBLE,
    itl_mean_ms DOUBLE, itl_stdev_ms DOUBLE,
    e2e_p50_ms DOUBLE, e2e_p90_ms DOUBLE, e2e_p95_ms DOUBLE, e2e_p99_ms DOUBLE, e2e_p999_ms DOUBLE,
    e2e_mean_ms DOUBLE, e2e_stdev_ms DOUBLE,
    latency_samples BIGINT, tpot_samples BIGINT, itl_samples BIGINT, energy_j DOUBLE, energy_trace_j DOUBLE,
    energy_trace_gap DOUBLE, j_per_output_token DOUBLE, output_tokens_per_j DOUBLE, mean_power_w DOUBLE,
    counter_w_per_gpu DOUBLE, idle_power_w DOUBLE, above_idle_power_w DOUBLE, j_per_output_token_above_idle DOUBLE,
    output_tokens_per_j_above_idle DOUBLE, usd_per_1m_output_tokens DOUBLE, energy_usd_per_1m_output_tokens DOUBLE,
    meets_slo_p99 BOOLEAN, slo_ttft_ms DOUBLE, slo_tpot_ms DOUBLE, slo_e2e_ms DOUBLE, longest_context_tokens BIGINT,
    j_per_request DOUBLE, j_per_request_above_idle DOUBLE, energy_note VARCHAR,
    PRIMARY KEY (run_id, load_point_id)
);

-- Every figure of every point of a run over its repeats, with its 95% interval (v_point_figures_live in sql/views.sql,
-- whose columns these are, in its order), kept with load_points_core from which it is made (schema 5).
-- v_point_figures reads it; tests/test_point_stats.py checks they agree.
CREATE TABLE IF NOT EXISTS point_figures (
    run_id VARCHAR NOT NULL, source VARCHAR, engine VARCHAR, engine_kind VARCHAR, engine_version VARCHAR,
    model VARCHAR, precision VARCHAR, tp INTEGER, gpu_name VARCHAR, n_gpus INTEGER, deployment_id VARCHAR NOT NULL,
    workload VARCHAR NOT NULL, point_label VARCHAR NOT NULL, shape VARCHAR, concurrency INTEGER, rate DOUBLE,
    burstiness DOUBLE, input_tokens INTEGER, output_tokens INTEGER, run_at TIMESTAMP, repeats BIGINT,
    min_window_s DOUBLE, metric VARCHAR NOT NULL, label VARCHAR, unit VARCHAR, better VARCHAR, ord INTEGER,
    estimate DOUBLE, lo DOUBLE, hi DOUBLE, stdev DOUBLE, n BIGINT, per_repeat DOUBLE[], method VARCHAR,
    rel_half_width DOUBLE, starts BIGINT, interval_scope VARCHAR, between_start_sd DOUBLE, within_start_sd DOUBLE,
    PRIMARY KEY (run_id, deployment_id, workload, point_label, metric)
);

-- The SLO capacity of each search with the figures measured at it over its repeats (v_slo_capacity_live in
-- sql/views.sql, whose columns these are, in its order): kept with point_figures, from which it reads, and refreshed
-- with it (wattbench/warehouse.refresh_kept_views, set_run_fields: its cost reads the run's prices); the asset
-- slo_capacity (assets/reports.py) makes it again for its benchmark. The capacity plan sizes fleets from it.
CREATE TABLE IF NOT EXISTS slo_capacity (
    run_id VARCHAR NOT NULL, source VARCHAR, engine VARCHAR, engine_kind VARCHAR, model VARCHAR, precision VARCHAR,
    tp INTEGER, gpu_name VARCHAR, n_gpus INTEGER, deployment_id VARCHAR NOT NULL, search_id VARCHAR NOT NULL,
    workload VARCHAR, over VARCHAR, unit VARCHAR, shape VARCHAR, input_tokens INTEGER, output_tokens INTEGER,
    slo_ttft_ms DOUBLE, slo_tpot_ms DOUBLE, slo_e2e_ms DOUBLE, attainment DOUBLE, status VARCHAR, capacity DOUBLE,
    capacity_lo DOUBLE, capacity_hi DOUBLE, capacity_per_gpu DOUBLE, at_point_label VARCHAR, repeats_at_capacity INTEGER,
    binding VARCHAR, binding_share DOUBLE, binding_load DOUBLE,
    output_tok_s DOUBLE, output_tok_s_lo DOUBLE, output_tok_s_hi DOUBLE,
    goodput_requests_s DOUBLE, goodput_requests_s_lo DOUBLE, goodput_requests_s_hi DOUBLE,
    output_tokens_per_j DOUBLE, output_tokens_per_j_lo DOUBLE, output_tokens_per_j_hi DOUBLE,
    j_per_request DOUBLE, j_per_request_lo DOUBLE, j_per_request_hi DOUBLE,
    j_per_request_above_idle DOUBLE, j_per_request_above_idle_lo DOUBLE, j_per_request_above_idle_hi DOUBLE,
    usd_per_1m_output_tokens DOUBLE, usd_per_1m_output_tokens_lo DOUBLE, usd_per_1m_output_tokens_hi DOUBLE,
    mean_power_w DOUBLE, mean_power_w_lo DOUBLE, mean_power_w_hi DOUBLE,
    ttft_p99_ms DOUBLE, tpot_p99_ms DOUBLE, e2e_p99_ms DOUBLE,
    probes INTEGER, window_s DOUBLE, time_s DOUBLE, stopped_by VARCHAR, answer VARCHAR, server_start INTEGER,
    interval_scope VARCHAR, note VARCHAR,
    PRIMARY KEY (run_id, search_id)
);

CREATE TABLE IF NOT EXISTS validation_results (
    run_id          VARCHAR NOT NULL,
    check_name      VARCHAR NOT NULL,
    table_name      VARCHAR NOT NULL,
    expectation     VARCHAR NOT NULL,
    column_name     VARCHAR,
    severity        VARCHAR NOT NULL,       -- error | warn
    success         BOOLEAN NOT NULL,
    element_count   BIGINT,
    unexpected_count BIGINT,
    sample          JSON,
    checked_at      TIMESTAMP DEFAULT current_timestamp
);

-- Which Dagster runs worked on which benchmark (docs/ARCHITECTURE.md, "Runs and definitions"). A benchmark's id
-- (runs.run_id) is the id of the Dagster run that opened it; a re-execution of that run continues it, and a report
-- or check materialized alone works on its partition's latest complete benchmark: each such Dagster run is a row.
CREATE TABLE IF NOT EXISTS dagster_runs (
    dagster_run_id  VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL,       -- the benchmark (runs.run_id)
    role            VARCHAR NOT NULL,       -- opened | resumed (its steps set the status) | reported (read only)
    job_name        VARCHAR,
    partition_key   VARCHAR,
    recorded_at     TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (dagster_run_id, run_id)
);

-- The latest outcome of each blocking check on a benchmark: all passed (or warned) -> 'complete', one failed at
-- error level -> 'blocked' (assets/benchmark_run.py).
CREATE TABLE IF NOT EXISTS run_checks (
    run_id          VARCHAR NOT NULL,
    check_name      VARCHAR NOT NULL,
    passed          BOOLEAN NOT NULL,
    severity        VARCHAR,                -- ERROR | WARN when it did not pass
    dagster_run_id  VARCHAR,
    checked_at      TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (run_id, check_name)
);

-- One row per failed Dagster run, written by the run-failure sensor `record_failed_runs` (pipelines/sensors.py).
CREATE TABLE IF NOT EXISTS failed_runs (
    run_id          VARCHAR PRIMARY KEY,
    source          VARCHAR,                -- emulated | measured, from the run's row in runs; NULL if it had none
    job_name        VARCHAR NOT NULL,
    partition_key   VARCHAR,                -- model|scenario of a partitioned run
    failed_at       TIMESTAMP NOT NULL,     -- UTC
    error           VARCHAR                 -- the run's failure message and each failed step's error
);

-- Migrations: columns added since schema version 1 (idempotent; warehouse.apply_schema also converts
-- server_metrics.labels from its version-1 text form to a MAP).
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS engine_version_source VARCHAR;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS version_checked BOOLEAN;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS point_label VARCHAR;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS repeat INTEGER;
ALTER TABLE server_metrics ADD COLUMN IF NOT EXISTS scrape VARCHAR;
-- version 3: the benchmark's partition (model|scenario) on its row; statuses 'complete' and 'blocked' ('succeeded',
-- which meant "its reports were made", is now 'complete': its six blocking checks passed)
ALTER TABLE runs ADD COLUMN IF NOT EXISTS partition_key VARCHAR;
UPDATE runs SET status = 'complete' WHERE status = 'succeeded';
-- version 3 also: requests.chunks_exact (a long stream's coalesced tail), table point_stats (created above; filled for
-- every run by warehouse.apply_schema)
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunks_exact INTEGER;
-- version 6: requests.chunk_tokens_each (ingest stores a stream of equal token counts as this one number instead of a
-- list of them: 128 M ones were a third of storing a million requests' token times); rows stored before keep their lists
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_tokens_each INTEGER;
-- version 7: the step decomposition and the host's CPU use per load window (load_runs), the host's and the GPUs'
-- identity and the model's weights hash (deployments), GPU clocks, temperatures and throttling per window
-- (window_gpu_stats, refilled for every run by warehouse.apply_schema); docs/MEASUREMENT.md
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS step_gaps BIGINT;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS decode_step_ms DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS stalled_gap_fraction DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS stall_ms_mean DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS expected_stalled_fraction DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS phase_state VARCHAR;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS host_load_1m DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS host_busy_cpus DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS host_steal_share DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS engine_cpu_s DOUBLE;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS gpu_serials VARCHAR[];
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS gpu_pci_bus_ids VARCHAR[];
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS host VARCHAR;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS cpu_model VARCHAR;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS cpu_logical INTEGER;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS cpu_usable DOUBLE;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS cpu_mhz DOUBLE;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS cpu_max_mhz DOUBLE;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS hypervisor VARCHAR;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS kernel VARCHAR;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS model_weights_hash VARCHAR;
ALTER TABLE window_gpu_stats ADD COLUMN IF NOT EXISTS mean_mem_clock_mhz DOUBLE;
ALTER TABLE window_gpu_stats ADD COLUMN IF NOT EXISTS max_temp_c DOUBLE;
ALTER TABLE window_gpu_stats ADD COLUMN IF NOT EXISTS max_hbm_temp_c DOUBLE;
ALTER TABLE window_gpu_stats ADD COLUMN IF NOT EXISTS throttled_share DOUBLE;
-- version 8: the wait for quiet GPUs before each idle window, and whether they went quiet
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS idle_settle_s_before DOUBLE;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS idle_settled_before BOOLEAN;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS idle_settle_s_after DOUBLE;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS idle_settled_after BOOLEAN;
-- version 8: a latency percentile's interval comes from its repeats, as every other figure's (sql/views.sql
-- v_point_figures_live); the request bootstrap table of earlier versions goes
DROP TABLE IF EXISTS latency_intervals;
-- version 9: SLO capacity searches (load_runs' probe columns, table searches from the bundle, the kept slo_capacity) and
-- energy per request (load_points_core, refilled for every run by warehouse.apply_schema); docs/MEASUREMENT.md
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS search_id VARCHAR;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS probe INTEGER;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS probe_phase VARCHAR;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS probe_verdict VARCHAR;
ALTER TABLE load_points_core ADD COLUMN IF NOT EXISTS j_per_request DOUBLE;
ALTER TABLE load_points_core ADD COLUMN IF NOT EXISTS j_per_request_above_idle DOUBLE;
ALTER TABLE load_points_core ADD COLUMN IF NOT EXISTS energy_note VARCHAR;
-- version 10: per-token times kept in the token store beside the warehouse, not as lists (resources/token_store.py)
ALTER TABLE requests ADD COLUMN IF NOT EXISTS events_file VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS events_at BIGINT;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS events_n INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS counts_file VARCHAR;
-- version 11: the load shape's traits (closed_loop, bursty), written at ingest from the shape registry and filled for
-- every run by warehouse.apply_schema (wattbench/warehouse.fill_shape_traits)
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS closed_loop BOOLEAN;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS bursty BOOLEAN;
-- version 12: server starts (wattbench/plan.py server_starts): which start of the engine ran each load run and search,
-- how many starts a deployment had; runs before it had one (NULL reads as 1)
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS server_starts INTEGER;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS server_start INTEGER;
ALTER TABLE searches ADD COLUMN IF NOT EXISTS server_start INTEGER;
ALTER TABLE load_points_core ADD COLUMN IF NOT EXISTS server_start INTEGER;
ALTER TABLE point_figures ADD COLUMN IF NOT EXISTS starts BIGINT;
ALTER TABLE slo_capacity ADD COLUMN IF NOT EXISTS server_start INTEGER;
ALTER TABLE slo_capacity ADD COLUMN IF NOT EXISTS interval_scope VARCHAR;
ALTER TABLE point_figures ADD COLUMN IF NOT EXISTS interval_scope VARCHAR;
ALTER TABLE point_figures ADD COLUMN IF NOT EXISTS between_start_sd DOUBLE;
ALTER TABLE point_figures ADD COLUMN IF NOT EXISTS within_start_sd DOUBLE;
-- version 13: the step decomposition reads prefills from the first tokens' clusters and tells delivery stalls from GPU
-- stalls (stalled_gap_fraction and stall_ms_mean: GPU stalls only; phase_state from prefills_per_step); rows of older
-- versions are made again from their requests' token times by wattbench/schema.apply_schema (wattbench/step_fill.py)
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS gpu_stalls BIGINT;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS delivery_stalls BIGINT;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS delivery_stalled_fraction DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS delivery_stall_ms_mean DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS prefills BIGINT;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS prefill_steps BIGINT;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS prefills_per_step DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS prefills_per_step_se DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS shared_prefill_fraction DOUBLE;
ALTER TABLE load_runs ADD COLUMN IF NOT EXISTS phase_note VARCHAR;
-- version 14: server_metrics.labels_key (its NOT NULL and CHECK need the table made again: wattbench/schema.py
-- rebuilds server_metrics of an older warehouse, filling the column, and the unique key is made on it)
-- version 14 also: what sql/views.sql (with this file) was when the views were last made, so that a writer's connection
-- makes them again only when it changed and opening the warehouse writes nothing otherwise (wattbench/schema.py)
CREATE TABLE IF NOT EXISTS views_made (sha256 VARCHAR NOT NULL);
