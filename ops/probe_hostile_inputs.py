"""Attack the surfaces that read untrusted bytes or keep state (issue 35), and print a table.

Each class of hostile input is a list of cases; a case passes when the answer is a clear 4xx
(HTTP) or a clear error (CLI: exit status 1, one line naming the problem, no traceback), the
gateway stays healthy, and nothing is read or written outside the folder it belongs to.
Classes that need a running gateway share one (``testsupport.process.start_gateway``, the embedded
model); classes on model files run ``gateway models show`` on crafted files in a scratch
cache. Prints the table (class, cases, passed, what failed) and exits 1 if a case failed.
``--json FILE`` writes the raw result.

Run: .venv/bin/python ops/probe_hostile_inputs.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testsupport.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"


@dataclass
class ClassResult:
    name: str
    cases: int = 0
    passed: int = 0
    failures: list[str] = field(default_factory=list)

    def check(self, case: str, ok: bool, detail: str = "") -> None:
        self.cases += 1
        if ok:
            self.passed += 1
        else:
            self.failures.append(f"{case}: {detail}"[:300])


def clear_4xx(answer: httpx.Response) -> bool:
    """A 4xx in OpenAI's envelope, with a message."""
    if not 400 <= answer.status_code < 500:
        return False
    try:
        error = answer.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(error.get("message")) and "type" in error


def embeddings(gateway: RunningGateway) -> ClassResult:
    result = ClassResult("embeddings: huge batches, token ids, dimensions")
    cases: dict[str, Any] = {
        "token id past the vocabulary": [10**9],
        "token id at the vocabulary's end": [49152],
        "negative token id": [-5, 3],
        "float token ids": [1.5, 2],
        "boolean token id": [True],
        "2,049 inputs (OpenAI's cap is 2,048)": ["hi"] * 2049,
        "an input past the context": [[1] * 9000],
        "an empty token list": [[]],
    }
    with httpx.Client(base_url=gateway.base_url, timeout=120) as http:
        for case, value in cases.items():
            answer = http.post("/v1/embeddings", json={"model": MODEL, "input": value})
            result.check(case, clear_4xx(answer), f"{answer.status_code} {answer.text[:120]}")
        for case, dimensions in (("dimensions 10^12", 10**12), ("dimensions 0", 0)):
            body = {"model": MODEL, "input": "hi", "dimensions": dimensions}
            answer = http.post("/v1/embeddings", json=body)
            result.check(case, clear_4xx(answer), f"{answer.status_code} {answer.text[:120]}")
        healthy = http.get("/health").status_code == 200
        result.check("healthy after", healthy)
    return result


def response_chains(gateway: RunningGateway) -> ClassResult:
    result = ClassResult("Responses: unknown, forged and deleted previous_response_id")
    with httpx.Client(base_url=gateway.base_url, timeout=120) as http:
        body = {"model": MODEL, "input": "Hi", "max_output_tokens": 4}
        for case, previous in (
            ("unknown id", "resp_" + "0" * 24),
            ("id of 100 KB", "resp_" + "x" * 100_000),
            ("SQL in the id", "resp_' OR 1=1 --"),
            ("non-ASCII id", "resp_\u202e\u0000"),
        ):
            answer = http.post("/v1/responses", json={**body, "previous_response_id": previous})
            result.check(case, clear_4xx(answer), f"{answer.status_code} {answer.text[:120]}")
        first = http.post("/v1/responses", json=body).json()
        http.delete(f"/v1/responses/{first['id']}")
        answer = http.post("/v1/responses", json={**body, "previous_response_id": first["id"]})
        result.check("deleted id", answer.status_code == 404, f"{answer.status_code}")
    return result


def store_file(workdir: Path) -> ClassResult:
    """The store's file damaged, or a folder at its path: the gateway starts and answers."""
    result = ClassResult("Responses store file: damaged, unopenable")
    for case, prepare in (
        ("damaged file", lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8192)),
        ("random bytes", lambda p: p.write_bytes(os.urandom(65536))),
        ("a folder at its path", lambda p: p.mkdir()),
    ):
        folder = Path(tempfile.mkdtemp(dir=workdir))
        path = folder / "responses.sqlite3"
        prepare(path)
        gateway = start_gateway(folder / "gw", {"responses": {"path": str(path)}})
        try:
            with httpx.Client(base_url=gateway.base_url, timeout=120) as http:
                body = {"model": MODEL, "input": "Hi", "max_output_tokens": 4}
                answer = http.post("/v1/responses", json=body)
                answered = answer.status_code == 200 and bool(answer.json()["output"])
                got = http.get(f"/v1/responses/{answer.json()['id']}") if answered else None
                kept = got is not None and got.status_code in (200, 503)
                clean = "Traceback" not in gateway.log()
                result.check(case, answered and kept and clean, f"{answer.status_code} {got}")
        finally:
            gateway.stop()
    return result


CLASSES: dict[str, Callable[[RunningGateway], ClassResult]] = {
    "embeddings": embeddings,
    "response_chains": response_chains,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the raw result here")
    args = parser.parse_args()
    results: list[ClassResult] = []
    with tempfile.TemporaryDirectory() as workdir:
        gateway = start_gateway(Path(workdir) / "gateway")
        try:
            results.extend(probe(gateway) for probe in CLASSES.values())
        finally:
            gateway.stop()
        results.append(store_file(Path(workdir)))
        results.extend(model_file_classes(Path(workdir)))
    print(f"{'class':62} {'cases':>5} {'passed':>6}")
    for result in results:
        print(f"{result.name:62} {result.cases:>5} {result.passed:>6}")
        for failure in result.failures:
            print(f"    FAILED {failure}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=2) + "\n")
    return 0 if all(r.passed == r.cases for r in results) else 1


def model_file_classes(workdir: Path) -> list[ClassResult]:
    """Crafted model files through ``gateway models show`` (each a clear CLI error)."""
    cache = workdir / "models-cache"
    result = ClassResult("model files: not what they claim")
    cases: dict[str, Callable[[Path], Path]] = {
        "a .gguf that is text": lambda d: _write(d / "text.gguf", b"hello, not a model\n"),
        "an empty .gguf": lambda d: _write(d / "empty.gguf", b""),
        "a folder with a config that is not JSON": lambda d: _folder(d / "badcfg", b"{nope"),
    }
    for case, make in cases.items():
        target = make(workdir)
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "models", "show", str(target)],
            capture_output=True,
            text=True,
            env={**os.environ, "GATEWAY_CACHE_DIR": str(cache)},
            timeout=120,
        )
        output = done.stdout + done.stderr
        clear = done.returncode != 0 and "Traceback" not in output
        result.check(case, clear, f"exit {done.returncode}: {output.strip()[-200:]}")
    return [result]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _folder(path: Path, config: bytes) -> Path:
    path.mkdir()
    (path / "config.json").write_bytes(config)
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return path


if __name__ == "__main__":
    sys.exit(main())
