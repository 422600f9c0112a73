"""The ``gateway`` command: serve, manage models, benchmark."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence

from gateway.cli_models import add_models_parser, check_model_sources
from gateway.config import ConfigError, load_settings
from gateway.errors import ModelImportError, ModelNotFoundError

log = logging.getLogger("gateway")


def _settings_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    overrides = {k: getattr(args, k, None) for k in ("host", "port", "cache_dir")}
    return load_settings(getattr(args, "config", None), overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app, drain
    from gateway.engines.device import choose_compute_path
    from gateway.server import GatewayServer

    settings = _settings_from(args)
    # Before anything slow: a model that is not on disk fails now, naming what to run.
    check_model_sources(settings)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per peer heartbeat and upstream request would drown the log.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    # Decided before anything imports MLX: OpenBLAS must be loaded first to be used.
    choose_compute_path(settings.weights)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        # After the drain, the last events still need to reach the clients.
        timeout_graceful_shutdown=5,
    )
    from gateway.profiling import maybe_profile_threads

    with maybe_profile_threads() as profiles:  # only with GATEWAY_PROFILE_DIR (benchmarks)
        GatewayServer(config, lambda: drain(app), profiles).run()
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from gateway.engines.prefix_disk import DiskPrefixes
    from gateway.wiring import prefix_disk_folder

    settings = _settings_from(args)
    disk = DiskPrefixes(prefix_disk_folder(settings), settings.cache.persist_prefix_bytes)
    if args.cache_command == "clear":
        print(f"removed {disk.clear()} saved prefix caches from {disk.folder}")
        return 0
    entries = disk.list()
    for entry in entries:
        modified = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.modified))
        print(
            f"{entry.model:24} {entry.fingerprint}  {len(entry.tokens):6d} tokens "
            f"{entry.nbytes / 1e6:9.1f} MB  {modified}  {entry.path.name}"
        )
    total = sum(e.nbytes for e in entries)
    print(f"{len(entries)} saved prefix caches, {total / 1e6:.1f} MB, in {disk.folder}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from bench import run_bench

    return run_bench(args)


def cmd_bench_missing(args: argparse.Namespace) -> int:
    print(
        "gateway bench: the benchmarks live in the source checkout (top-level bench/), not in the"
        " installed package; run it from the repository's root (make bench)",
        file=sys.stderr,
    )
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML configuration file (or GATEWAY_CONFIG)")
    common.add_argument("--cache-dir", dest="cache_dir", help="where imported models live")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the gateway")
    serve.add_argument("--host", help="bind address (default 127.0.0.1, or GATEWAY_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8000, or GATEWAY_PORT)")
    serve.set_defaults(func=cmd_serve)

    add_models_parser(sub, common)

    cache = sub.add_parser("cache", help="prefix KV caches saved to disk")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    for name, text in (("list", "the saved prefix caches"), ("clear", "remove them all")):
        cache_sub.add_parser(name, parents=[common], help=text).set_defaults(func=cmd_cache)

    bench = sub.add_parser("bench", parents=[common], help="measure; see ops/README.md")
    try:  # the benchmarks (bench/, testsupport/) ship with the checkout, not the wheel
        from bench import add_bench_arguments
    except ImportError:
        bench.add_argument("rest", nargs=argparse.REMAINDER)
        bench.set_defaults(func=cmd_bench_missing)
    else:
        add_bench_arguments(bench)
        bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # transformers (used only for the tokenizer) warns at import that PyTorch is missing;
    # the gateway never needs PyTorch, so the warning is noise.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    except (ModelNotFoundError, ModelImportError) as exc:
        print(f"gateway: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
