"""wattbench's own domain code, free of Dagster: the plan, the warehouse (connection, schema, ingest, token store),
the validation rules, the importers, report rendering, the settings and the twin's calibration. The Dagster code
location (assets/, resources/, pipelines/) imports it; it imports none of them (tests/test_import_graph.py)."""
