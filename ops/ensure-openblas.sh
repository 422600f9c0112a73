#!/usr/bin/env bash
# Install OpenBLAS where it makes MLX fast (Linux CPU) and we may (root with apt); else say how.
set -u
[ "$(uname -s)" = "Linux" ] || exit 0
for lib in /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
           /usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0; do
  [ -e "$lib" ] && exit 0
done
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "Installing OpenBLAS (libopenblas0-pthread) for fast MLX on this CPU..."
  if apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 || \
     { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1; }; then
    exit 0
  fi
  echo "warning: apt-get could not install libopenblas0-pthread; the gateway will run on the slow path." >&2
  exit 0
fi
echo "note: OpenBLAS not found. For ~25x faster prefill run as root:" >&2
echo "      apt-get install libopenblas0-pthread   (Debian/Ubuntu; other distributions: their OpenBLAS package)" >&2
exit 0
