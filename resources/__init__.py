"""The Dagster resources of the code location, all of them and nothing else (pipelines/definitions.py
make_resources wires them): bench_plan.BenchPlan, engine_builder.LocalEngineBuilder, k8s.K8sAgentLauncher and
K8sBuildLauncher, hub_watch.HubWatch; the warehouse is dagster_duckdb's DuckDBResource."""
