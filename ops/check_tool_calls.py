"""Tool calls are always valid: varied prompts, greedy and sampled, every call checked.

Starts a gateway on the embedded model and asks the unmodified ``openai`` SDK for tool calls
(``required``, a named function, and ``auto``) over the prompts of the end-to-end test, at
temperature 0 and at temperature 1 with fixed seeds; validates every call's arguments against
its function's schema with jsonschema and prints the counts.
Run: .venv/bin/python ops/check_tool_calls.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.test_tool_calls import CLOCK, PROMPTS, WEATHER
from testsupport.process import start_gateway

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}  # type: ignore[index]
CHOICES: list[object] = ["required", {"type": "function", "function": {"name": "get_time"}}, "auto"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    args = parser.parse_args()
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as workdir:
        gateway = start_gateway(Path(workdir))
        try:
            client = gateway.openai(timeout=120)
            for temperature in args.temperatures:
                for choice in CHOICES:
                    for seed, prompt in enumerate(PROMPTS):
                        reply = client.chat.completions.create(
                            model="smollm2-135m-instruct",
                            messages=[{"role": "user", "content": prompt}],
                            tools=[WEATHER, CLOCK],  # type: ignore[list-item]
                            tool_choice=choice,  # type: ignore[arg-type]
                            temperature=temperature,
                            seed=seed,
                            max_tokens=120,
                        ).choices[0]
                        key = f"t={temperature} {json.dumps(choice)}"
                        print(
                            key,
                            reply.finish_reason,
                            [c.function.arguments for c in reply.message.tool_calls or []],
                            flush=True,
                        )
                        if not reply.message.tool_calls:
                            counts[f"{key} text ({reply.finish_reason})"] += 1
                            continue
                        for call in reply.message.tool_calls:
                            try:
                                arguments = json.loads(call.function.arguments)
                                jsonschema.validate(arguments, SCHEMAS[call.function.name])
                                counts[f"{key} valid call"] += 1
                            except (ValueError, jsonschema.ValidationError, KeyError):
                                counts[f"{key} INVALID call ({reply.finish_reason})"] += 1
        finally:
            gateway.stop()
    for key, count in sorted(counts.items()):
        print(f"{count:4d}  {key}")


if __name__ == "__main__":
    main()
