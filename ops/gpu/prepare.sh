#!/usr/bin/env bash
# Prepare the device calls of the GPU benchmarks (issue 22), here, with network access.
#
# The device machine has no registry access and takes at most 64 MiB per call, so everything
# it needs travels in parts: the wheels (mlx-cuda-13 alone is 90 MB) and the imported
# SmolLM2 folder (~100 MB), as one tar split into parts of PART_MB. Call k carries part k and
# stashes it outside the working tree (`device.sh stash`); the last part's call also carries
# the two versions of the source and runs `device.sh decode` (which joins, checks the sha256,
# installs and runs); the next calls, made at once while the machine is warm, run
# `device.sh more` and `device.sh long`. Everything goes under .gpu/, ignored through .git/info/exclude.
#
# Real GGUFs (issue 31: the Qwen2.5-Coder pair, `make real-models`) travel too where GGUFS
# names them (GGUFS="a.gguf b.gguf"): each split into parts of PART_MB, one call each
# (`.gpu/gguf-NNN/<name>.part-NN`), joined and sha256-checked on the device (`device.sh real`).
#
# Usage: [LEAN=1] ops/gpu/prepare.sh BEFORE_COMMIT [AFTER_COMMIT]   (AFTER defaults to HEAD)
set -euo pipefail
shopt -s nullglob
cd "$(git rev-parse --show-toplevel)"
BEFORE=${1:?the commit to compare against (the baseline)}
AFTER=${2:-HEAD}
PART_MB=${PART_MB:-56}
SMOLLM2=${SMOLLM2:-$HOME/.cache/onemac-gateway/models/smollm2-135m-instruct}
PIP_PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# What the device image lacks (ops/README.md: check each wheel's Requires-Dist when a
# version changes); the image has numpy, transformers, jinja2, httpx, anyio, uvloop, ...
# zeroconf and ifaddr: gateway.peers.discovery imports them at module level (wiring/services.py);
# gguf: the GGUF import's dequantization (the real GGUFs, GGUFS; the image has its numpy,
# pyyaml, requests and tqdm).
WHEELS=(mlx-cuda-13==0.32.4 mlx==0.32.4 mlx-lm==0.32.2 litestar==2.25.0 litestar-htmx==0.5.0
  msgspec==0.23.0 multipart==2.0.1 polyfactory==3.5.0 Faker==40.63.0 rich-click==1.9.9
  sniffio==1.3.1 uvicorn==0.54.0 sse-starlette==3.7.0 starlette==1.10.0 pydantic==2.14.4
  pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 llguidance==1.9.1
  httpx-sse==0.4.3 zeroconf==0.154.0 ifaddr==0.2.0 gguf==0.19.0)

grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p .gpu/wheels
python3 -m pip download -q --no-deps "${PIP_PLATFORM[@]}" -d .gpu/wheels "${WHEELS[@]}"
test -f "$SMOLLM2/model.safetensors" || { echo "no SmolLM2 import at $SMOLLM2 (make setup)"; exit 1; }

rm -rf .gpu/payload .gpu/part-* .gpu/gguf-* .gpu/before .gpu/after
mkdir -p .gpu/payload/smollm2 .gpu/before .gpu/after
cp .gpu/wheels/*.whl .gpu/payload/
cp "$SMOLLM2"/* .gpu/payload/smollm2/
# LEAN=1: SmolLM2's tokenizer and template without its weights (two parts instead of four,
# where little device time is left): the synthetic models build on them; SmolLM2's own rows fail.
[ -z "${LEAN:-}" ] || rm .gpu/payload/smollm2/model.safetensors
tar -C .gpu/payload -cf .gpu/payload.tar .
sha256sum .gpu/payload.tar | cut -d' ' -f1 > .gpu/payload.sha256
split -b "${PART_MB}M" -d .gpu/payload.tar .gpu/part-
rm -rf .gpu/payload .gpu/payload.tar
for part in .gpu/part-*; do mkdir "$part.d" && mv "$part" "$part.d/" && mv "$part.d" "$part"; done
cp .gpu/payload.sha256 "$(ls -d .gpu/part-* | tail -1)/"
# Clean copies of the two versions: the working tree may hold others' unfinished edits.
git archive "$BEFORE" gateway prompts | tar -x -C .gpu/before
git archive "$AFTER" gateway prompts bench testsupport ops/gpu | tar -x -C .gpu/after
echo "before=$(git rev-parse --short "$BEFORE") after=$(git rev-parse --short "$AFTER")" > .gpu/after/VERSIONS
count=0
for gguf in ${GGUFS:-}; do
  name=$(basename "$gguf")
  (cd "$(dirname "$gguf")" && sha256sum "$name") >> .gpu/after/GGUFS.sha256
  mkdir -p .gpu/split && split -b "${PART_MB}M" -d "$gguf" ".gpu/split/$name.part-"
  for part in .gpu/split/*; do
    mkdir -p "$(printf '.gpu/gguf-%03d' $count)" && mv "$part" "$(printf '.gpu/gguf-%03d' $count)/"
    count=$((count + 1))
  done
  rmdir .gpu/split
done
du -sh .gpu/part-* .gpu/before .gpu/after
parts=(.gpu/gguf-* .gpu/part-*)
echo
echo "device calls, back to back (the machine stays warm ~30 s after each):"
for ((i = 0; i < ${#parts[@]} - 1; i++)); do
  echo "  carry [${parts[$i]}]: bash ops/gpu/device.sh stash"
done
echo "  carry [${parts[-1]}, .gpu/before, .gpu/after]: bash ops/gpu/device.sh decode"
echo "  carry [.gpu/after]: bash ops/gpu/device.sh more    (then, if time is left: long)"
echo "  (with GGUFS: the last part's call runs bash ops/gpu/device.sh real)"
echo "  (bench priority instead: the last part's call runs bash ops/gpu/device.sh priority)"
