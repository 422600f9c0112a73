"""Stored float16 / bfloat16 expert rows → float32, exactly, into a caller's buffer.

On a CPU the bank holds float32 (the CPU ``gather_mm`` takes float32 only) while released
models store float16 or bfloat16, so every miss converts. numpy's and MLX's casts convert
one element at a time (~2 and ~1.2 ns per element measured here); integer operations over
cache-sized chunks take ~0.4 ns and write straight into the bank's slot.
"""

from __future__ import annotations

import numpy as np

# Elements per pass: a chunk's passes stay in the CPU's cache (16K was slower here).
CHUNK = 64 * 1024

# A float16 is inf or nan when its exponent bits are all ones: shifted left by one (the
# sign bit dropped), at least this.
_NON_FINITE_SHIFTED = 0x7C00 << 1


def f16_all_finite(bits: np.ndarray) -> bool:
    """Whether no float16 in ``bits`` (uint16) is inf or nan."""
    return bool(np.left_shift(bits, 1).max(initial=0) < _NON_FINITE_SHIFTED)


def f16_to_f32(bits: np.ndarray, out: np.ndarray | None = None, finite: bool = False) -> np.ndarray:
    """float16 bit patterns (uint16, 1-D) → float32 in ``out`` (1-D, same size), exactly.

    The half's bits moved to the top of a 32-bit word, shifted right by three with the sign
    repeated and the repeats masked off, are a float32 with the half's sign, exponent and
    mantissa in place but its exponent biased by 15 instead of 127: times 2**112 is the
    exact value (subnormals included). Inf and nan would not survive that, so unless the
    caller knows the rows are ``finite`` they are checked first (a fifth of the cost), and
    rows that have any go through numpy's cast.
    """
    if out is None:
        out = np.empty(bits.size, dtype=np.float32)
    if not finite and not f16_all_finite(bits):
        np.copyto(out, bits.view(np.float16), casting="unsafe")
        return out
    words = out.view(np.uint32)
    for start in range(0, bits.size, CHUNK):
        part = words[start : start + CHUNK]
        np.copyto(part, bits[start : start + CHUNK])
        np.left_shift(part, 16, out=part)
        signed = part.view(np.int32)
        np.right_shift(signed, 3, out=signed)
        np.bitwise_and(part, 0x8FFFFFFF, out=part)
        values = part.view(np.float32)
        np.multiply(values, np.float32(2.0**112), out=values)
    return out


def bf16_to_f32(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """bfloat16 bit patterns (uint16, 1-D) → float32 in ``out``: the top half of the word."""
    if out is None:
        out = np.empty(bits.size, dtype=np.float32)
    words = out.view(np.uint32)
    for start in range(0, bits.size, CHUNK):
        part = words[start : start + CHUNK]
        np.copyto(part, bits[start : start + CHUNK])
        np.left_shift(part, 16, out=part)
    return out
