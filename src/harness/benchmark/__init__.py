"""Benchmarks: YuniKorn's benchmark shape and a large mixed workload, korral vs the reference."""
