"""Shared helpers for the test suite and the benchmarks."""
