"""Models people already have, end to end: source x architecture x quant type -> loads,
max |logit difference|, an answer through the official openai SDK (issue 18's table).

Builds small random-weight models (``testsupport.synthetic``) of llama, mistral, qwen2,
qwen3, gemma3 and qwen3_moe, and puts them where each source keeps models, under one
temporary root: mlx-lm folders (float32, bfloat16, MLX 4-bit and 8-bit), a Hugging Face cache
laid out by hand (those folders, and a GGUF repo), GGUF files of ten quant types, an Ollama
store (a tag per quant type) and LM Studio's folder (MLX folders, GGUF folders). Then:

1. each combination is resolved and loaded the gateway's way (``gateway.wiring.resolve_model``:
   a GGUF is imported into the store; the weights form ``choose_weights`` picks on this
   machine; ``gateway.engines.weights.load_model``), and the logits of a fixed prompt are
   compared with a reference made without the gateway: the same folder loaded by mlx-lm, or
   for a quantized GGUF, gguf-py's dequantization of its tensors in mlx-lm's model class
   (``reference_weights``). The tokenizer must encode a sample text to the same ids;
2. ONE gateway (sharing the store, so nothing is imported twice) serves a tier per
   combination, and each answers a chat through the ``openai`` SDK (max_tokens 8, greedy);
3. ``gateway models list`` (the CLI, a subprocess) is timed over 50 of these models and over
   all of them, and a start on an uncached ``hf:`` model must fail at once naming
   ``gateway models pull``.

Run: .venv/bin/python ops/check_model_sources.py [--quick] [--json FILE] [--table FILE]
(--quick: one quant type per source). Exit status 1 when any row fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma3", "qwen3_moe")
QUANT_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_0", "Q5_K", "Q6_K", "F16", "BF16", "F32")
MLX_TYPES = ("MLX float32", "MLX bfloat16", "MLX 4-bit", "MLX 8-bit")
# One per source with --quick.
QUICK = {"folder": "MLX 4-bit", "hf": "MLX float32", "hf-gguf": "Q5_K", "gguf": "Q4_0"}
QUICK.update({"ollama": "Q4_K", "lmstudio": "MLX 8-bit", "lmstudio-gguf": "Q6_K"})
SOURCES = ("folder", "hf", "hf-gguf", "gguf", "ollama", "lmstudio", "lmstudio-gguf")
# How llama.cpp names the files (its K types come in _S/_M/_L mixes; ours are _M).
FILE_LABEL = {"Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
PROMPT = [[1, 504, 357, 282, 464, 314, 17, 216, 33, 2]]  # ids of the 1,024-token tokenizer
SAMPLE = "<|im_start|>user\nHello, world! 12345 café<|im_end|>\n<|im_start|>assistant\n"
EXACT = 1e-4  # where the weights moved over bit for bit (or were loaded as they are)
# Q6_K is re-quantized to MLX 8-bit (gateway.modelstore.gguf.quants): within 5 % of the scale.
REQUANTIZED_SHARE = 0.05


@dataclass
class Case:
    source: str  # a SOURCES entry ("hf-gguf": a GGUF repo in the HF cache)
    architecture: str
    quant: str  # a GGUF quant type or an MLX_TYPES entry
    ref: str  # the tier's model reference
    tier: str
    reference: tuple[str, str]  # ("mlx", folder) or ("gguf", file): what the logits should be
    config_folder: str  # the synthetic folder whose config the reference model takes
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def tolerance_share(self) -> float | None:
        return REQUANTIZED_SHARE if self.quant == "Q6_K" else None


def build_layout(root: Path, quick: bool) -> tuple[list[Case], dict[str, str], dict[str, Any]]:
    """Every model of every source under ``root``; returns the cases, the environment that
    points the sources there, and the paths of the 50-model subset for ``models list``."""
    from testsupport.synthetic import (
        default_tokenizer_folder,
        place_in_hf_cache,
        small_tokenizer,
        write_ollama_model,
    )
    from testsupport.synthetic_gguf import folder_dtype, write_gguf

    tokenizer = small_tokenizer(default_tokenizer_folder(), root / "tokenizer")
    hub, ollama_root, studio = root / "hub", root / "ollama", root / "lmstudio"
    env = {"HF_HUB_CACHE": str(hub), "OLLAMA_MODELS": str(ollama_root)}
    env.update(LMSTUDIO_MODELS=str(studio), HOME=str(root / "home"), HF_HUB_OFFLINE="1")
    cases: list[Case] = []
    subset: dict[str, Any] = {"hf": [], "ollama": [], "lmstudio": []}

    def wanted(source: str, quant: str) -> bool:
        return not quick or QUICK[source] == quant

    def add(source: str, arch: str, quant: str, ref: str, reference: tuple[str, str], cfg: Path):
        tier = f"{source}-{arch}-{quant.replace('MLX ', 'mlx-')}".lower()
        cases.append(Case(source, arch, quant, ref, tier, reference, str(cfg)))

    for arch in ARCHITECTURES:
        started = time.perf_counter()
        base = root / "built" / arch
        folder = _folder_builder(arch, base, tokenizer)

        mlx_folders = {
            "MLX float32": folder("float32"),
            "MLX bfloat16": folder("bfloat16"),
            "MLX 4-bit": folder("float32", bits=4),
            "MLX 8-bit": folder("float32", bits=8),
        }
        for quant, path in mlx_folders.items():
            slug = f"{arch}-tiny-{quant.split()[1]}".replace("float32", "f32")
            reference = ("mlx", str(path))
            if wanted("folder", quant):
                add("folder", arch, quant, str(path), reference, path)
            place_in_hf_cache(path, hub, f"synthetic/{slug}")
            if quant in ("MLX float32", "MLX 4-bit"):
                subset["hf"].append(f"synthetic/{slug}")
            if wanted("hf", quant):
                add("hf", arch, quant, f"hf:synthetic/{slug}", reference, path)
            shutil.copytree(path, studio / "mlx-community" / slug)
            if quant == "MLX 4-bit":
                subset["lmstudio"].append(f"mlx-community/{slug}")
            if wanted("lmstudio", quant):
                add("lmstudio", arch, quant, f"lmstudio:mlx-community/{slug}", reference, path)

        files = root / "files" / arch
        files.mkdir(parents=True)
        repo_name = f"{arch}-tiny-GGUF"
        for quant in QUANT_TYPES:
            source_folder = folder(folder_dtype(quant), k_quant=quant.endswith("_K"))
            label = FILE_LABEL.get(quant, quant)
            gguf = write_gguf(source_folder, files / f"{arch}-tiny-{label}.gguf", quant)
            float_type = quant in ("F32", "F16", "BF16")
            reference = ("mlx", str(source_folder)) if float_type else ("gguf", str(gguf))
            if wanted("gguf", quant):
                add("gguf", arch, quant, str(gguf), reference, source_folder)
            tag = label.lower()
            stop = {"stop": ["<|im_end|>"]}
            write_ollama_model(
                ollama_root, f"synthetic-{arch}", tag, gguf.read_bytes(), params=stop
            )
            if quant in ("Q4_0", "Q8_0", "Q4_K"):
                subset["ollama"].append((f"synthetic-{arch}", tag))
            if wanted("ollama", quant):
                add(
                    "ollama",
                    arch,
                    quant,
                    f"ollama:synthetic-{arch}:{tag}",
                    reference,
                    source_folder,
                )
            if wanted("hf-gguf", quant):
                add(
                    "hf-gguf",
                    arch,
                    quant,
                    f"hf:synthetic/{repo_name}:{label}",
                    reference,
                    source_folder,
                )
            studio_gguf = studio / "lmstudio-community" / repo_name
            studio_gguf.mkdir(parents=True, exist_ok=True)
            shutil.copy2(gguf, studio_gguf / gguf.name)
            if wanted("lmstudio-gguf", quant):
                ref = f"lmstudio:lmstudio-community/{repo_name}:{label}"
                add("lmstudio-gguf", arch, quant, ref, reference, source_folder)
        place_in_hf_cache(files, hub, f"synthetic/{repo_name}")
        subset["hf"].append(f"synthetic/{repo_name}")
        subset["lmstudio"].append(f"lmstudio-community/{repo_name}")
        print(f"  built {arch} in {time.perf_counter() - started:.1f} s", flush=True)
    return cases, env, subset


def _folder_builder(arch: str, base: Path, tokenizer: Path) -> Any:
    """``folder(dtype, k_quant, bits)``: the synthetic folder of ``arch``, built once."""
    from testsupport.synthetic import build_synthetic
    from testsupport.synthetic_gguf import gguf_spec

    folders: dict[str, Path] = {}

    def folder(dtype: str, k_quant: bool = False, bits: int | None = None) -> Path:
        key = f"{dtype}{'-k' if k_quant else ''}{f'-{bits}bit' if bits else ''}"
        if key not in folders:
            spec = gguf_spec(arch, dtype=dtype, k_quant=k_quant)
            if bits:
                spec = replace(spec, quantization={"group_size": 64, "bits": bits})
            folders[key] = build_synthetic(spec, base / key, tokenizer)
        return folders[key]

    return folder


def fifty_models(root: Path, env: dict[str, str], subset: dict[str, Any]) -> dict[str, str]:
    """50 models over every source, for ``models list``: 2 known ids, 18 in the HF cache
    (12 MLX, 6 GGUF repos of one file each), 18 Ollama tags, 12 LM Studio folders (6 MLX,
    6 GGUF of one file each). Links to the full layout's files; returns the environment."""
    from gateway.modelstore import hf_cache, ollama
    from testsupport.synthetic import place_in_hf_cache, write_ollama_model

    hub, ollama_root, studio = root / "hub", root / "ollama", root / "lmstudio"
    for repo_id in subset["hf"]:
        snapshot = hf_cache.snapshot_folder(Path(env["HF_HUB_CACHE"]), repo_id)
        if repo_id.endswith("-GGUF"):
            one = root / "one" / repo_id
            one.mkdir(parents=True)
            shutil.copy(sorted(snapshot.glob("*Q8_0.gguf"))[0], one)
            snapshot = one
        place_in_hf_cache(snapshot, hub, repo_id)
    for name, tag in subset["ollama"]:
        model = ollama.read_model(Path(env["OLLAMA_MODELS"]), name, tag)
        stop = {"stop": list(model.stop)}
        write_ollama_model(ollama_root, name, tag, model.gguf.read_bytes(), params=stop)
    for name in subset["lmstudio"]:
        source = Path(env["LMSTUDIO_MODELS"]) / name
        if name.endswith("-GGUF"):
            (studio / name).mkdir(parents=True)
            shutil.copy(sorted(source.glob("*Q4_K_M.gguf"))[0], studio / name)
        else:
            shutil.copytree(source, studio / name)
    return {**env, "HF_HUB_CACHE": str(hub), "OLLAMA_MODELS": str(ollama_root)} | {
        "LMSTUDIO_MODELS": str(studio)
    }


def _logits(model: Any) -> Any:
    import mlx.core as mx

    # On a CPU, MLX's gather_mm (MoE) takes float32 only: compare in float32 throughout.
    model.set_dtype(mx.float32)
    return model(mx.array(PROMPT)).astype(mx.float32)


def measure_logits(cases: list[Case], settings: Any, compute: Any) -> None:
    """Resolve, load and compare each case in-process, the gateway's way."""
    import mlx.core as mx
    from mlx_lm.utils import _get_classes, load_tokenizer
    from mlx_lm.utils import load_model as mlx_load_model

    from gateway.engines.footprint import model_bytes
    from gateway.engines.weights import choose_weights, load_model
    from gateway.wiring import resolve_model
    from testsupport.synthetic_gguf import reference_weights

    references: dict[tuple[str, str], tuple[Any, Any]] = {}
    expected_ids: list[int] | None = None
    for number, case in enumerate(cases, 1):
        row = case.result
        try:
            if case.reference not in references:
                kind, path = case.reference
                if kind == "mlx":
                    model, _ = mlx_load_model(Path(path))
                else:
                    config = json.loads((Path(case.config_folder) / "config.json").read_text())
                    model_class, args_class = _get_classes(config)
                    model = model_class(args_class.from_dict(config))
                    model.load_weights(list(reference_weights(Path(path), config).items()))
                want = _logits(model)
                mx.eval(want)
                references[case.reference] = (want, mx.abs(want).max().item())
                if expected_ids is None:
                    expected_ids = load_tokenizer(Path(case.config_folder)).encode(SAMPLE)
            want, scale = references[case.reference]
            started = time.perf_counter()
            resolved = resolve_model(settings, case.ref)
            row["resolve_s"] = time.perf_counter() - started
            choice = choose_weights(
                compute, model_bytes(resolved.folder), settings.memory_budget_bytes
            )
            started = time.perf_counter()
            model, tokenizer, _config = load_model(resolved.folder, choice.mode)
            row["load_s"] = time.perf_counter() - started
            got = _logits(model)
            row.update(
                loads=True,
                folder=str(resolved.folder),
                in_place=resolved.user_files,
                mode=choice.mode,
                delta=mx.abs(got - want).max().item(),
                scale=scale,
                tokens_match=tokenizer.encode(SAMPLE) == expected_ids,
            )
            if choice.mode != "quantized" and _is_quantized(resolved.folder):
                # The other form a quantized model takes (a Mac's, or a large model's here).
                model, _tok, _cfg = load_model(resolved.folder, "quantized")
                row["delta_quantized_mode"] = mx.abs(_logits(model) - want).max().item()
            share = case.tolerance_share
            limit = share * scale if share else EXACT
            if case.quant in ("MLX 4-bit", "MLX 8-bit"):
                # The reference runs MLX's quantized kernels, the gateway here dequantizes.
                limit = 1e-3 * max(scale, 1.0)
            row["tolerance"] = limit
            row["logits_ok"] = row["delta"] <= limit and row["tokens_match"]
        except Exception as exc:
            row.update(loads=False, logits_ok=False, error=f"{type(exc).__name__}: {exc}")
        if number % 25 == 0 or number == len(cases):
            print(f"  {number}/{len(cases)} loaded and compared", flush=True)


def _is_quantized(folder: Path) -> bool:
    return "quantization" in json.loads((folder / "config.json").read_text())


def ask_through_the_sdk(cases: list[Case], root: Path, config: dict[str, Any], env: dict[str, str]):
    """One gateway, a tier per case: a chat each through the openai SDK."""
    from testsupport.process import start_gateway

    started = time.perf_counter()
    try:
        gateway = start_gateway(root / "gateway", config, extra_env=env)
    except RuntimeError as exc:  # every row then says why
        reason = str(exc).strip().splitlines()[-1]
        for case in cases:
            case.result.update(answer={"error": f"no gateway: {reason}"}, answer_ok=False)
        return time.perf_counter() - started
    start_s = time.perf_counter() - started
    print(f"  gateway with {len(config['tiers'])} tiers answering after {start_s:.1f} s")
    try:
        client = gateway.openai(timeout=120)
        for number, case in enumerate(cases, 1):
            started = time.perf_counter()
            try:
                completion = client.chat.completions.create(
                    model=case.tier,
                    messages=[{"role": "user", "content": "Hello"}],
                    max_tokens=8,
                    temperature=0,
                )
                choice, usage = completion.choices[0], completion.usage
                case.result["answer"] = {
                    "finish_reason": choice.finish_reason,
                    "completion_tokens": usage.completion_tokens if usage else None,
                    "text": choice.message.content,
                    "seconds": time.perf_counter() - started,
                }
                case.result["answer_ok"] = (
                    choice.finish_reason in ("stop", "length")
                    and usage is not None
                    and usage.completion_tokens >= 1
                    and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
                )
            except Exception as exc:
                case.result["answer"] = {"error": f"{type(exc).__name__}: {exc}"}
                case.result["answer_ok"] = False
            if number % 25 == 0 or number == len(cases):
                print(f"  {number}/{len(cases)} answered", flush=True)
    finally:
        gateway.stop()
    return start_s


def time_models_list(config_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """``gateway models list --json`` as a user runs it (a subprocess), and in-process."""
    from gateway.config import load_settings
    from gateway.engines.device import choose_compute_path
    from gateway.modelstore.catalog import CatalogContext, build_catalog
    from gateway.modelstore.store import ModelStore

    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "HF_"))}
    full_env.update(env)
    command = [sys.executable, "-m", "gateway", "models", "list", "--json"]
    command += ["--config", str(config_path)]
    walls = []
    for _ in range(3):
        started = time.perf_counter()
        done = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=120)
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            return {"error": done.stderr[-2000:]}
    entries = json.loads(done.stdout)
    settings = load_settings(config_path)
    configured = {n: t.model for n, t in settings.tiers.items() if t.kind == "mlx"}
    context = CatalogContext(choose_compute_path(), settings.memory_budget_bytes)
    store = ModelStore(settings.cache_dir)
    started = time.perf_counter()
    in_process = build_catalog(store, context, configured, env)
    catalog_s = time.perf_counter() - started
    by_source: dict[str, int] = {}
    for entry in entries:
        by_source[entry["source"]] = by_source.get(entry["source"], 0) + 1
    return {
        "models": len(entries),
        "by_source": by_source,
        "errors": [e["id"] for e in entries if e.get("error")],
        "subprocess_s": walls,
        "in_process_s": catalog_s,
        "in_process_models": len(in_process),
    }


def uncached_hf_start(root: Path) -> dict[str, Any]:
    """Nothing is downloaded at serve time: a start on an uncached hf: id fails at once."""
    from testsupport.process import start_gateway

    model = "hf:mlx-community/Qwen3-8B-4bit"
    env = {"HF_HUB_CACHE": str(root / "empty-hub"), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    try:
        gateway = start_gateway(
            root / "uncached", {"tiers": {"big": {"kind": "mlx", "model": model}}}, extra_env=env
        )
    except RuntimeError as exc:
        message = str(exc)
        return {
            "seconds": time.perf_counter() - started,
            "names_pull": f"gateway models pull {model}" in message,
            "message": next((ln for ln in message.splitlines() if "pull" in ln), message[-300:]),
        }
    gateway.stop()
    return {"seconds": time.perf_counter() - started, "names_pull": False, "message": "started!"}


def row_ok(case: Case) -> bool:
    return bool(case.result.get("logits_ok") and case.result.get("answer_ok"))


def markdown(cases: list[Case]) -> list[str]:
    lines = [
        "| source | architecture | quant | loads | max \\|Δlogit\\| | SDK answer |",
        "|---|---|---|---|---|---|",
    ]
    for case in cases:
        row = case.result
        if row.get("loads"):
            loads = f"✓ ({row['mode']}{', imported' if not row['in_place'] else ''})"
            if not row["tokens_match"]:
                loads += " tokens differ ✗"
            mark = "✓" if row["logits_ok"] else "✗"
            delta = f"{row['delta']:.1e} {mark} (of {row['scale']:.0f})"
        else:
            loads, delta = f"✗ {row.get('error', '')[:120]}", "-"
        answer = row.get("answer", {})
        if row.get("answer_ok"):
            sdk = f"✓ {answer['finish_reason']}, {answer['completion_tokens']} tok"
        else:
            sdk = f"✗ {answer.get('error', answer.get('finish_reason', 'not asked'))}"[:140]
        lines.append(
            f"| {case.source} | {case.architecture} | {case.quant} | {loads} | {delta} | {sdk} |"
        )
    return lines


def pivot(cases: list[Case]) -> list[str]:
    """Architecture x quant: the largest difference over the sources, ✓ if every row passed."""
    quants = [q for q in (*MLX_TYPES, *QUANT_TYPES) if any(c.quant == q for c in cases)]
    lines = ["| architecture | " + " | ".join(quants) + " |", "|---" * (len(quants) + 1) + "|"]
    for arch in ARCHITECTURES:
        cells = []
        for quant in quants:
            group = [c for c in cases if c.architecture == arch and c.quant == quant]
            if not group:
                cells.append("")
                continue
            deltas = [c.result["delta"] for c in group if "delta" in c.result]
            worst = f"{max(deltas):.0e}" if deltas else "-"
            ok = all(row_ok(c) for c in group)
            cells.append(f"{'✓' if ok else '✗'} {worst} ({len(group)})")
        lines.append(f"| {arch} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one quant type per source")
    parser.add_argument("--json", type=Path, help="write every row and measurement here")
    parser.add_argument("--table", type=Path, help="write the Markdown tables here")
    parser.add_argument("--keep", type=Path, help="build under this folder and keep it")
    args = parser.parse_args()

    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported
    from gateway.config import Settings
    from testsupport.process import write_toml

    began = time.perf_counter()
    scratch = None if args.keep else tempfile.TemporaryDirectory(prefix="check-model-sources-")
    root = args.keep or Path(scratch.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    try:
        print(f"building synthetic models under {root}", flush=True)
        cases, env, subset = build_layout(root / "machine", args.quick)
        os.environ.update(env)  # the gateway's resolver reads the sources' variables
        config = {
            "cache_dir": str(root / "store"),
            "memory_budget_bytes": 16 * 1024**3,
            "tiers": {
                c.tier: {"kind": "mlx", "model": c.ref, "keep_alive_seconds": 1} for c in cases
            },
        }
        settings = Settings.model_validate(config)
        print(f"{len(cases)} combinations: resolve, load, compare logits", flush=True)
        measure_logits(cases, settings, compute)
        logits_s = time.perf_counter() - began
        print("one gateway, a tier each: a chat through the openai SDK", flush=True)
        gateway_start_s = ask_through_the_sdk(cases, root, config, env)
        config_path = root / "gateway" / "gateway.toml"
        print("gateway models list: all, then 50", flush=True)
        listing_all = time_models_list(config_path, env)
        fifty_env = fifty_models(root / "fifty", env, subset)
        empty = root / "fifty" / "gateway.toml"
        write_toml(empty, {"cache_dir": str(root / "fifty" / "store")})
        listing_fifty = time_models_list(empty, fifty_env)
        print("a start on an uncached hf: model", flush=True)
        uncached = uncached_hf_start(root)
    finally:
        if scratch is not None:
            scratch.cleanup()
    total_s = time.perf_counter() - began

    table = markdown(cases)
    summary_pivot = pivot(cases)
    failed = [c for c in cases if not row_ok(c)]
    loads = sum(1 for c in cases if c.result.get("loads"))
    answered = sum(1 for c in cases if c.result.get("answer_ok"))
    exact = [c for c in cases if c.result.get("loads") and c.tolerance_share is None]
    quantized_mode = [
        c.result["delta_quantized_mode"]
        for c in cases
        if "delta_quantized_mode" in c.result and c.quant != "Q6_K"
    ]
    summary = [
        f"{len(cases)} combinations ({len(set(c.source for c in cases))} sources x "
        f"{len(ARCHITECTURES)} architectures x quant types): {loads} load, "
        f"{sum(1 for c in cases if c.result.get('logits_ok'))} match their reference, "
        f"{answered} answered through the SDK; {len(failed)} failed.",
        f"max |Δlogit| where exact: {max((c.result['delta'] for c in exact), default=0):.1e} "
        f"(tolerance {EXACT:g}; MLX 4/8-bit folders 1e-3 x scale); Q6_K (re-quantized to MLX "
        f"8-bit): worst {max((c.result['delta'] / c.result['scale'] for c in cases if c.quant == 'Q6_K' and 'delta' in c.result), default=0):.2%} "
        f"of the logit scale (tolerance {REQUANTIZED_SHARE:.0%}).",
    ]
    if quantized_mode:
        summary.append(
            f"the same quantized models held quantized (float32 activations, the other form "
            f"the gateway uses): max |Δlogit| {max(quantized_mode):.1e} over "
            f"{len(quantized_mode)} rows (Q6_K aside)."
        )
    summary.append(
        f"gateway with {len(cases)} tiers started in {gateway_start_s:.1f} s; "
        f"whole run {total_s:.0f} s (logits {logits_s:.0f} s)."
    )
    for name, listing in (("50 models", listing_fifty), ("all models", listing_all)):
        if "error" in listing:
            summary.append(f"gateway models list ({name}): failed: {listing['error']}")
            continue
        summary.append(
            f"gateway models list --json ({name}: {listing['models']} listed, "
            f"{json.dumps(listing['by_source'])}, {len(listing['errors'])} errors): subprocess "
            f"{min(listing['subprocess_s']):.2f}-{max(listing['subprocess_s']):.2f} s wall, "
            f"catalog in-process {listing['in_process_s'] * 1000:.0f} ms."
        )
    summary.append(
        f"uncached hf: start failed after {uncached['seconds']:.1f} s, naming `gateway models "
        f"pull`: {'yes' if uncached['names_pull'] else 'NO'} ({uncached['message'].strip()})"
    )
    text = "\n".join(
        [
            "## Model sources: source x architecture x quant type",
            "",
            *table,
            "",
            "### By architecture x quant type (worst |Δlogit| over the sources, rows)",
            "",
            *summary_pivot,
            "",
            *(f"- {line}" for line in summary),
            "",
        ]
    )
    print(text)
    if args.table:
        args.table.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [
                        {
                            "source": c.source,
                            "architecture": c.architecture,
                            "quant": c.quant,
                            "model": c.ref,
                            **c.result,
                        }
                        for c in cases
                    ],
                    "models_list": {"fifty": listing_fifty, "all": listing_all},
                    "uncached_hf": uncached,
                    "gateway_start_s": gateway_start_s,
                    "total_s": total_s,
                    "compute": compute.as_dict(),
                },
                indent=2,
            )
        )
    ok = (
        not failed
        and uncached["names_pull"]
        and all(
            "error" not in listing and min(listing["subprocess_s"]) <= 1.0
            for listing in (listing_fifty,)
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
