"""One MoE layer's bank of expert slots: what is where, reading the missing, placing them.

Each expert projection of the layer (``gate_proj``, ``up_proj``, ``down_proj``; ``fc1``,
``fc2``) becomes an mlx-lm ``SwitchLinear`` (float weights) or ``QuantizedSwitchLinear``
(packed weights) with C experts instead of E: the stock ``gather_mm`` / ``gather_qmm``
then run on slot ids. A layer's missed experts are read in parallel (a few threads),
each with ``os.preadv`` of its byte range (MLX does not memory-map, and slicing a lazy stack
reads all of it: MODELS.md §6) straight into its slot through a numpy view of the bank's
buffer, or into a small staging buffer and converted into the slot (float16 → float32):
no MLX temporaries, no second copy. Measured on MODELS.md §6's model (7 slots, loaded host):
decode 0.57 → 1.32 tok/s against 1.48 resident, TTFT 15 → 4.4 s.

Serving forms (``gateway.engines.weights``): ``float32`` — dequantized if stored packed,
float32 (OpenBLAS; the CPU ``gather_mm`` takes float32 only); ``quantized`` — packed weights
as stored, scales and biases float32 (float32 activations); ``native`` — as stored (Metal,
CUDA), except float weights on a CPU, which become float32 for the reason above.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

from gateway.engines.experts.convert import bf16_to_f32, f16_all_finite, f16_to_f32
from gateway.engines.experts.policy import EvictionPolicy
from gateway.engines.experts.safetensors_index import TensorLocation
from gateway.engines.experts.stats import ExpertStats

MX_DTYPES = {
    "F32": mx.float32,
    "F16": mx.float16,
    "BF16": mx.bfloat16,
    "U32": mx.uint32,
    "I32": mx.int32,
    "U8": mx.uint8,
    "I8": mx.int8,
}


@dataclass(frozen=True)
class ProjectionSource:
    """Where one expert projection's stacked tensors are, and how they are quantized."""

    weight: TensorLocation
    scales: TensorLocation | None = None
    biases: TensorLocation | None = None  # the quantization's (affine) biases
    bias: TensorLocation | None = None  # the layer's own additive bias, [E, out]
    group_size: int = 64
    bits: int = 4
    mode: str = "affine"

    @property
    def packed(self) -> bool:
        return self.scales is not None

    def tensors(self) -> dict[str, TensorLocation]:
        named = {"weight": self.weight, "scales": self.scales, "biases": self.biases}
        named["bias"] = self.bias
        return {k: v for k, v in named.items() if v is not None}


class FileReader:
    """Positional reads of expert rows: one descriptor per file, a few threads.

    ``os.preadv`` releases the GIL, and so do numpy's conversions of large arrays: a layer's
    missed experts are read and converted in parallel (an SSD serves parallel reads faster
    than one at a time; on a CPU-bound host the conversion is spread over the cores).
    """

    def __init__(self, threads: int | None = None) -> None:
        self._fds: dict[Path, int] = {}
        self.threads = threads if threads is not None else min(READ_THREADS, os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        weakref.finalize(self, _close_all, self._fds)

    def open(self, file: Path) -> int:
        fd = self._fds.get(file)
        if fd is None:
            fd = self._fds[file] = os.open(file, os.O_RDONLY)
        return fd

    def read_into(self, location: TensorLocation, row: int, out: np.ndarray) -> None:
        """Row ``row`` (one expert) of a stacked tensor into ``out`` (uint8, row bytes)."""
        fd = self.open(location.file)
        view = out.data
        size, done, offset = out.nbytes, 0, location.row_offset(row)
        while done < size:  # pread may return less than asked
            got = os.preadv(fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"{location.file}: short read at {offset + done}")
            done += got

    def rows(self, location: TensorLocation, rows: Sequence[int]) -> np.ndarray:
        """The bytes of ``rows`` (experts) of a stacked tensor, as ``uint8 [len(rows), row]``."""
        out = np.empty((len(rows), location.row_bytes()), dtype=np.uint8)
        for i, row in enumerate(rows):
            self.read_into(location, row, out[i])
        return out

    def staging(self, nbytes: int) -> np.ndarray:
        """A reusable buffer of this thread for rows that are converted after the read."""
        buffer: np.ndarray | None = getattr(self._local, "buffer", None)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._local.buffer = np.empty(nbytes, dtype=np.uint8)
        return buffer[:nbytes]

    def run(self, jobs: list[Callable[[], int]]) -> int:
        """Run ``jobs`` (each returns bytes read), in parallel when there are several."""
        if len(jobs) == 1 or self.threads <= 1:
            return sum(job() for job in jobs)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="expert-read")
        return sum(self._pool.map(lambda job: job(), jobs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        _close_all(self._fds)


# Reader threads at most (bounded by the cores): TurboFieldfare reads in parallel too.
READ_THREADS = 4


def _close_all(fds: dict[Path, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


def _as_mx(raw: np.ndarray, location: TensorLocation) -> mx.array:
    """Raw rows of a tensor as an MLX array of its stored dtype and per-row shape."""
    array = mx.array(raw).view(MX_DTYPES[location.dtype])
    return array.reshape(raw.shape[0], *location.shape[1:])


@dataclass(frozen=True)
class _Part:
    """One tensor of one projection placed without MLX: read into its slot as stored
    (``copy``) or read and converted to float32 (``f16``, ``bf16``)."""

    projection: str
    key: str
    location: TensorLocation
    how: str


class ExpertBank:
    """The C slots of one MoE layer over its E experts.

    ``slot_of[e]`` is expert e's slot or -1; ``ensure`` makes a set of experts resident
    (at most C of them), evicting by the policy among those the step does not use.
    """

    def __init__(
        self,
        name: str,
        sources: dict[str, ProjectionSource],
        slots: int,
        mode: str,
        on_cpu: bool,
        policy: EvictionPolicy,
        stats: ExpertStats,
        reader: FileReader,
    ) -> None:
        self.name = name
        self.sources = sources
        self.slots = slots
        self.policy = policy
        self.stats = stats
        self.reader = reader
        experts = {s.weight.shape[0] for s in sources.values()}
        if len(experts) != 1:
            raise ValueError(f"{name}: projections disagree on the number of experts")
        self.num_experts = experts.pop()
        self.slot_of = np.full(self.num_experts, -1, dtype=np.int32)
        self.expert_in: list[int | None] = [None] * slots
        self._free = list(range(slots - 1, -1, -1))
        self._mode = mode
        self._on_cpu = on_cpu
        self.modules: dict[str, Any] = {n: self._make_module(s) for n, s in sources.items()}
        self._parts, self._dequantized = self._plan_parts()
        self._part_bytes = sum(p.location.row_bytes() for p in self._parts)
        # Experts whose float16 rows were seen to hold no inf/nan (the fast conversion's case).
        self._finite = np.zeros(self.num_experts, dtype=bool)

    # -- the serving form ------------------------------------------------------------------

    def _keeps_packed(self, source: ProjectionSource) -> bool:
        return source.packed and self._mode in ("quantized", "native")

    def _float_dtype(self, stored: str) -> mx.Dtype:
        if self._mode == "native" and not self._on_cpu:
            return MX_DTYPES[stored]
        return mx.float32

    def _make_module(self, source: ProjectionSource) -> Any:
        """An mlx-lm switch projection with ``slots`` experts, zero-filled."""
        c = self.slots
        module: Any
        out_dims = source.weight.shape[1]
        has_bias = source.bias is not None
        if self._keeps_packed(source):
            assert source.scales is not None
            in_dims = source.scales.shape[2] * source.group_size
            module = QuantizedSwitchLinear(
                in_dims, out_dims, c, has_bias, source.group_size, source.bits, source.mode
            )
            module.weight = mx.zeros((c, *source.weight.shape[1:]), dtype=mx.uint32)
            scale_dtype = self._float_dtype(source.scales.dtype)
            module.scales = mx.zeros((c, *source.scales.shape[1:]), dtype=scale_dtype)
            if source.biases is not None:
                module.biases = mx.zeros((c, *source.biases.shape[1:]), dtype=scale_dtype)
        else:
            in_dims = (
                source.scales.shape[2] * source.group_size
                if source.scales is not None
                else source.weight.shape[2]
            )
            module = SwitchLinear(in_dims, out_dims, c, bias=has_bias)
            dtype = self._float_dtype(source.scales.dtype if source.scales else source.weight.dtype)
            module.weight = mx.zeros((c, out_dims, in_dims), dtype=dtype)
        if source.bias is not None:
            module.bias = mx.zeros((c, out_dims), dtype=self._float_dtype(source.bias.dtype))
        return module

    def _plan_parts(self) -> tuple[list[_Part], list[str]]:
        """How each tensor gets into its slot: placed by numpy, or (packed weights served as
        float32) dequantized by MLX as the resident model's are."""
        parts: list[_Part] = []
        dequantized: list[str] = []
        for name, source in self.sources.items():
            keys = source.tensors()
            if source.packed and not self._keeps_packed(source):
                dequantized.append(name)
                keys = {k: v for k, v in keys.items() if k == "bias"}
            for key, location in keys.items():
                target = self.modules[name][key].dtype
                stored = MX_DTYPES[location.dtype]
                if target == stored:
                    how = "copy"
                elif target == mx.float32 and location.dtype in ("F16", "BF16"):
                    how = location.dtype.lower()
                else:
                    raise ValueError(f"{self.name}.{name}.{key}: {location.dtype} → {target}")
                parts.append(_Part(name, key, location, how))
        return parts, dequantized

    def _dequantize(self, source: ProjectionSource, raw: dict[str, np.ndarray]) -> mx.array:
        """Packed rows → float weights: in the stored dtype, then cast, as mlx-lm's
        ``dequantize_model`` does for the resident model (the same weights to the bit)."""
        assert source.scales is not None
        biases = source.biases
        weight = mx.dequantize(
            _as_mx(raw["weight"], source.weight),
            _as_mx(raw["scales"], source.scales),
            _as_mx(raw["biases"], biases) if biases is not None else None,
            source.group_size,
            source.bits,
            source.mode,
        )
        return weight.astype(self._float_dtype(source.scales.dtype))

    def _slot_views(self) -> dict[tuple[str, str], np.ndarray]:
        """numpy views of the bank arrays (``[C, ...]``), written in place by the loads.

        Safe because every computation that reads a slot is evaluated before the slot is
        written: a layer's step waits for its router (which follows every earlier step),
        and each wave is evaluated before the next. An array numpy cannot write in place
        (not contiguous, not evaluated) is replaced once by a fresh copy that it can.
        """
        views: dict[tuple[str, str], np.ndarray] = {}
        keys = {(p.projection, p.key) for p in self._parts}
        keys |= {(n, "weight") for n in self._dequantized}
        for name, key in keys:
            module = self.modules[name]
            view = np.array(module[key], copy=False)
            if not (view.flags.c_contiguous and view.flags.writeable):
                module[key] = mx.array(np.array(module[key]))
                mx.eval(module[key])
                view = np.array(module[key], copy=False)
            views[name, key] = view
        return views

    # -- residency ---------------------------------------------------------------------------

    def resident(self) -> list[int]:
        return [e for e in self.expert_in if e is not None]

    def ensure(self, experts: Sequence[int]) -> None:
        """Make ``experts`` (at most ``slots`` of them) resident for the current step."""
        pinned = frozenset(int(e) for e in experts)
        if len(pinned) > self.slots:
            raise ValueError(f"{self.name}: {len(pinned)} experts for {self.slots} slots")
        missing = sorted(e for e in pinned if self.slot_of[e] < 0)
        if missing:
            targets = [self._take_slot(pinned) for _ in missing]
            for expert, slot in zip(missing, targets, strict=True):
                self.slot_of[expert] = slot
                self.expert_in[slot] = expert
            self._load(missing, targets)
        self.policy.touch(pinned)
        self.stats.lookups(len(pinned) - len(missing), len(missing))

    def _take_slot(self, pinned: frozenset[int]) -> int:
        if self._free:
            return self._free.pop()
        victim = self.policy.victim(self.resident(), pinned)
        slot = int(self.slot_of[victim])
        self.slot_of[victim] = -1
        self.expert_in[slot] = None
        return slot

    def _load(self, experts: list[int], slots: list[int]) -> None:
        started = time.perf_counter()
        mx.synchronize()  # nothing scheduled may still read a slot about to change
        views = self._slot_views()

        def place(expert: int, slot: int) -> int:
            finite = bool(self._finite[expert])
            checked = True
            for part in self._parts:
                target = views[part.projection, part.key][slot].reshape(-1)
                if part.how == "copy":
                    self.reader.read_into(part.location, expert, target.view(np.uint8))
                    continue
                raw = self.reader.staging(part.location.row_bytes())
                self.reader.read_into(part.location, expert, raw)
                bits = raw.view(np.uint16)
                if part.how == "bf16":
                    bf16_to_f32(bits, target)
                    continue
                ok = finite or f16_all_finite(bits)
                f16_to_f32(bits, target, finite=ok)
                checked = checked and ok
            self._finite[expert] = checked  # its float16 rows need no check next time
            return self._part_bytes

        nbytes = self.reader.run(
            [partial(place, e, s) for e, s in zip(experts, slots, strict=True)]
        )
        for name in self._dequantized:
            source = self.sources[name]
            raw = {k: self.reader.rows(loc, experts) for k, loc in source.tensors().items()}
            nbytes += sum(r.nbytes for k, r in raw.items() if k != "bias")
            weights = self._dequantize(source, raw)
            mx.eval(weights)
            target = views[name, "weight"]
            for row, slot in enumerate(slots):
                np.copyto(target[slot], np.array(weights[row], copy=False))
        self.stats.read(nbytes, time.perf_counter() - started)
