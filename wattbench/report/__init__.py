"""Report rendering without Dagster: the report registry (specs.py), report rows without pandas for the CLI
(rows.py), tables and the offline HTML page (render.py), matplotlib pictures (pictures.py), Vega-Lite charts
(charts.py)."""
