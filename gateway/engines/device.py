"""Which compute path this machine takes, decided once before MLX is first imported.

On Apple Silicon MLX runs on Metal and 4-bit weights are the fast path. On Linux CPU the
``mlx[cpu]`` wheel ships the reference BLAS (about 5 GFLOP/s here); loading OpenBLAS with
global symbol visibility *before* ``mlx.core`` is imported routes MLX's sgemm calls to it
(about 190 GFLOP/s), and with it float32 weights beat MLX's 4-bit CPU kernels ~25x at
prefill (``shared/MODELS.md`` section 3). On Linux with MLX's CUDA backend installed
(``mlx-cuda-*``) and a GPU present, the GPU computes and each model keeps its own form
(bf16 or its quantization): nothing is dequantized to float32.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import sys
from dataclasses import dataclass

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
OPENBLAS_INSTALL_HINT = (
    "install OpenBLAS for ~25x faster prefill: `apt-get install libopenblas0-pthread` "
    "(Debian/Ubuntu, as root) or your distribution's OpenBLAS package"
)


@dataclass(frozen=True)
class ComputePath:
    """What the engines do on this machine, shown at start and in ``/health``."""

    device: str  # "metal", "cuda" or "cpu"
    blas: str  # "accelerate", "openblas:<path>", "reference" or "cublas"
    weights: str  # "4bit" (as imported), "native" (as stored) or "float32" (dequantized at load)
    note: str

    @property
    def dequantize(self) -> bool:
        return self.weights == "float32"

    def as_dict(self) -> dict[str, str]:
        return {
            "device": self.device,
            "blas": self.blas,
            "weights": self.weights,
            "note": self.note,
        }


_chosen: ComputePath | None = None


def _is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def _openblas_core(library: ctypes.CDLL) -> str:
    # Which kernels OpenBLAS picked for this CPU: an old OpenBLAS on a newer CPU falls back to
    # generic ones (seen here: "Prescott" on a Sapphire Rapids Xeon, ~8x slower sgemm).
    # OPENBLAS_CORETYPE overrides it; the gateway reports it and leaves that choice alone.
    try:
        library.openblas_get_corename.restype = ctypes.c_char_p
        return str(library.openblas_get_corename().decode())
    except (AttributeError, UnicodeDecodeError):
        return "unknown"


def openblas_paths() -> list[str]:
    """The OpenBLAS libraries on this machine, the preferred first (``GATEWAY_OPENBLAS``
    names one; else the distributions' usual places)."""
    override = os.environ.get("GATEWAY_OPENBLAS")
    return [
        path
        for path in ((override,) if override else OPENBLAS_CANDIDATES)
        if path and os.path.exists(path)
    ]


def openblas_preload() -> dict[str, str]:
    """The environment that makes another process load OpenBLAS first (MLX, or mlx-lm's
    server, on a Linux CPU: only fast that way), or none."""
    paths = openblas_paths() if sys.platform == "linux" else []
    return {"LD_PRELOAD": paths[0]} if paths else {}


def _load_openblas() -> str | None:
    if "mlx.core" in sys.modules:
        # Too late: MLX has already bound its BLAS symbols.
        return None
    for path in openblas_paths():
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
        except OSError:
            continue
        return f"{path} core={_openblas_core(library)}"
    return None


# MLX's CUDA backend ships as one of these distributions beside ``mlx`` itself.
CUDA_DISTRIBUTIONS = ("mlx-cuda-13", "mlx-cuda-12", "mlx-cuda")


def _cuda_gpu() -> str | None:
    """The GPU MLX's CUDA backend computes on, or None (no CUDA wheel, or no GPU).

    The wheel is looked for first, so that a CPU-only machine never imports MLX here (the
    OpenBLAS choice above must come before that import, and it already has).
    """
    if sys.platform != "linux":
        return None
    for name in CUDA_DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        break
    else:
        return None
    import mlx.core as mx

    if not mx.cuda.is_available():
        return None
    try:
        return str(mx.device_info().get("device_name", "GPU"))
    except (AttributeError, RuntimeError):
        return "GPU"


def choose_compute_path(weights: str = "auto") -> ComputePath:
    """Decide (once per process) and prepare the compute path; call before importing MLX.

    ``weights`` is "auto", "4bit" or "float32"; "auto" picks the fast one for this machine.
    """
    global _chosen
    if _chosen is not None:
        return _chosen
    if _is_apple_silicon():
        chosen = "4bit" if weights == "auto" else weights
        _chosen = ComputePath("metal", "accelerate", chosen, "Apple Silicon: Metal")
        return _chosen
    blas_path = _load_openblas()
    gpu = _cuda_gpu()
    if gpu is not None:
        # A float32 copy would double a bf16 model's bytes per token for nothing: the GPU's
        # bf16 and quantized kernels are the fast ones.
        chosen = "native" if weights in ("auto", "float32") else weights
        _chosen = ComputePath("cuda", "cublas", chosen, f"Linux GPU: MLX CUDA on {gpu}")
        return _chosen
    if blas_path:
        chosen = "float32" if weights == "auto" else weights
        _chosen = ComputePath("cpu", f"openblas:{blas_path}", chosen, "Linux CPU with OpenBLAS")
    else:
        chosen = "4bit" if weights == "auto" else weights
        _chosen = ComputePath("cpu", "reference", chosen, f"slow path: {OPENBLAS_INSTALL_HINT}")
    return _chosen
