"""The header-only summary and the file reader (compared with gguf-py's own reader)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from gateway.modelstore.gguf import convert_gguf, estimate_loaded_bytes, read_summary
from gateway.modelstore.gguf.reader import read_gguf
from testsupport.synthetic import SyntheticSpec, build_synthetic
from testsupport.synthetic_gguf import write_gguf


def test_summary_reader_and_estimate(tmp_path: Path) -> None:
    from gguf import GGUFReader

    spec = SyntheticSpec("qwen3", hidden_size=256, intermediate_size=256, num_attention_heads=8,
                         num_hidden_layers=1)  # fmt: skip
    folder = build_synthetic(spec, tmp_path / "src")
    gguf = write_gguf(folder, tmp_path / "m.gguf", "Q4_K")

    started = time.perf_counter()
    summary = read_summary(gguf)  # a 49k-token vocabulary and its merges, skipped
    assert time.perf_counter() - started < 0.5
    reference = GGUFReader(str(gguf))
    assert summary.architecture == "qwen3" and summary.supported
    assert summary.parameters == sum(int(t.n_elements) for t in reference.tensors)
    assert summary.quant_types == {"F32": 5, "Q4_K": 8}  # norms; 7 linears + embedding
    assert summary.context_length == 4096 and summary.has_chat_template
    assert summary.name == "synthetic qwen3" and summary.file_bytes == gguf.stat().st_size

    header = read_gguf(gguf)  # everything decoded: the same as gguf-py's reader
    for ours, theirs in zip(header.tensors, reference.tensors, strict=True):
        assert (ours.name, ours.offset, ours.nbytes) == (theirs.name, theirs.data_offset,
                                                         theirs.n_bytes)  # fmt: skip
        assert np.array_equal(header.raw(ours).reshape(-1), theirs.data.view(np.uint8).reshape(-1))
    for key, field in reference.fields.items():
        if not key.startswith("GGUF."):
            value = header.metadata[key]
            assert (value.tolist() if isinstance(value, np.ndarray) else value) == field.contents()

    convert_gguf(gguf, tmp_path / "out", lambda _msg: None)
    written = (tmp_path / "out" / "model.safetensors").stat().st_size
    assert abs(estimate_loaded_bytes(summary, dequantized=False) - written) < 0.01 * written
    assert estimate_loaded_bytes(gguf, dequantized=True) == 4 * summary.parameters


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(tmp_path / "x.gguf"), "mamba")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    summary = read_summary(tmp_path / "x.gguf")
    assert summary.architecture == "mamba" and not summary.supported
    assert summary.parameters == 128 and summary.context_length is None


def test_file_type_names_are_llama_cpps() -> None:
    """``general.file_type`` values and names as gguf-py (llama.cpp's own package) has them."""
    from gguf import LlamaFileType

    from gateway.modelstore.gguf.header import FILE_TYPES

    theirs = {
        int(member): member.name.removeprefix("MOSTLY_").removeprefix("ALL_")
        for member in LlamaFileType
        if member.name != "GUESSED"
    }
    assert {value: FILE_TYPES.get(value) for value in theirs} == theirs
    assert FILE_TYPES[15] == "Q4_K_M" and FILE_TYPES[0] == "F32"
