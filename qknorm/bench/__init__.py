"""Benchmarking tools (not needed to train or sweep): steps (interleaved CPU/GPU step timings,
scripts/bench.py), gpu (many jobs on one GPU, scripts/bench_gpu.py), probe (start-up overhead)."""
