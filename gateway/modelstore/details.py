"""What ``gateway models show`` adds to a catalog entry: template, markers, source defaults.

Read from small files only (``tokenizer_config.json``, ``chat_template.jinja``, the added
tokens of ``tokenizer.json``, the GGUF header, Ollama's layers, the import manifest).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.modelstore.sources import LocatedModel
from gateway.modelstore.store import ModelStore

# Special tokens that announce a reasoning section or a tool-call format, by family.
THINKING_MARKERS = ("<think>", "<thinking>", "<|channel|>", "<|begin_of_thought|>")
TOOL_MARKERS = (
    "<tool_call>",  # Qwen, Hermes
    "[TOOL_CALLS]",  # Mistral
    "<|python_tag|>",  # Llama 3.1
    "<start_function_call>",  # FunctionGemma
    "<|tool_call_start|>",  # LFM2
    "<function_call>",
)


def model_details(located: LocatedModel, store: ModelStore) -> dict[str, Any]:
    """Details beyond the catalog's columns (only what is cheap to know)."""
    details: dict[str, Any] = {"default_stop": list(located.default_stop), **located.details}
    folder = located.folder
    if located.gguf is not None:
        from gateway.modelstore.gguf import read_summary

        details["chat_template"] = bool(read_summary(located.gguf).has_chat_template)
        slug = located.imported_as(store)
        details["import_manifest"] = store.manifest(slug or located.slug)
        folder = store.path_for(slug) if slug is not None else None
    elif located.ref.kind == "known":
        details["import_manifest"] = store.manifest(located.ref.name)
    if folder is not None and folder.is_dir():
        details["chat_template"] = has_chat_template(folder)
        added = added_tokens(folder)
        details["thinking_markers"] = [m for m in THINKING_MARKERS if m in added]
        details["tool_markers"] = [m for m in TOOL_MARKERS if m in added]
    return details


def has_chat_template(folder: Path) -> bool:
    """A template in any of the places transformers reads one from."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(config.get("chat_template"))


def added_tokens(folder: Path) -> set[str]:
    """The tokenizer's added (special) tokens: where family markers live."""
    try:
        tokenizer = json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return set()
    return {str(t.get("content")) for t in tokenizer.get("added_tokens", [])}
