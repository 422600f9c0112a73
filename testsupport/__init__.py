"""What both the tests and the benchmarks need, and the gateway itself never does: the real
gateway started as a child process (``process``), prompts no cache has seen (``prompts``),
and small random-weight models of real architectures with their GGUF files (``synthetic``,
``synthetic_gguf``).

It lives at the top level beside ``tests/`` and ``bench/`` so that neither imports the other,
and, like them, ships with the source checkout, not in the wheel (``pyproject.toml`` packages
only ``gateway*``).
"""
