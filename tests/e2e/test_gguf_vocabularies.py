"""GGUFs with the vocabularies the importer used to refuse (issue 31: deepseek-coder,
deepseek-llm, falcon, qwen35, gemma4), served and asked through the official ``openai`` SDK.

Each is a small synthetic llama whose tokenizer metadata is copied from llama.cpp's own
``ggml-vocab-*.gguf`` (``make real-models``). The prompt is one of llama.cpp's test texts: the
gateway counts exactly the tokens llama.cpp's ``.out`` file lists for it (plus <bos> where the
vocabulary adds one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.modelstore.gguf.reader import read_gguf
from tests.real_fixtures import llama_cpp_cases, real_file
from testsupport.process import RunningGateway, start_gateway
from testsupport.synthetic import SyntheticSpec, build_synthetic
from testsupport.synthetic_gguf import write_gguf

pytestmark = pytest.mark.e2e

VOCABULARIES = ["deepseek-coder", "deepseek-llm", "falcon", "qwen35", "gemma-4"]
TEXT = " this is 🦙.cpp"  # one of llama.cpp's cases, in every file


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("vocabularies")
    tiers = {}
    for index, name in enumerate(VOCABULARIES):
        vocab = real_file(f"llama.cpp/vocab/ggml-vocab-{name}.gguf")
        size = len(read_gguf(vocab).metadata["tokenizer.ggml.tokens"])
        spec = SyntheticSpec("llama", hidden_size=64, seed=index, overrides={"vocab_size": size})
        folder = build_synthetic(spec, root / name)
        gguf = write_gguf(folder, root / f"{name}-Q8_0.gguf", "Q8_0", vocab=vocab)
        tiers[name] = {"kind": "mlx", "model": str(gguf), "keep_alive_seconds": 60}
    config = {"cache_dir": str(root / "cache"), "tiers": tiers}
    running = start_gateway(root / "gateway", config)
    yield running
    running.stop()


def expected_prompt_tokens(name: str) -> int:
    vocab = real_file(f"llama.cpp/vocab/ggml-vocab-{name}.gguf")
    (ids,) = [ids for text, ids in llama_cpp_cases(vocab) if text == TEXT]
    meta = read_gguf(vocab).metadata
    bos = bool(meta.get("tokenizer.ggml.add_bos_token")) or meta["tokenizer.ggml.model"] == "gemma4"
    return len(ids) + int(bos)


@pytest.mark.parametrize("name", VOCABULARIES)
def test_a_once_refused_vocabulary_is_served_and_counts_as_llama_cpp(
    gateway: RunningGateway, name: str
) -> None:
    completion = gateway.openai().completions.create(
        model=name, prompt=TEXT, max_tokens=4, temperature=0
    )
    assert completion.choices[0].finish_reason in ("length", "stop")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == expected_prompt_tokens(name)
