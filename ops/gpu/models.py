"""The models of the GPU benchmarks, built on the device machine (nothing is downloaded there).

* ``llama-1b-bf16``, ``llama-1b-4bit``, ``llama-8b-bf16``, ``llama-8b-4bit``: random weights
  (``testsupport.synthetic``, mlx-lm's own llama class) in Llama-3.2-1B's and
  Llama-3.1-8B's layer shapes, with SmolLM2's tokenizer (49,152 tokens, so the vocabulary
  projection is smaller than Llama's 128,256: the bytes per token are counted from the weights
  as built, not from Llama's);
* ``smollm2-bf16``: the imported SmolLM2-135M (GGUF Q4_1, carried) dequantized to bf16,
  the fastest and most host-bound case;
* ``smollm2-4bit``: that import as carried;
* ``qwen-0.5b``, ``qwen-1.5b``: the real Qwen2.5-Coder GGUFs of issue 31 (carried when
  ``prepare.sh`` is given ``GGUFS``, joined under ``OUT/../real``), imported by the
  gateway's own GGUF import as a user's would be (Q4_K_M kept quantized).

Usage: ``python ops/gpu/models.py OUT SMOLLM2_FOLDER [NAME ...]`` (default: all); prints
one ``name<TAB>folder`` line per model. ``tiny`` (a 2-layer model) is for a smoke test on a CPU.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LLAMA_1B: dict[str, Any] = {
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "overrides": {"tie_word_embeddings": True, "rope_theta": 500000.0},
}
LLAMA_8B: dict[str, Any] = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "overrides": {"rope_theta": 500000.0},
}
FOUR_BIT = {"group_size": 64, "bits": 4}
CONTEXT = 131072  # Llama 3's: room for the 32K-token TTFT rows
NAMES = (
    "smollm2-bf16",
    "smollm2-4bit",
    "llama-1b-bf16",
    "llama-1b-4bit",
    "llama-8b-bf16",
    "llama-8b-4bit",
    "qwen-0.5b",
    "qwen-1.5b",
    "tiny",
)
REAL_GGUFS = {
    "qwen-0.5b": "qwen2.5-coder-0.5b-instruct-awq.gguf",
    "qwen-1.5b": "qwen2.5-coder-1.5b-instruct.gguf",
}


def build(name: str, out: Path, smollm2: Path) -> Path:
    """The folder of model ``name`` under ``out`` (built once)."""
    if name == "smollm2-4bit":
        return smollm2
    if name in REAL_GGUFS:
        return _imported(out.parent / "real" / REAL_GGUFS[name], out / "store")
    folder = out / name
    if (folder / "config.json").is_file():
        return folder
    started = time.perf_counter()
    if name == "smollm2-bf16":
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mlx_lm.convert",
                "--hf-path",
                str(smollm2),
                "--mlx-path",
                str(folder),
                "-d",
                "--dtype",
                "bfloat16",
            ],
            check=True,
        )
    else:
        from testsupport.synthetic import SyntheticSpec, build_synthetic

        if name == "tiny":
            spec = SyntheticSpec("llama", max_position_embeddings=CONTEXT)
        else:
            shape = LLAMA_1B if name.startswith("llama-1b") else LLAMA_8B
            quantization = FOUR_BIT if name.endswith("4bit") else None
            spec = SyntheticSpec(
                "llama",
                dtype="bfloat16",
                quantization=quantization,
                max_position_embeddings=CONTEXT,
                **shape,
            )
        build_synthetic(spec, folder, tokenizer_from=smollm2)
        _copy_chat_template(smollm2, folder)
    print(f"built {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return folder


def _imported(gguf: Path, store_dir: Path) -> Path:
    """The gateway's import of a real GGUF (``gateway models import``, in this process)."""
    from gateway.engines.device import choose_compute_path

    choose_compute_path()  # before the import's check loads MLX
    from gateway.modelstore.sources import locate, parse_model_ref
    from gateway.modelstore.store import ModelStore

    store = ModelStore(store_dir)
    located = locate(parse_model_ref(str(gguf)), store)
    slug = located.imported_as(store)
    if slug is None:
        started = time.perf_counter()
        slug = located.slug
        assert located.gguf is not None, f"{gguf} is not a GGUF"
        store.import_gguf(slug, located.gguf, str(gguf), lambda m: print(m, file=sys.stderr))
        print(f"imported {gguf.name} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return store.path_for(slug)


def _copy_chat_template(source: Path, folder: Path) -> None:
    # The imported SmolLM2 keeps its template in chat_template.jinja; copied with the
    # tokenizer already, but kept explicit: the gateway renders chats with it.
    template = source / "chat_template.jinja"
    if template.is_file() and not (folder / template.name).is_file():
        (folder / template.name).write_bytes(template.read_bytes())


def main(argv: list[str]) -> int:
    out, smollm2, *names = argv
    for name in names or NAMES[:-1]:
        if name not in NAMES:
            raise SystemExit(f"unknown model {name!r}: {', '.join(NAMES)}")
        print(f"{name}\t{build(name, Path(out), Path(smollm2))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
