"""A model folder whose safetensors header lies about its data (issue 35), served beside the
embedded model: a request to it is a clear 503 naming the file and the lie, never a 500, and
the other tier still answers."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from gateway.config import default_cache_dir
from testsupport.process import start_gateway

MODEL = "smollm2-135m-instruct"
pytestmark = pytest.mark.e2e


def lying_folder(folder: Path) -> Path:
    """SmolLM2's tokenizer and a tiny Llama config, with weights whose header claims a
    terabyte of data in a 320-byte file."""
    source = default_cache_dir() / "models" / MODEL
    folder.mkdir()
    config = {
        "model_type": "llama",
        "vocab_size": 10,
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "intermediate_size": 8,
        "num_attention_heads": 1,
        "rms_norm_eps": 1e-5,
    }
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((source / name).read_bytes())
    entry = {"dtype": "F32", "shape": [10, 8], "data_offsets": [0, 10**12]}
    header = json.dumps({"model.embed_tokens.weight": entry}).encode()
    header += b" " * (-len(header) % 8)
    weights = len(header).to_bytes(8, "little") + header + b"\0" * 320
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_a_lying_safetensors_header_is_a_503_naming_it(tmp_path: Path) -> None:
    folder = lying_folder(tmp_path / "lying")
    gateway = start_gateway(
        tmp_path / "gw",
        {"tiers": {"fine": {"kind": "mlx", "model": MODEL}, "lying": {"model": str(folder)}}},
    )
    try:
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        answer = httpx.post(
            f"{gateway.base_url}/v1/chat/completions", json={**body, "model": "lying"}, timeout=120
        )
        assert answer.status_code == 503
        message = answer.json()["error"]["message"]
        assert str(folder) in message and "invalid data offsets" in message
        fine = httpx.post(
            f"{gateway.base_url}/v1/chat/completions", json={**body, "model": "fine"}, timeout=120
        )
        assert fine.status_code == 200
        assert httpx.get(f"{gateway.base_url}/health").status_code == 200
    finally:
        gateway.stop()
