"""Whether two model folders share a tokenizer: a draft model must (``draft_model``).

Read from their ``tokenizer.json`` alone, so the gateway refuses a mismatched pair at start
without loading either model."""

from __future__ import annotations

import json
from pathlib import Path


def tokenizer_mismatch(model: Path, draft: Path) -> str | None:
    """Why the tokenizers of two model folders differ (None: the same vocabulary, ids
    and special tokens), from their ``tokenizer.json``."""
    parts = []
    for folder in (model, draft):
        path = folder / "tokenizer.json"
        if not path.is_file():
            return f"{folder} has no tokenizer.json to compare"
        data = json.loads(path.read_text(encoding="utf-8"))
        vocab = data.get("model", {}).get("vocab")
        added = {t.get("content"): t.get("id") for t in data.get("added_tokens", [])}
        parts.append((data.get("model", {}).get("type"), vocab, added))
    (model_type, model_vocab, model_added), (draft_type, draft_vocab, draft_added) = parts
    if model_type != draft_type:
        return f"tokenizer types differ ({model_type} and {draft_type})"
    if model_vocab != draft_vocab:
        size = len(model_vocab or ()), len(draft_vocab or ())
        return f"vocabularies differ ({size[0]:,} and {size[1]:,} tokens)"
    if model_added != draft_added:
        return "special tokens differ"
    return None
