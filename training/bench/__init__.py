"""Benchmarks of the training recipe (plain Python, CPU-runnable on the tiny model); the third
benchmark home beside agent/bench and annotation/bench, since they drive training.sft and
training.grpo, which agent/ may not import."""
