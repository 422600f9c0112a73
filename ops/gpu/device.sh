#!/usr/bin/env bash
# On the device machine (ops/gpu/prepare.sh prints the calls): stash | decode | more | long.
#   stash:  keep the carried payload part(s) outside the working tree (laid anew each call)
#   decode: join the parts, check the sha256, install the wheels, build the models, run
#           `run.py decode` (limits + bench ceiling, SmolLM2 and 1B bf16) under a time budget
#   more, long: `run.py more|long` (4-bit rows, 8B TTFT), same machine, still warm
#   priority: as decode (join, check, install), then `run.py priority` (bench priority)
#   speculative: as decode, then `run.py speculative` (bench speculative, issue 34)
#   concurrency: as decode, then `run.py concurrency` (bench concurrency and priority, issue 33)
#   batch-profile: as decode, then `run.py batch-profile` (1 and 8 clients, 8 profiled)
#   real:   as decode, and the carried GGUFs joined and checked, then `run.py real` (issue 31)
#   final:  as decode, then `run.py final` (issues 33 and 34 after session 10's changes)
#   compiled: as decode, then `run.py compiled` (the compiled decode step vs the eager one)
#   essential: as decode, then `run.py essential` (compiled's first rows, short)
#   ttft:   `run.py ttft` (the 8B's TTFT at 2K, 8K, then 32K), same machine, still warm
# Results: $OUT/results.json and $OUT/log.txt (the device tool brings back few files).
set -uo pipefail
shopt -s nullglob
STASH=/tmp/gpu-stash SITE=/tmp/gpu-site WORK=${GPU_WORK:-/tmp/gpu-work}
PY=${PY:-python3}  # (a smoke test on a CPU machine passes its own, and SKIP_INSTALL=1)
mkdir -p "$STASH" "$WORK" "${OUT:=/tmp/gpu-out}"
case "${1:?stash, decode, priority, speculative, concurrency, more or long}" in
stash)
  cp .gpu/part-*/* .gpu/gguf-*/* "$STASH"/ && du -sh "$STASH" && ls "$STASH" | wc -l
  exit ;;
decode | priority | speculative | concurrency | batch-profile | real | final | compiled | essential)
  cp .gpu/part-*/* .gpu/gguf-*/* "$STASH"/ || exit 1
  rm -rf "$WORK/src" && mkdir -p "$WORK/src" && cp -r .gpu/before .gpu/after "$WORK/src/" || exit 1
  cat "$STASH"/part-* > "$WORK/payload.tar"
  [ "$(sha256sum "$WORK/payload.tar" | cut -d' ' -f1)" = "$(cat "$STASH/payload.sha256")" ] \
    || { echo "payload sha256 mismatch"; ls -la "$STASH"; exit 1; }
  mkdir -p "$WORK/payload" && tar -C "$WORK/payload" -xf "$WORK/payload.tar" && rm "$WORK/payload.tar"
  [ -n "${SKIP_INSTALL:-}" ] || "$PY" -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target "$SITE" "$WORK"/payload/*.whl || exit 1
  if [ "$1" = real ]; then  # the real GGUFs (every part stashed by now): joined once, checked
    mkdir -p "$WORK/real"
    while read -r _ name; do
      parts=("$STASH/$name".part-*)
      [ ${#parts[@]} -gt 0 ] || { echo "no part of $name stashed"; exit 1; }
      [ -f "$WORK/real/$name" ] || cat "${parts[@]}" > "$WORK/real/$name" || exit 1
    done < "$WORK/src/after/GGUFS.sha256"
    (cd "$WORK/real" && sha256sum -c "$WORK/src/after/GGUFS.sha256") || exit 1
  fi ;;
more | long | ttft)  # a newer version of the source, where one is carried
  [ ! -d .gpu/after ] || { rm -rf "$WORK/src/after" && cp -r .gpu/after "$WORK/src/"; } || exit 1 ;;
*) echo "unknown step $1"; exit 2 ;;
esac
export PYTHONPATH="$WORK/src/after:$SITE" PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
# Fill the whole command limit (600 s) but leave room for the transfer back.
BUDGET=${BUDGET:-540}
cd "$WORK/src/after" || exit 1
cat VERSIONS
if [ "$1" != more ] && [ "$1" != long ]; then
  nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm,clocks.mem --format=csv
  "$PY" -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.cuda.is_available())" || exit 1
  "$PY" -c "from gateway.engines.device import choose_compute_path as c; print(c())"
fi
"$PY" ops/gpu/run.py "$1" "$OUT" "$WORK/models" "$WORK/payload/smollm2" "$WORK/src/before" \
  "$((BUDGET - SECONDS))"
