"""Fake `sglang` package for tests: only `python -m sglang.launch_server` (tests/fake_engines/_fake.py)."""
