"""The house of the site-side benchmarks and the load test (Django).

The management commands ``bench_candidates``, ``bench_catalog`` and ``loadtest`` are thin entry
points to the modules here. Benchmarks import the site they measure; the site never imports
them (checked by tests/architecture/test_layers.py).
"""
