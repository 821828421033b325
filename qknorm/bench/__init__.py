"""Benchmarking tools (not needed to train or sweep): steps (interleaved CPU/GPU step timings,
scripts/bench.py), overhead (what a job pays before its first step, in fresh processes) and
probe (the phases inside one), gpu (many jobs on one GPU, scripts/bench_gpu.py), report (a
report's numbers beside a bench's). Each is a module of its own; importing the package loads
none of them."""

__all__ = ["gpu", "overhead", "probe", "report", "steps"]
