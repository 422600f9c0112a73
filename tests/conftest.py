"""Loaded before any test module: the compute path is chosen before anything imports MLX.

On Linux, OpenBLAS must be loaded before MLX binds its BLAS symbols; a test module that
imports MLX at collection would otherwise decide, for the whole test process, that the
reference BLAS path (and 4-bit weights) is in use.
"""

from gateway.engines.device import choose_compute_path

choose_compute_path()
