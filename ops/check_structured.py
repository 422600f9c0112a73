"""Structured output is always valid: >= 50 task runs and >= 50 response_format schemas.

Starts a gateway on the embedded model, runs the JSON task types (extract_profile, audit)
over varied inputs and chat completions over varied JSON schemas and prompts (enums, nested
objects, arrays, bounded numbers, required and optional fields), validates every output with
jsonschema and prints the counts. Run: .venv/bin/python ops/check_structured.py [--n 50]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testsupport.process import start_gateway

NAMES = ["Marco", "Aiko", "Sam", "Lena", "Omar", "Priya", "Jonas", "Chen", "Ana", "Tom"]
CITIES = ["Naples", "Osaka", "Leeds", "Lyon", "Cairo", "Pune", "Bergen", "Xian", "Porto", "Austin"]
JOBS = ["baker", "teacher", "nurse", "pilot", "student", "plumber", "chef", "lawyer"]
HOBBIES = ["football", "opera", "chess", "hiking", "painting", "jazz", "cycling", "baking"]
ANSWERS = [
    "The capital of France is Berlin!!!",
    "Water boils at 100 C at sea level.",
    "yes",
    "Two plus two is four. Four! FOUR!",
    "The sun rises in the east and sets in the west, every single day, always.",
    "I think maybe the answer could possibly be 12, but I am not sure.",
]
RULES = [
    "1. Be factually correct.\n2. No exclamation marks.",
    "1. Answer in one sentence.\n2. Be polite.",
    "1. Be brief.\n2. Do not hedge.\n3. Use numbers as digits.",
    "1. Do not use capital letters only.\n2. Mention a unit.",
    "1. Never say you are unsure.",
]
TOPICS = ["Paris", "a cat", "the moon", "a bicycle", "coffee", "a library", "the sea"]


def profile_texts(n: int, rng: random.Random) -> list[str]:
    texts = []
    for _ in range(n):
        parts = [f"I am {rng.choice(NAMES)}", f"{rng.randint(16, 80)} years old"]
        rng.shuffle(parts)
        text = ", ".join(parts)
        if rng.random() < 0.7:
            text += f", a {rng.choice(JOBS)} from {rng.choice(CITIES)}"
        if rng.random() < 0.7:
            text += f". I like {rng.choice(HOBBIES)} and {rng.choice(HOBBIES)}"
        texts.append(text + ".")
    return texts


def schemas(n: int, rng: random.Random) -> list[dict[str, Any]]:
    pieces: list[tuple[str, dict[str, Any]]] = [
        ("name", {"type": "string", "maxLength": 40}),
        ("colour", {"enum": ["red", "green", "blue", "black"]}),
        ("score", {"type": "number", "minimum": 0, "maximum": 10}),
        ("count", {"type": "integer", "minimum": 1, "maximum": 99}),
        (
            "tags",
            {
                "type": "array",
                "items": {"type": "string", "maxLength": 20},
                "minItems": 1,
                "maxItems": 3,
            },
        ),
        ("ok", {"type": "boolean"}),
        (
            "owner",
            {
                "type": "object",
                "properties": {
                    "first": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                },
                "required": ["first"],
            },
        ),
        ("mood", {"enum": ["happy", "sad", "neutral"]}),
        (
            "points",
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                    "required": ["x", "y"],
                },
                "maxItems": 2,
            },
        ),
        ("note", {"type": ["string", "null"], "maxLength": 60}),
    ]
    out = []
    for _ in range(n):
        chosen = rng.sample(pieces, rng.randint(1, 4))
        properties = dict(chosen)
        required = [k for k in properties if rng.random() < 0.6] or [next(iter(properties))]
        out.append({"type": "object", "properties": properties, "required": required})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--schemas-only", action="store_true", help="skip the task runs")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    gateway = start_gateway(Path(tempfile.mkdtemp(prefix="check-structured-")))
    counts = {
        "task_runs": 0,
        "task_valid": 0,
        "task_length": 0,
        "schema_runs": 0,
        "schema_valid": 0,
        "schema_length": 0,
    }
    failures: list[str] = []
    started = time.perf_counter()
    try:
        http = httpx.Client(base_url=gateway.base_url, timeout=600)
        task_schema = {
            t: http.get(f"/v1/tasks/{t}").json()["output_schema"]
            for t in ("extract_profile", "audit")
        }
        runs: list[tuple[str, dict[str, str]]] = [
            ("extract_profile", {"text": t}) for t in profile_texts(args.n // 2, rng)
        ]
        audits = list(itertools.product(ANSWERS, RULES))
        rng.shuffle(audits)
        runs += [("audit", {"answer": a, "rules": r}) for a, r in audits[: args.n - len(runs)]]
        if args.schemas_only:
            runs = []
        for task, task_args in runs:
            result = http.post(f"/v1/tasks/{task}", json={"args": task_args}).json()
            counts["task_runs"] += 1
            if result.get("finish_reason") == "length":
                counts["task_length"] += 1
                continue
            try:
                jsonschema.validate(result["output"], task_schema[task])
                counts["task_valid"] += 1
            except (jsonschema.ValidationError, KeyError) as exc:
                failures.append(f"{task} {task_args}: {exc}")
        for schema in schemas(args.n, rng):
            topic = rng.choice(TOPICS)
            body = {
                "model": "smollm2-135m-instruct",
                "messages": [{"role": "user", "content": f"Describe {topic} as JSON."}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "out", "schema": schema},
                },
                "max_tokens": 400,
                "temperature": rng.choice([0.0, 0.7, 1.0]),
                "seed": rng.randint(0, 10_000),
            }
            reply = http.post("/v1/chat/completions", json=body).json()
            counts["schema_runs"] += 1
            choice = reply["choices"][0]
            if choice["finish_reason"] == "length":
                counts["schema_length"] += 1
                print("LENGTH:", json.dumps(schema), repr(choice["message"]["content"][-120:]))
                continue
            try:
                jsonschema.validate(json.loads(choice["message"]["content"]), schema)
                counts["schema_valid"] += 1
            except (ValueError, jsonschema.ValidationError) as exc:
                failures.append(f"schema {json.dumps(schema)}: {exc}")
    finally:
        gateway.stop()
    counts["seconds"] = round(time.perf_counter() - started)
    print(json.dumps(counts, indent=2))
    for failure in failures:
        print("INVALID:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
