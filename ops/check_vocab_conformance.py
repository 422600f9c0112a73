"""Issue 31's tokenizer conformance table: llama.cpp's own vocabulary tests, run on the gateway.

For every ``ggml-vocab-*.gguf`` of the llama-cpp-python sdist (``make real-models``), the
gateway's GGUF tokenizer (``gateway.modelstore.gguf.tokenizer.build_tokenizer``, what an import
writes) encodes every text of its ``.inp`` file as llama.cpp's ``test-tokenizer-0`` does (no
BOS/EOS added, special tokens not parsed from text) and is compared with the ``.out`` ids,
which llama.cpp's own tokenizer produced. A vocabulary the gateway refuses must be refused by
name. Writes ``ops/results/<date>-vocab-conformance.{json,md}``.

    .venv/bin/python ops/check_vocab_conformance.py [--out ops/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.modelstore.gguf.reader import read_gguf
from gateway.modelstore.gguf.tokenizer import build_tokenizer

SEPARATOR = "\n__ggml_vocab_test__\n"


def real_root() -> Path:
    env = os.environ.get("ONEMAC_REAL_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "onemac-gateway" / "real"


def read_cases(gguf: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's ``read_tests``: texts split on the separator, one line of ids per text."""
    inp, out = Path(f"{gguf}.inp"), Path(f"{gguf}.out")
    if not inp.exists() or not out.exists():
        return []
    raw = inp.read_bytes().decode("utf-8", errors="surrogateescape")
    texts = raw.split(SEPARATOR)
    if texts and texts[-1] == "":  # a separator at the very end leaves no test behind it
        texts.pop()
    lines = out.read_text().splitlines()
    if len(texts) != len(lines):
        raise ValueError(f"{gguf.name}: {len(texts)} texts but {len(lines)} lines of ids")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines, strict=True)]


def check(gguf: Path) -> dict[str, Any]:
    started = time.perf_counter()
    header = read_gguf(gguf)
    meta = header.metadata
    row: dict[str, Any] = {
        "vocabulary": gguf.name.removeprefix("ggml-vocab-").removesuffix(".gguf"),
        "model": meta.get("tokenizer.ggml.model"),
        "pre": meta.get("tokenizer.ggml.pre"),
        "tokens": len(meta.get("tokenizer.ggml.tokens") or []),
    }
    cases = read_cases(gguf)
    row["cases"] = len(cases)
    try:
        tokenizer = build_tokenizer(meta)
    except ValueError as error:
        row.update(result="refused", identical=0, error=str(error))
        return row
    identical, mismatches = 0, []
    for text, expected in cases:
        text = text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
        got = tokenizer.encode(text, add_special_tokens=False)
        if got == expected:
            identical += 1
        elif len(mismatches) < 5:
            mismatches.append({"text": text, "expected": expected, "got": got})
    result = "identical" if identical == len(cases) else "differs"
    row.update(
        result=result if cases else "no cases in the sdist (the tokenizer builds)",
        identical=identical,
        mismatches=mismatches,
        seconds=round(time.perf_counter() - started, 2),
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON and md")
    parser.add_argument("--only", default=None, help="one vocabulary (e.g. qwen2)")
    args = parser.parse_args()
    folder = real_root() / "llama.cpp" / "vocab"
    files = sorted(folder.glob("ggml-vocab-*.gguf"))
    if not files:
        print(f"no vocabularies in {folder}: run `make real-models`", file=sys.stderr)
        return 2
    rows = []
    for gguf in files:
        if args.only and gguf.name != f"ggml-vocab-{args.only}.gguf":
            continue
        row = check(gguf)
        rows.append(row)
        note = row.get("error") or (row["mismatches"][0] if row.get("mismatches") else "")
        print(
            f"{row['vocabulary']:18} {row['model']!s:7} {row['pre']!s:15} "
            f"{row['identical']:>3}/{row['cases']:<3} {row['result']:9} {str(note)[:150]}"
        )
    if args.out:
        stamp = datetime.date.today().isoformat()
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stamp}-vocab-conformance.json").write_text(json.dumps(rows, indent=1))
        lines = [
            "# llama.cpp's vocabulary tests on the gateway's GGUF tokenizer",
            "",
            "`ops/check_vocab_conformance.py`; fixtures: llama-cpp-python 0.3.36 sdist,",
            "`vendor/llama.cpp/models/ggml-vocab-*.gguf` with their `.inp`/`.out` files.",
            "",
            "| vocabulary | tokenizer | pre-tokenizer | cases | identical | result |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            result = r["result"] if r["result"] != "refused" else f"refused: {r['error']}"
            lines.append(
                f"| {r['vocabulary']} | {r['model']} | {r['pre']} | {r['cases']} "
                f"| {r['identical']} | {result} |"
            )
        (args.out / f"{stamp}-vocab-conformance.md").write_text("\n".join(lines) + "\n")
    bad = [r for r in rows if r["result"] == "differs"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
