"""A run's own fields (its SLO, prices, start time) are read by the kept per-load-run figures (load_points_core):
every way they are set goes through wattbench/warehouse.set_run_fields, which refreshes what reads them, so the kept
rows equal their definition (v_load_points_core_live) after each. Real parts: a synthetic bundle ingested by the
CLI, `wattbench predict` filing a run, a benchmark opened as Dagster's engine_builds opens it."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from assets.benchmark_run import open_benchmark
from benchmarks.synthetic import synthesize
from pipelines.cli import main
from tests.test_point_stats import rows, same
from tests.test_predict import PLAN
from wattbench.warehouse import RUN_FIELD_TABLES, WarehouseError, connect, set_run_fields

ROOT = Path(__file__).resolve().parents[1]
# The columns of runs that v_load_points_core_live reads (run_at, cost, goodput, the SLO verdict)
RUN_FIELDS = (
    "started_at",
    "clock_anchor_unix_ns",
    "gpu_price_per_hour",
    "energy_price_per_kwh",
    "pue",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "slo_e2e_ms",
)


def kept_equals_live(con, run_id: str) -> int:
    """The run's kept rows that read its own fields (warehouse.RUN_FIELD_TABLES) equal their definitions; returns
    the run's load runs."""
    where = f"WHERE run_id = '{run_id}'"
    for table in RUN_FIELD_TABLES:
        live = rows(con, f"SELECT * FROM v_{table}_live {where}")
        kept = rows(con, f"SELECT * FROM v_{table} {where}")
        assert live and set(live) == set(kept), table
        for key, row in live.items():
            for col, value in row.items():
                assert same(value, kept[key][col], col), (table, key, col, value, kept[key][col])
    return con.execute(f"SELECT count(*) FROM v_load_points_core {where}").fetchone()[0]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rf") / "syn"
    synthesize(folder, "syn", 6_000, requests_per_point=1_000)
    return folder


@pytest.fixture
def plan(tmp_path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    return path


def test_ingest_with_a_plan_keeps_the_plans_cost_and_slo(bundle, plan, tmp_path):
    db = tmp_path / "w.duckdb"
    assert main(["ingest", str(bundle), "--db", str(db)]) == 0
    with connect(db, read_only=True) as con:
        kept_equals_live(con, "syn")
        assert con.execute("SELECT count(usd_per_1m_output_tokens) FROM v_load_points_core").fetchone()[0] == 0
    assert main(["ingest", str(bundle), "--db", str(db), "--plan", str(plan)]) == 0
    with connect(db, read_only=True) as con:
        n = kept_equals_live(con, "syn")
        slo, priced = con.execute(
            "SELECT count(*) FILTER (WHERE slo_ttft_ms = 2000 AND slo_tpot_ms = 100), count(usd_per_1m_output_tokens) "
            "FROM v_load_points_core WHERE run_id = 'syn'"
        ).fetchone()
    assert slo == priced == n > 0


def test_set_run_fields_refreshes_cost_and_goodput(bundle, tmp_path):
    db = tmp_path / "w.duckdb"
    assert main(["ingest", str(bundle), "--db", str(db)]) == 0
    with connect(db) as con:
        set_run_fields(con, "syn", {"gpu_price_per_hour": 2.0, "slo_ttft_ms": 100_000.0})
        kept_equals_live(con, "syn")
        loose, usd = con.execute(
            "SELECT sum(goodput_requests_s), sum(usd_per_1m_output_tokens) FROM v_load_points_core"
        ).fetchone()
        set_run_fields(con, "syn", {"gpu_price_per_hour": 4.0, "slo_ttft_ms": 1.0})
        kept_equals_live(con, "syn")
        tight, usd2 = con.execute(
            "SELECT sum(goodput_requests_s), sum(usd_per_1m_output_tokens) FROM v_load_points_core"
        ).fetchone()
        assert tight < loose and usd2 == pytest.approx(2 * usd)
        with pytest.raises(WarehouseError, match="unknown column"):
            set_run_fields(con, "syn", {"slo_ttft": 1.0})
        assert con.execute("SELECT slo_ttft_ms FROM runs WHERE run_id = 'syn'").fetchone()[0] == 1.0


def test_predict_files_a_run_whose_kept_figures_carry_its_plan(plan, tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    assert main(["predict", "--plan", str(plan), "--db", str(db), "--run-id", "pred-rf"]) == 0
    with connect(db, read_only=True) as con:
        kept_equals_live(con, "pred-rf")
        started = con.execute("SELECT started_at FROM runs WHERE run_id = 'pred-rf'").fetchone()[0]
        kept = con.execute(
            "SELECT DISTINCT run_at, slo_ttft_ms, usd_per_1m_output_tokens IS NOT NULL FROM v_load_points_core "
            "WHERE run_id = 'pred-rf'"
        ).fetchall()
    assert kept == [(started, 2000.0, True)]


def test_opening_a_benchmark_again_refreshes_its_kept_figures(bundle, tmp_path):
    """A benchmark (re)opened over rows already in: its prices and SLO reach the kept figures."""
    db = tmp_path / "w.duckdb"
    assert main(["ingest", str(bundle), "--db", str(db)]) == 0
    context = SimpleNamespace(run_id="syn", has_partition_key=False)
    with connect(db) as con:
        fields = {"source": "emulated", "gpu_price_per_hour": 3.0, "slo_e2e_ms": 1e9}
        assert open_benchmark(con, context, fields, partition=None) == "syn"
        kept_equals_live(con, "syn")
        assert con.execute("SELECT status FROM runs WHERE run_id = 'syn'").fetchone()[0] == "running"
        assert con.execute("SELECT count(*) FROM v_load_points_core WHERE slo_e2e_ms = 1e9").fetchone()[0] > 0


def test_no_code_sets_a_runs_kept_field_but_set_run_fields():
    """Every UPDATE of runs outside set_run_fields' own module names only fields no kept figure reads (status,
    finished time), spelled out: a field list built at run time, or one of RUN_FIELDS, goes through set_run_fields."""
    offenders = []
    for path in [*ROOT.glob("*/**/*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith((".venv/", "tests/", "agent/")):
            continue
        text = path.read_text()
        if "\ndef set_run_fields(" in text:
            continue
        for m in re.finditer(r"UPDATE\s+runs\s+SET\s+(.{0,200}?)\bWHERE\b", text, re.S):
            sets = m.group(1)
            if "{" in sets.split("=")[0] or any(f in sets for f in RUN_FIELDS):  # a column list built at run time
                offenders.append(f"{rel}: {sets.strip()[:80]}")
        if re.search(r"replace_rows\(\s*con,\s*[\"']runs[\"']", text):
            offenders.append(f"{rel}: replace_rows on runs")
    assert not offenders, offenders
