"""Measuring the payload on a GPU: what to run, how to judge it, and the report.

Runs nothing inside SGLang itself: `in_target/engine_runner.py` does that in the env's own
interpreter, and this package plans its work and reads its records.
"""
