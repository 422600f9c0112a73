"""A terminal chat that posts typing hints as you type, the way an editor plugin would.

    python ops/examples/typing_client.py [--url http://127.0.0.1:8000] [--no-hints]

On the first keystroke of a message it posts ``POST /v1/typing`` with the conversation so
far; at every space it posts a newer hint of the same session with the draft (a progressive
hint). On Enter it sends the chat request and prints the time to first token and how many
prompt tokens came from the cache. Run it once with ``--no-hints`` to feel the difference
on a long conversation. Ctrl-D or an empty line quits.
"""

from __future__ import annotations

import argparse
import json
import sys
import termios
import time
import tty
import uuid

import httpx

SYSTEM = "You are a friendly assistant. Answer in two or three sentences."


def read_line(
    client: httpx.Client, history: list[dict[str, str]], session: str, hints: bool
) -> str | None:
    """Read one line character by character, posting hints as it grows."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    text = ""
    try:
        tty.setcbreak(fd)
        while True:
            char = sys.stdin.read(1)
            if char in ("", "\x04"):
                return None
            if char in ("\r", "\n"):
                sys.stdout.write("\n")
                return text
            if char in ("\x7f", "\b"):
                if text:
                    text = text[:-1]
                    sys.stdout.write("\b \b")
            else:
                text += char
                sys.stdout.write(char)
            sys.stdout.flush()
            if hints and (len(text) == 1 or char == " "):
                body = {"messages": history, "session": session, "draft": text}
                client.post("/v1/typing", json=body)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def ask(client: httpx.Client, history: list[dict[str, str]], session: str) -> str:
    body = {
        "model": "smollm2-135m-instruct",
        "messages": history,
        "stream": True,
        "stream_options": {"include_usage": True},
        "session": session,
        "max_tokens": 200,
    }
    started = time.perf_counter()
    first = None
    parts: list[str] = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
                total = chunk["usage"]["prompt_tokens"]
                print(
                    f"\n  [first token {1000 * (first or 0):.0f} ms, {cached}/{total} prompt tokens cached]"
                )
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                if first is None:
                    first = time.perf_counter() - started
                parts.append(chunk["choices"][0]["delta"]["content"])
                print(parts[-1], end="", flush=True)
    return "".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--no-hints", action="store_true", help="send no typing hints")
    args = parser.parse_args()
    history = [{"role": "system", "content": SYSTEM}]
    session = f"terminal-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=args.url, timeout=600) as client:
        while True:
            sys.stdout.write("you> ")
            sys.stdout.flush()
            line = read_line(client, history, session, hints=not args.no_hints)
            if not line:
                return 0
            history.append({"role": "user", "content": line})
            print("assistant> ", end="", flush=True)
            history.append({"role": "assistant", "content": ask(client, history, session)})


if __name__ == "__main__":
    sys.exit(main())
