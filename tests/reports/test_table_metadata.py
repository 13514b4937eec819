"""Dagster table metadata on every table asset: engine_builds and the stage assets materialized for real (the bench
step replays a result bundle instead of running the agent), each carrying `dagster/table_name` and a
`dagster/column_schema` that matches the DuckDB table and the comments of sql/schema.sql."""

import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.bench import STAGE_TABLES, bench
from assets.builds import engine_builds
from assets.table_meta import describe, schema_comments
from pipelines.definitions import make_resources
from pipelines.partitions import bench_partition, ensure_models
from wattbench.warehouse import connect

from .synth import Deployment, simple_point, write_run

SMOKE_PLAN = Path(__file__).parents[1] / "data" / "smoke_plan.yaml"


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tablemeta")
    write_run(tmp / "scratch.duckdb", tmp, "bundle-run", [Deployment("vllm-like", points=[simple_point("c4", 5.0)])])
    plan = tmp / "plan" / "default.yaml"
    plan.parent.mkdir()
    shutil.copy(SMOKE_PLAN, plan)
    db = tmp / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    ensure_models(instance, ["llama-3.1-8b"])
    result = dg.materialize(
        [engine_builds, bench],
        instance=instance,
        resources=make_resources(
            db_path=str(db),
            plan_path=str(plan),
            output_dir=str(tmp / "runs"),
            replay_bundle=str(tmp / "bundle-bundle-run"),
        ),
        partition_key=bench_partition("llama-3.1-8b", "default"),
    )
    assert result.success
    return {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }, db


def test_every_table_asset_names_its_table_and_columns(materialized):
    metas, db = materialized
    assert set(metas) == {"engine_builds", *STAGE_TABLES}
    with connect(db, read_only=True) as con:
        for table, meta in metas.items():
            assert meta["dagster/table_name"].value == f"w.main.{table}"
            schema = meta["dagster/column_schema"].schema
            actual = con.execute(
                "SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
                "WHERE table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
            assert [(c.name, c.type, c.constraints.nullable) for c in schema.columns] == [
                (n, t, bool(null)) for n, t, null in actual
            ], table
            keyed = con.execute(
                "SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = ? "
                "AND constraint_type = 'PRIMARY KEY'",
                [table],
            ).fetchall()
            if keyed:  # engine_builds, deployments, load_runs, requests; samples and scrapes have no key
                assert schema.constraints.other == [f"PRIMARY KEY ({', '.join(keyed[0][0])})"], table
            else:
                assert schema.constraints is None or not schema.constraints.other, table
            described = {c.name: c.description for c in schema.columns}
            for column, comment in schema_comments()[table].items():  # every comment of sql/schema.sql arrives
                assert comment in described[column], (table, column)


def test_columns_without_a_comment_still_say_their_unit():
    assert describe("requests", "ttft_ms") == "unit: ms"
    assert describe("load_runs", "window_s") == "unit: s"
    assert describe("load_runs", "energy_j").startswith("energy counter delta over the window")
    assert describe("gpu_samples", "energy_mj") == "total energy counter, mJ since driver load"
    assert describe("load_runs", "run_id").startswith("the Dagster run")
    assert "emulated" in describe("requests", "source")
    assert schema_comments()["load_runs"]["repeat"].startswith("1-based")
