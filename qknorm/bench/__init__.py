"""Benchmarking tools (not needed to train or sweep): steps (interleaved CPU/GPU step timings,
scripts/bench.py), overhead (what a job pays before its first step, in fresh processes) and
probe (the phases inside one), gpu (many jobs on one GPU, scripts/bench_gpu.py)."""
