"""wattbench benchmarks: `python -m benchmarks` runs every benchmarks/*.py module that has a main()."""
