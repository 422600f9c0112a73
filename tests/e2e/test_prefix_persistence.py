"""Prefix KV caches saved to disk: a warm system prompt survives a restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from testsupport.process import start_gateway

SYSTEM = "You are the reference librarian of a maritime museum. " * 12
HISTORY = [{"role": "system", "content": SYSTEM}]


def ask(base_url: str, question: str) -> dict[str, object]:
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [*HISTORY, {"role": "user", "content": question}],
        "max_tokens": 2,
        "temperature": 0,
    }
    answer = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["usage"]  # type: ignore[no-any-return]


def cache_command(workdir: Path, *args: str) -> str:
    config = workdir / "gateway.toml"
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "cache", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_a_restart_keeps_the_system_prompt_warm(tmp_path: Path) -> None:
    workdir = tmp_path / "node"
    first = start_gateway(workdir)
    try:
        # A typing hint warms the system prompt; complete, it is also saved to disk.
        hint = httpx.post(
            f"{first.base_url}/v1/typing",
            json={"model": "smollm2-135m-instruct", "messages": HISTORY},
        ).json()
        cold = ask(first.base_url, "Which ships do you have?")
        assert httpx.get(f"{first.base_url}/v1/typing/{hint['id']}").json()["state"] == "used"
    finally:
        first.stop()
    listing = cache_command(workdir, "list")
    assert "smollm2-135m-instruct" in listing and "saved prefix caches" in listing

    second = start_gateway(workdir)
    try:
        warm = ask(second.base_url, "Do you have maps of the Baltic?")
    finally:
        second.stop()
    system_tokens = cold["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    assert system_tokens > 100  # the hint covered the system prompt
    assert warm["prompt_tokens_details"]["cached_tokens"] >= system_tokens  # type: ignore[index]
    assert "loaded from disk" in second.log()

    # A damaged file is ignored with a log line; the gateway answers as if it were absent.
    saved = sorted((workdir / "prefix-cache").rglob("*.safetensors"))
    assert saved
    for path in saved:
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 3])
    third = start_gateway(workdir)
    try:
        after = ask(third.base_url, "Do you have maps of the Baltic?")
    finally:
        third.stop()
    assert after["prompt_tokens_details"]["cached_tokens"] == 0  # type: ignore[index]
    assert "ignored" in third.log()
    assert "removed" in cache_command(workdir, "clear")
    assert "0 saved prefix caches" in cache_command(workdir, "list")


# A system prompt of 800+ tokens (issue 23): a different conversation after a restart reuses it.
LONG_SYSTEM = " ".join(
    f"Rule {n}: when a visitor asks about item {n} of the collection, answer briefly, cite the "
    f"catalogue number MM-{n:04d}, and mention which gallery holds it."
    for n in range(1, 31)
)


def system_tokens(system: str) -> int:
    """Tokens of the system message as the template renders it (its turn, closed)."""
    from transformers import AutoTokenizer

    from gateway.config import default_cache_dir
    from gateway.modelstore.store import ModelStore

    folder = ModelStore(default_cache_dir()).ensure("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}], add_generation_prompt=False, tokenize=False
    )
    return len(tokenizer.encode(rendered, add_special_tokens=False))


def chat(base_url: str, system: str, question: str) -> dict[str, object]:
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
        "max_tokens": 4,
        "temperature": 0,
    }
    answer = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["usage"]  # type: ignore[no-any-return]


def test_a_restart_warms_the_system_prompt_of_a_different_conversation(tmp_path: Path) -> None:
    needed = system_tokens(LONG_SYSTEM)
    assert needed >= 800
    workdir = tmp_path / "node"
    first = start_gateway(workdir)
    try:  # no typing hint: only the conversation's own cache, saved at SIGTERM
        chat(first.base_url, LONG_SYSTEM, "Which ships do you have?")
    finally:
        first.stop()
    second = start_gateway(workdir)
    try:
        warm = chat(second.base_url, LONG_SYSTEM, "Do you have maps of the Baltic?")
    finally:
        second.stop()
    cached = warm["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    print(f"system prompt {needed} tokens; cached after the restart: {cached}")
    assert cached >= needed
    # The end of the system message was saved as an entry of its own, beside the conversation.
    sizes = [int(line.split()[2]) for line in cache_command(workdir, "list").splitlines()[:-1]]
    assert needed - 1 <= min(sizes) <= needed + 1
