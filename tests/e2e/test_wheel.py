"""Installable as users install it: the wheel alone serves the task types and a chat.

The wheel is built from a copy of the package (not the working tree, whose build/ and
egg-info others use), installed into a fresh virtualenv without its dependencies (they come
from this virtualenv through a path file: nothing downloads), and `gateway serve` runs from
another folder, so nothing of the checkout (its prompts/, its gateway/) can be imported.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from testsupport.process import start_gateway

ROOT = Path(__file__).resolve().parents[2]
TASK_TYPES = {"audit", "chat", "extract_profile", "summarize", "title"}
pytestmark = pytest.mark.e2e


def _build_wheel(workdir: Path) -> Path:
    source = workdir / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "gateway", source / "gateway", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = workdir / "wheels"
    offline = ["--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels)]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, str(source)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("onemac_gateway-*.whl")
    return wheel


def _fresh_venv(workdir: Path, wheel: Path) -> Path:
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    offline = ["--quiet", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", *offline],
        check=True,
        timeout=300,
    )
    # The dependencies (MLX, Litestar, ...) from this virtualenv, after the fresh site-packages:
    # a plain path entry, so this virtualenv's editable install of the checkout is not loaded.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_installed_wheel_serves_task_types_and_a_chat(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    python = _fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import gateway; print(gateway.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=elsewhere,
    ).stdout
    assert str(tmp_path / "venv") in where, where  # the wheel's package, not the checkout's

    gateway = start_gateway(tmp_path / "gw", python=str(python), cwd=elsewhere)
    try:
        listed = gateway.http().get("/v1/tasks").json()
        assert {task["id"] for task in listed["data"]} == TASK_TYPES
        title = gateway.http().post(
            "/v1/tasks/title",
            json={"args": {"conversation": "user: we fixed the login bug on Monday."}},
        )
        assert title.status_code == 200, title.text
        answer = gateway.openai().chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            temperature=0,
        )
        assert answer.choices[0].message.content
    finally:
        gateway.stop()
