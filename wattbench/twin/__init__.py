"""The digital twin's calibration on real hardware: the emulator's step composition (decode steps, prefill-carrying
steps and their host launch time, the API server, power) fitted on every committed real-hardware bundle, its measured
spread, and its errors on points each fit never saw (by workload and by board).

    python -m wattbench.twin            # refit, validate held out, write the package data and the reports

It writes the emulator's calibration as package data (agent/wattbench_agent/emulator/calibration.json), which the
emulator, `wattbench emulate` and `wattbench predict` read, and its report under results/twin/ (docs/EMULATOR.md).
predict.py is the twin's prediction for a plan never measured, which `wattbench predict` files.
"""
