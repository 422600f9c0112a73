"""ggml's quantized blocks as MLX affine quantization: moved bit for bit where the math allows.

MLX's affine quantization stores, per group of 32 values, unsigned integers q of 4, 5 or 8
bits and a scale and bias: ``w = scale * q + bias``. ggml's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K
and Q5_K are the same thing in other clothes (one scale and one offset per 32 values), so their
integers move over unchanged, with float32 scales and biases computed exactly from the f16
fields (MODELS.md section 2: float16 scales cost quality). The layouts mirror gguf-py's
dequantizers in ``gguf/quants.py``; MLX packs a row's integers bit-contiguously, little-endian.

Q6_K cannot in general: each 32-group holds two 16-value halves with their own int8 scales
a and b, ``w = d * a * (q - 32)`` and ``d * b * (q - 32)``. A group is still exact in MLX
8-bit when both halves fit one integer grid (``d * gcd(a, b)`` as the step, at most 256 levels
wide: a == b, or one scale a small multiple of the other); other groups are re-quantized to
8 bits from gguf-py's values, and the import record states the largest error. Q2_K and Q3_K
(16-value sub-blocks too) are re-quantized to 4 bits the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUP_SIZE = 32

# ggml type -> the MLX width it becomes (the catalog's memory estimate uses the same table).
_BITS = {
    "Q4_0": 4,
    "Q4_1": 4,
    "Q4_K": 4,
    "Q5_0": 5,
    "Q5_1": 5,
    "Q5_K": 5,
    "Q8_0": 8,
    "Q6_K": 8,
    "Q2_K": 4,
    "Q3_K": 4,
}
FLOAT_TYPES = frozenset({"F32", "F16", "BF16", "F64"})
IMPORTABLE_TYPES = frozenset(_BITS) | FLOAT_TYPES


def mlx_bits(ggml_type: str) -> int:
    """The MLX affine width a quantized ggml type is imported at."""
    return _BITS[ggml_type]


@dataclass
class Affine:
    """One tensor in MLX's affine layout (leading dimensions as in the GGUF)."""

    weight: np.ndarray  # uint32, (..., columns * bits / 32)
    scales: np.ndarray  # float32, (..., columns / 32)
    biases: np.ndarray  # float32
    bits: int
    exact: bool  # the integers moved over unchanged (no rounding beyond float32's)
    # Re-quantized tensors: the share of groups that were still exact, and the largest
    # |difference| from gguf-py's dequantization.
    exact_groups: float = 1.0
    max_abs_error: float = 0.0


def pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned integers (rows, n) of ``bits`` each into uint32 words, as MLX does."""
    rows, n = q.shape
    if bits == 8:
        return np.ascontiguousarray(q.astype(np.uint8)).view(np.uint32)
    if bits == 4:
        q8 = q.astype(np.uint8).reshape(rows, n // 2, 2)
        return np.ascontiguousarray(q8[..., 0] | (q8[..., 1] << 4)).view(np.uint32)
    expanded = (q[..., None].astype(np.uint32) >> np.arange(bits, dtype=np.uint32)) & 1
    packed = np.packbits(
        expanded.reshape(rows, n * bits).astype(np.uint8), axis=-1, bitorder="little"
    )
    return packed.view(np.uint32)


def _f16(raw: np.ndarray) -> np.ndarray:
    """Little-endian f16 fields (…, 2 bytes) as float32 (…, 1)."""
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """ggml's 32-value nibble layout: 16 bytes, low nibbles first, then high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _q4_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = _f16(blocks[..., 0:2])
    return _nibbles(blocks[..., 2:18]), d, -8.0 * d  # w = d * (q - 8)


def _q4_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _nibbles(blocks[..., 4:20]), _f16(blocks[..., 0:2]), _f16(blocks[..., 2:4])


def _five_bit(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1 values: nibbles plus one high bit each from a 32-bit word."""
    high = np.unpackbits(np.ascontiguousarray(qh), axis=-1, bitorder="little")
    return _nibbles(qs) | (high << 4)


def _q5_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = _f16(blocks[..., 0:2])
    return _five_bit(blocks[..., 2:6], blocks[..., 6:22]), d, -16.0 * d  # w = d * (q - 16)


def _q5_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q = _five_bit(blocks[..., 4:8], blocks[..., 8:24])
    return q, _f16(blocks[..., 0:2]), _f16(blocks[..., 2:4])


def _q8_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = _f16(blocks[..., 0:2])
    q = (blocks[..., 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return q, d, -128.0 * d  # w = d * q_signed = d * (q + 128) - 128 d


def _k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4)."""
    s = scales.astype(np.uint8)
    d, m, md = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _k_affine(blocks: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: w = d * sc * q - dmin * m per 32-group of a 256-value super-block."""
    d, dmin = _f16(blocks[..., 0:2]), _f16(blocks[..., 2:4])
    sc, mn = _k_scale_min(blocks[..., 4:16])
    lead = blocks.shape[:-1]
    return q.reshape(*lead, 256), (d * sc).reshape(*lead, 8), -(dmin * mn).reshape(*lead, 8)


def _q4_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    qs = blocks[..., 16:144].reshape(*blocks.shape[:-1], 4, 1, 32)
    # Four 64-value chunks of 32 bytes: low nibbles are a chunk's first 32 values.
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-2)
    return _k_affine(blocks, q)


def _q5_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lead = blocks.shape[:-1]
    qh = blocks[..., 16:48].reshape(*lead, 1, 32)
    qs = blocks[..., 48:176].reshape(*lead, 4, 1, 32)
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=-2).reshape(*lead, 8, 32)
    # Group g takes bit g of each of the 32 qh bytes as its fifth bit.
    high = (qh >> np.arange(8, dtype=np.uint8)[:, None]) & 1
    return _k_affine(blocks, low | (high << 4))


_REPACKERS = {
    "Q4_0": (18, _q4_0),
    "Q4_1": (20, _q4_1),
    "Q5_0": (22, _q5_0),
    "Q5_1": (24, _q5_1),
    "Q8_0": (34, _q8_0),
    "Q4_K": (144, _q4_k),
    "Q5_K": (176, _q5_k),
}


def repack(ggml_type: str, raw: np.ndarray) -> Affine:
    """Repack ``raw`` (…rows, bytes per row) of a Q4_0…Q5_K tensor into MLX affine, exactly."""
    block_bytes, unpack = _REPACKERS[ggml_type]
    lead = raw.shape[:-1]
    rows = int(np.prod(lead))
    blocks = np.asarray(raw).reshape(rows, -1, block_bytes)
    q, scales, biases = unpack(blocks)
    bits = _BITS[ggml_type]
    packed = pack_bits(q.reshape(rows, -1), bits)
    return Affine(
        weight=packed.reshape(*lead, -1),
        scales=scales.reshape(*lead, -1).astype(np.float32),
        biases=biases.reshape(*lead, -1).astype(np.float32),
        bits=bits,
        exact=True,
    )


def _q6_k_grid(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q6_K as (d per super-block, int8 scale per 16 values, signed 6-bit q), like gguf-py."""
    blocks = raw.reshape(-1, 210)
    low_shift = np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    high_shift = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    low = ((blocks[:, 0:128].reshape(-1, 2, 1, 64) >> low_shift) & 0x0F).reshape(-1, 8, 32)
    high = ((blocks[:, 128:192].reshape(-1, 2, 1, 32) >> high_shift) & 0x03).reshape(-1, 8, 32)
    q = (low | (high << 4)).astype(np.int16) - 32  # (blocks, 8 groups, 32)
    scales = blocks[:, 192:208].view(np.int8).astype(np.int16).reshape(-1, 8, 2)
    d = _f16(blocks[:, 208:210]).reshape(-1, 1)
    return d, scales, q


def requantize_8bit_q6_k(raw: np.ndarray, reference: np.ndarray) -> Affine:
    """Q6_K in MLX 8-bit: exact groups where both 16-halves share an integer grid."""
    lead = raw.shape[:-1]
    d, scales, q = _q6_k_grid(np.asarray(raw))
    a, b = scales[..., 0], scales[..., 1]  # (blocks, 8)
    g = np.gcd(a, b)
    g = np.where(g == 0, 1, g)
    # Integers on the grid of step d * g: (a / g) * (q - 32) and (b / g) * (q - 32).
    per_half = np.stack([a // g, b // g], axis=-1)[..., None]  # (blocks, 8, 2, 1)
    v = (per_half * q.reshape(*q.shape[:-1], 2, 16)).reshape(q.shape).astype(np.int32)
    lo, hi = v.min(axis=-1), v.max(axis=-1)
    exact = (hi - lo) <= 255
    step = d * g.astype(np.float32)  # (blocks, 8)
    q8 = np.clip(v - lo[..., None], 0, 255)
    scale = step
    bias = step * lo.astype(np.float32)
    values = np.asarray(reference, dtype=np.float32).reshape(q.shape)
    if not exact.all():
        fq, fscale, fbias = _affine_8bit(values)
        q8 = np.where(exact[..., None], q8, fq)
        scale = np.where(exact, scale, fscale)
        bias = np.where(exact, bias, fbias)
    restored = scale[..., None] * q8.astype(np.float32) + bias[..., None]
    rows = int(np.prod(lead))
    return Affine(
        weight=pack_bits(q8.reshape(rows, -1), 8).reshape(*lead, -1),
        scales=scale.reshape(*lead, -1).astype(np.float32),
        biases=bias.reshape(*lead, -1).astype(np.float32),
        bits=8,
        exact=bool(exact.all()),
        exact_groups=float(exact.mean()),
        max_abs_error=float(np.abs(restored - values).max(initial=0.0)),
    )


def _affine_8bit(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round each 32-group (last axis) onto 256 levels from its minimum to its maximum."""
    lo, hi = values.min(axis=-1), values.max(axis=-1)
    scale = (hi - lo) / 255.0
    safe = np.where(scale == 0, 1.0, scale)
    q = np.clip(np.rint((values - lo[..., None]) / safe[..., None]), 0, 255).astype(np.int32)
    return q, scale.astype(np.float32), lo.astype(np.float32)


def requantize(values: np.ndarray, bits: int) -> Affine:
    """Float values (…, columns) in MLX affine at ``bits`` (min/max per group, rounded)."""
    lead, columns = values.shape[:-1], values.shape[-1]
    groups = np.asarray(values, dtype=np.float32).reshape(-1, columns // GROUP_SIZE, GROUP_SIZE)
    levels = (1 << bits) - 1
    lo, hi = groups.min(axis=-1), groups.max(axis=-1)
    scale = (hi - lo) / levels
    safe = np.where(scale == 0, 1.0, scale)
    q = np.clip(np.rint((groups - lo[..., None]) / safe[..., None]), 0, levels)
    restored = scale[..., None] * q + lo[..., None]
    rows = groups.shape[0]
    return Affine(
        weight=pack_bits(q.astype(np.uint32).reshape(rows, -1), bits).reshape(*lead, -1),
        scales=scale.reshape(*lead, -1).astype(np.float32),
        biases=lo.reshape(*lead, -1).astype(np.float32),
        bits=bits,
        exact=False,
        exact_groups=0.0,
        max_abs_error=float(np.abs(restored - groups).max(initial=0.0)),
    )
