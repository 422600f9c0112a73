"""Issue 31's reference comparison: the gateway's import of a real GGUF against transformers'
own GGUF loader on the same file (an independent reader and dequantizer, PyTorch float32).

For 5 chat prompts: the prompt's token ids from each side's tokenizer, the first-token logits
(max |difference|, top-1/top-5 agreement, KL divergence), and 48 greedy tokens. The gateway's
side is the model as the gateway serves it on this machine (``weights.load_model``, float32
on a Linux CPU), computed in-process with mlx-lm's cache; the reference side runs in another
virtualenv that has PyTorch (the gateway's does not), e.g.::

    python -m venv .cache/ref-venv
    .cache/ref-venv/bin/pip install torch==2.13.0 transformers==5.25.0 gguf==0.19.0 numpy accelerate
    .venv/bin/python ops/compare_reference.py ~/.cache/onemac-gateway/real/<model>.gguf \
        --reference-python .cache/ref-venv/bin/python --json ops/results/<name>.json

Where the two differ, the import record says why it may: the GGUF's Q6_K tensors are
re-quantized to MLX 8-bit (groups whose two halves share no integer grid), every other type is
repacked bit-exactly; summation order differs between MLX and PyTorch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that returns the factorial of n.",
    "Explain recursion to a child in two sentences.",
    "Translate 'good morning, my friend' into French and Spanish.",
    "List three primary colors, one per line.",
]
STEPS = 48


def reference_side(gguf: Path, prompts: list[list[int]], out: Path) -> None:
    """transformers' GGUF loader (run in the reference virtualenv)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    model.eval()
    loaded = time.perf_counter() - started
    results = []
    for index, ids in enumerate(prompts):
        text = PROMPTS[index]
        own = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        own_ids = list(own["input_ids"] if hasattr(own, "keys") else own)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float().numpy()
            generated = model.generate(
                torch.tensor([ids]),
                max_new_tokens=STEPS,
                do_sample=False,
                eos_token_id=[tokenizer.eos_token_id, *_im_end(tokenizer)],
                pad_token_id=tokenizer.eos_token_id,
            )[0, len(ids) :].tolist()
        np.save(out / f"reference-{index}.npy", logits)
        results.append({"prompt_ids": own_ids, "tokens": generated})
    (out / "reference.json").write_text(json.dumps({"load_s": loaded, "prompts": results}))


def _im_end(tokenizer: Any) -> list[int]:
    token = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [token] if isinstance(token, int) and token >= 0 else []


def exact_requantized(model: Any, gguf: Path) -> int:
    """Put gguf-py's own float32 values into every weight the import re-quantized (Q6_K and
    below): what is left of a difference is then the rest (repacked bit-exactly) and the
    order of summation. Returns how many tensors were replaced."""
    import mlx.core as mx
    from mlx.utils import tree_unflatten

    from gateway.modelstore.gguf.architectures import SUPPORTED_ARCHITECTURES
    from gateway.modelstore.gguf.convert import _EXACT_TYPES, _dequantize
    from gateway.modelstore.gguf.quants import FLOAT_TYPES
    from gateway.modelstore.gguf.reader import read_gguf

    header = read_gguf(gguf)
    arch = SUPPORTED_ARCHITECTURES[str(header.metadata["general.architecture"])]
    replaced = []
    for tensor in header.tensors:
        if tensor.type_name in FLOAT_TYPES or tensor.type_name in _EXACT_TYPES:
            continue
        name = arch.mlx_name(tensor.name)
        if name is not None:
            replaced.append((name, mx.array(_dequantize(header, tensor))))
    model.update(tree_unflatten(replaced))
    mx.eval(model.parameters())
    return len(replaced)


def gateway_side(
    folder: Path, prompts: list[list[int]], eos: set[int], out: Path, exact_from: Path | None
) -> float:
    from gateway.engines.device import choose_compute_path

    choose_compute_path()
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from gateway.engines.weights import load_model

    started = time.perf_counter()
    model, _tokenizer, _config = load_model(folder, "float32")
    loaded = time.perf_counter() - started
    if exact_from is not None:
        exact_requantized(model, exact_from)
    results: list[dict[str, Any]] = []
    for index, ids in enumerate(prompts):
        cache = make_prompt_cache(model)
        logits = model(mx.array(ids)[None], cache=cache)[0, -1].astype(mx.float32)
        np.save(out / f"gateway-{index}.npy", np.array(logits))
        if exact_from is not None:
            continue  # the first token's logits only
        tokens: list[int] = []
        token = int(mx.argmax(logits).item())
        while len(tokens) < STEPS:
            tokens.append(token)
            if token in eos:
                break
            logits = model(mx.array([[token]]), cache=cache)[0, -1]
            token = int(mx.argmax(logits).item())
        results.append({"tokens": tokens})
    (out / "gateway.json").write_text(json.dumps({"prompts": results}))
    return loaded


def import_folder(gguf: Path, cache: Path) -> Path:
    """The gateway's own import of ``gguf`` (``gateway models import``), reused when there."""
    config = cache / "gateway.toml"
    cache.mkdir(parents=True, exist_ok=True)
    config.write_text(f'cache_dir = "{cache}"\n')
    subprocess.run(
        [sys.executable, "-m", "gateway", "models", "import", "--config", str(config), str(gguf)],
        check=True,
    )
    (folder,) = [p for p in (cache / "models").iterdir() if p.name.startswith("gguf--")]
    return folder


def compare_logits(ours: np.ndarray, theirs: np.ndarray) -> dict[str, Any]:
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) - x.max()
        return x - np.log(np.exp(x).sum())

    p, q = log_softmax(theirs), log_softmax(ours)
    top5 = set(np.argsort(-ours)[:5].tolist()), set(np.argsort(-theirs)[:5].tolist())
    return {
        "max_abs_diff": float(np.abs(ours - theirs).max()),
        "mean_abs_diff": float(np.abs(ours - theirs).mean()),
        "top1_same": int(ours.argmax()) == int(theirs.argmax()),
        "top5_overlap": len(top5[0] & top5[1]),
        "kl_reference_to_gateway": float((np.exp(p) * (p - q)).sum()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--reference-python", required=True, help="a Python with torch")
    parser.add_argument("--cache", type=Path, default=Path(".cache/compare"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--reference-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    gguf = args.gguf.expanduser().resolve()
    if args.reference_only is not None:  # the reference virtualenv's half
        prompts = json.loads((args.reference_only / "prompts.json").read_text())
        reference_side(gguf, prompts, args.reference_only)
        return 0
    folder = import_folder(gguf, args.cache.resolve() / gguf.stem)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompts = [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )["input_ids"]
        )
        for text in PROMPTS
    ]
    config = json.loads((folder / "config.json").read_text())
    eos_ids = config.get("eos_token_id")
    eos = set(eos_ids if isinstance(eos_ids, list) else [eos_ids])
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "prompts.json").write_text(json.dumps(prompts))
        started = time.perf_counter()
        subprocess.run(
            [
                args.reference_python,
                __file__,
                str(gguf),
                "--reference-python",
                "-",
                "--reference-only",
                str(work),
            ],
            check=True,
        )
        reference_s = time.perf_counter() - started
        exact = work / "exact"
        exact.mkdir()
        gateway_side(folder, prompts, eos, exact, exact_from=gguf)
        gateway_load = gateway_side(folder, prompts, eos, work, exact_from=None)
        theirs = json.loads((work / "reference.json").read_text())
        ours = json.loads((work / "gateway.json").read_text())
        rows = []
        for index, text in enumerate(PROMPTS):
            a, b = ours["prompts"][index]["tokens"], theirs["prompts"][index]["tokens"]
            same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            rows.append(
                {
                    "prompt": text,
                    "prompt_tokens": len(prompts[index]),
                    "prompt_ids_identical": prompts[index]
                    == theirs["prompts"][index]["prompt_ids"],
                    "greedy_identical": a == b,
                    "first_difference_at": same,
                    "gateway_text": tokenizer.decode(a),
                    "reference_text": tokenizer.decode(b),
                    "first_token_logits": compare_logits(
                        np.load(work / f"gateway-{index}.npy"),
                        np.load(work / f"reference-{index}.npy"),
                    ),
                    # the same with the re-quantized (Q6_K) weights at gguf-py's exact values
                    "first_token_logits_requantized_exact": compare_logits(
                        np.load(exact / f"gateway-{index}.npy"),
                        np.load(work / f"reference-{index}.npy"),
                    ),
                }
            )
    record = json.loads((folder / "gateway-import.json").read_text())["import"]
    result = {
        "gguf": gguf.name,
        "gguf_bytes": gguf.stat().st_size,
        "reference": "transformers 5.25.0 GGUF loader (gguf-py dequantization), torch float32",
        "gateway": "the gateway's import (MLX affine), float32 weights as served on a Linux CPU",
        "gateway_load_s": round(gateway_load, 1),
        "reference_total_s": round(reference_s, 1),
        "greedy_identical": sum(r["greedy_identical"] for r in rows),
        "prompts": rows,
        "import_types": {
            kind: {k: v for k, v in entry.items() if k != "requantized"}
            for kind, entry in record["types"].items()
        },
    }
    print(json.dumps({k: v for k, v in result.items() if k != "prompts"}, indent=1))
    for row in rows:
        logits = row["first_token_logits"]
        print(
            f"{row['greedy_identical']!s:5} first diff {row['first_difference_at']!s:4} "
            f"max|dlogit| {logits['max_abs_diff']:.4f} KL {logits['kl_reference_to_gateway']:.2e} "
            f"(Q6_K exact: {row['first_token_logits_requantized_exact']['max_abs_diff']:.4f}) "
            f"ids same {row['prompt_ids_identical']}  {row['prompt'][:40]}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    if "--reference-only" not in sys.argv:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
