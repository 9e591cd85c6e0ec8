"""Benchmarks: commands that measure and write JSON plus a table. Not tests."""
