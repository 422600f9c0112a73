"""Start the real gateway (`python -m gateway serve`) as a child process: for benchmarks and tests."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

START_TIMEOUT_SECONDS = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def write_toml(path: Path, config: dict[str, Any]) -> None:
    """A small TOML writer for test and benchmark configs (nested tables, scalars, lists)."""
    lines: list[str] = []

    def table(prefix: str, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if not isinstance(value, dict):
                lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
        for key, value in values.items():
            if isinstance(value, dict):
                name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
                lines.append(f"[{name}]")
                table(name, value)

    table("", config)
    path.write_text("\n".join(lines) + "\n")


@dataclass
class RunningGateway:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def openai(self, **kwargs: Any) -> Any:
        from openai import OpenAI  # a development dependency, used by tests only

        return OpenAI(base_url=f"{self.base_url}/v1", api_key="local", max_retries=0, **kwargs)

    def async_openai(self, **kwargs: Any) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=f"{self.base_url}/v1", api_key="local", max_retries=0, **kwargs)

    def http(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=120, **kwargs)

    def scheduler(self) -> dict[str, Any]:
        return httpx.get(f"{self.base_url}/v1/scheduler", timeout=10).json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def store_serving(folder: Path, cache_dir: Path) -> Path:
    """A cache directory whose store holds ``folder`` as the default model's import, so that
    any version of the gateway (an older one too, for a before/after) serves that folder
    under the default model's id. The files are linked, not copied; returns ``cache_dir``."""
    from gateway.modelstore.store import DEFAULT_MODEL_ID, IMPORT_FORMAT, MANIFEST

    target = cache_dir / "models" / DEFAULT_MODEL_ID
    target.mkdir(parents=True, exist_ok=True)
    files: dict[str, int] = {}
    for file in sorted(folder.resolve().iterdir()):
        if not file.is_file() or file.name == MANIFEST:
            continue
        link = target / file.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(file)
        files[file.name] = file.stat().st_size
    manifest = {"format": IMPORT_FORMAT, "model": DEFAULT_MODEL_ID, "source": str(folder)}
    (target / MANIFEST).write_text(json.dumps({**manifest, "files": files}, indent=2))
    return cache_dir


def baseline_env(source: str) -> dict[str, str]:
    """The environment that runs another version's source (``--baseline``): first on the path."""
    paths = [str(Path(source).resolve()), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def start_gateway(
    workdir: Path,
    config: dict[str, Any] | None = None,
    *,
    cpus: str | None = None,
    extra_env: dict[str, str] | None = None,
    port: int | None = None,
    cwd: Path | None = None,
    python: str | None = None,
) -> RunningGateway:
    """A gateway process on ``port`` (default: a free one); ``cpus`` pins it to those cores
    (``taskset -c``). ``cwd``: where it runs; another version's source (``baseline_env``)
    needs one outside this checkout, whose ``gateway`` package ``-m`` would import first.
    ``python``: the interpreter that runs it (default this one; another virtualenv's)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "gateway.toml"
    config = dict(config or {})
    # Each gateway saves its prefix caches in its own folder: none leaks into another test.
    config["cache"] = {"persist_folder": str(workdir / "prefix-cache"), **config.get("cache", {})}
    write_toml(config_path, config)
    port = port or free_port()
    log_path = workdir / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(extra_env or {})
    pinned = ["taskset", "-c", cpus] if cpus else []
    process = subprocess.Popen(
        [
            *pinned,
            python or sys.executable,
            "-m",
            "gateway",
            "serve",
            "--port",
            str(port),
            "--config",
            str(config_path),
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
    )
    gateway = RunningGateway(process, port, log_path)
    _wait_until_answering(
        process, f"{gateway.base_url}/health", "gateway", gateway.log, gateway.stop
    )
    return gateway


def start_gateways_together(*starts: Callable[[], RunningGateway]) -> list[RunningGateway]:
    """Run each ``start`` (a ``start_gateway`` call) at once and wait for all: their imports
    and model loads overlap. If one fails, the others that started are stopped."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(starts)) as pool:
        futures = [pool.submit(start) for start in starts]
    started: list[RunningGateway] = []
    failure: BaseException | None = None
    for future in futures:
        try:
            started.append(future.result())
        except BaseException as exc:  # re-raised below, after the others are stopped
            failure = failure or exc
    if failure is not None:
        for gateway in started:
            gateway.stop()
        raise failure
    return started


def _wait_until_answering(
    process: subprocess.Popen[bytes],
    url: str,
    name: str,
    log: Callable[[], str],
    stop: Callable[[], None],
) -> None:
    """Poll ``url`` until it answers 200; fail with the process's log if it dies or hangs."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    # One client for every poll (a new one each time costs an SSL context), polled often:
    # a start is ~4 s here, and tests start ~50 gateways.
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{log()}")
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    stop()
    raise RuntimeError(f"{name} did not start in {START_TIMEOUT_SECONDS} s:\n{log()}")


@dataclass
class RunningUpstream:
    """``mlx_lm.server``: an OpenAI-compatible server nobody here wrote, on loopback."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    model: str = "default_model"  # the name mlx_lm.server answers to for its --model

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=20)


def start_mlx_lm_server(workdir: Path, model_folder: Path) -> RunningUpstream:
    """Start ``python -m mlx_lm.server`` on ``model_folder``, with OpenBLAS on Linux."""
    from gateway.engines.device import openblas_preload

    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "mlx_lm_server.log"
    # Like the gateway, mlx-lm is only fast on a Linux CPU with OpenBLAS loaded first.
    env = {**os.environ, **openblas_preload()}
    process = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm.server", "--model", str(model_folder), "--port", str(port)],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    upstream = RunningUpstream(process, port, log_path)
    _wait_until_answering(
        process, f"{upstream.base_url}/models", "mlx_lm.server", upstream.log, upstream.stop
    )
    return upstream


@contextlib.contextmanager
def this_and_baseline(workdir: Path, baseline: str | None) -> Iterator[dict[str, RunningGateway]]:
    """This version's gateway ("gateway") and, with ``baseline`` (another version's source
    folder), that version's ("baseline") beside it, each in its own folder; both stopped
    on the way out."""
    versions = {"gateway": {}, **({"baseline": baseline_env(baseline)} if baseline else {})}
    gateways: dict[str, RunningGateway] = {}
    try:
        for name, env in versions.items():
            gateways[name] = start_gateway(
                workdir / name, extra_env=env, cwd=workdir if env else None
            )
        yield gateways
    finally:
        for gateway in gateways.values():
            gateway.stop()
