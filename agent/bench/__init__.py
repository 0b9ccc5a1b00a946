"""The house of the agent-side benchmarks (plain Python, no Django).

Benchmarks import the library they measure; the library never imports them (checked by
tests/architecture/test_layers.py). Run them with ``python -m agent.bench <benchmark>`` (see
``agent.bench.cli``) and the real-data table with ``python -m agent.bench.real``.
"""
