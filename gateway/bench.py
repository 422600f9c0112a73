"""Benchmarks (placeholder until written)."""

from __future__ import annotations

import argparse


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_bench(args: argparse.Namespace) -> int:
    return 0
