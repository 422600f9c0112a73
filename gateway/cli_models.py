"""``gateway models list|show|import|rm|pull``: the models on this machine and the store.

Only ``pull`` uses the network; ``list`` and ``show`` read headers only (no MLX); ``import``
converts GGUF sources into the store now rather than at the first start; ``rm`` deletes the
store's imports and never a user's files.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from gateway.config import Settings, load_settings
from gateway.errors import ModelImportError, ModelNotFoundError

if TYPE_CHECKING:
    from gateway.modelstore.catalog import CatalogEntry


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, {"cache_dir": args.cache_dir})


def configured_models(settings: Settings) -> dict[str, str]:
    """Tier name -> model reference, for the local tiers."""
    return {name: t.model for name, t in settings.tiers.items() if t.kind == "mlx"}


def check_model_sources(settings: Settings) -> None:
    """Every local tier's model is on disk (nothing is downloaded at serve time): raises
    ModelNotFoundError at once, before anything is loaded or imported."""
    from gateway.engines.footprint import model_bytes
    from gateway.modelstore.sources import locate, parse_model_ref
    from gateway.modelstore.store import KNOWN_MODELS, ModelStore, is_installed

    store = ModelStore(settings.cache_dir)
    for name, reference in configured_models(settings).items():
        try:
            located = locate(parse_model_ref(reference), store)
        except ModelNotFoundError as exc:
            raise ModelNotFoundError(f"tier {name!r}: {exc.message}") from exc
        known = KNOWN_MODELS.get(reference)
        if (
            known is not None
            and not store.is_imported(reference)
            and not is_installed(known.distribution)
        ):
            raise ModelNotFoundError(
                f"tier {name!r}: {reference!r} is not imported and its package "
                f"{known.distribution} is not installed; nothing is downloaded at serve "
                f"time: run `gateway models import {reference}` first"
            )
        if located.folder is not None and located.gguf is None:
            # Headers only (milliseconds): a damaged folder stops the start with its reason
            # rather than as a traceback from the app's start-up.
            try:
                model_bytes(located.folder)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelImportError(
                    f"tier {name!r}: the model folder {located.folder} cannot be read: {exc}"
                ) from exc


def cmd_list(args: argparse.Namespace) -> int:
    from gateway.engines.device import choose_compute_path
    from gateway.modelstore.catalog import CatalogContext, build_catalog
    from gateway.modelstore.store import ModelStore

    settings = _settings(args)
    started = time.perf_counter()
    # Loads OpenBLAS on Linux (not MLX): the sizes are those of this machine's compute path.
    context = CatalogContext(
        choose_compute_path(settings.weights), settings.memory_budget_bytes, settings.weights
    )
    entries = build_catalog(ModelStore(settings.cache_dir), context, configured_models(settings))
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2))
        return 0
    for line in list_table(entries):
        print(line)
    budget = _bytes(settings.memory_budget_bytes)
    print(
        f"{len(entries)} models in {elapsed:.2f} s; memory on this machine's compute path, "
        f'budget {budget} (memory_budget_bytes); put an ID in [tiers.NAME] model = "ID"'
    )
    return 0


# ``models list``'s columns: heading and alignment (numbers to the right).
_LIST_COLUMNS = (
    ("ID", "<"),
    ("SOURCE", "<"),
    ("ARCH", "<"),
    ("PARAMS", ">"),
    ("QUANT", "<"),
    ("DISK", ">"),
    ("MEMORY", ">"),
    ("CTX", ">"),
    ("FITS", "<"),
    ("IMPORTED", "<"),
)


def list_table(entries: list[CatalogEntry]) -> list[str]:
    """The ``models list`` table, a heading and one line per entry. Each column is as wide as
    its widest cell: ids are paths and repo names of any length, and a fixed width pushed a
    long one's row out of line. An entry with an error keeps its id and source in their
    columns and gives the error in place of the rest."""
    rows: list[list[str]] = []
    for e in entries:
        if e.error:
            rows.append([e.id, e.source, e.error])
            continue
        rows.append(
            [
                e.id,
                e.source,
                e.architecture or "?",
                _count(e.parameters),
                e.quantization or "?",
                _bytes(e.disk_bytes),
                _bytes(e.memory_bytes),
                str(e.context_length or "?"),
                "?" if e.fits is None else ("yes" if e.fits else "NO"),
                "-" if e.imported is None else ("yes" if e.imported else "no"),
            ]
        )
    headings = [heading for heading, _ in _LIST_COLUMNS]
    widths = [len(heading) for heading in headings]
    for row in rows:
        measured = row if len(row) == len(widths) else row[:2]  # an error's text spans the rest
        for i, cell in enumerate(measured):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str]) -> str:
        columns = zip(cells, _LIST_COLUMNS, widths, strict=False)
        return " ".join(f"{cell:{align}{width}}" for cell, (_, align), width in columns).rstrip()

    return [line(headings), *(line(row) for row in rows)]


def cmd_show(args: argparse.Namespace) -> int:
    from gateway.engines.device import choose_compute_path
    from gateway.modelstore.catalog import CatalogContext, describe
    from gateway.modelstore.details import model_details
    from gateway.modelstore.sources import locate, parse_model_ref
    from gateway.modelstore.store import ModelStore

    settings = _settings(args)
    store = ModelStore(settings.cache_dir)
    context = CatalogContext(
        choose_compute_path(settings.weights), settings.memory_budget_bytes, settings.weights
    )
    located = locate(parse_model_ref(args.model), store)
    shown: dict[str, Any] = describe(located, store, context).as_dict()
    shown["tiers"] = [n for n, m in configured_models(settings).items() if m == args.model]
    shown.update(model_details(located, store))
    if args.json:
        print(json.dumps(shown, indent=2))
    else:
        for key, value in shown.items():
            if value not in (None, [], {}, ""):
                print(f"{key:20} {value}")
    return 1 if shown.get("error") else 0  # shown, and said by the exit status too


def cmd_import(args: argparse.Namespace) -> int:
    from gateway.engines.device import choose_compute_path
    from gateway.modelstore.sources import locate, parse_model_ref
    from gateway.modelstore.store import ModelStore

    settings = _settings(args)
    choose_compute_path(settings.weights)  # before the verification imports MLX
    store = ModelStore(settings.cache_dir)
    for reference in args.models or [settings.default_model]:
        located = locate(parse_model_ref(reference), store)
        say = functools.partial(_progress, reference)
        if located.ref.kind == "known":
            if store.is_imported(reference) and not args.force:
                print(f"{reference}: already imported at {store.path_for(reference)}")
            else:
                store.import_model(reference, say)
        elif located.gguf is None:
            print(f"{reference}: an MLX folder, loaded in place: nothing to import")
        elif (slug := located.imported_as(store)) is None or args.force:
            store.import_gguf(slug or located.slug, located.gguf, reference, say)
        else:
            print(f"{reference}: already imported at {store.path_for(slug)}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from gateway.modelstore.sources import locate, parse_model_ref
    from gateway.modelstore.store import ModelStore

    store = ModelStore(_settings(args).cache_dir)
    status = 0
    for reference in args.models:
        slugs = [s for s, m in store.imports().items() if reference in (s, m.get("reference"))]
        if not slugs:
            try:
                located = locate(parse_model_ref(reference), store)
            except (ModelNotFoundError, ValueError) as exc:
                print(f"gateway: {reference}: no import of it in {store.root} ({exc})")
                status = 1
                continue
            if located.user_files and located.gguf is None:
                print(
                    f"gateway: {reference} is your own folder ({located.folder}), loaded in "
                    "place: the gateway never deletes a user's files",
                    file=sys.stderr,
                )
                status = 1
                continue
            slugs = [located.imported_as(store) or located.slug]
        for slug in slugs:
            if store.remove(slug):
                print(f"removed the import {store.path_for(slug)} (the source is untouched)")
            else:
                print(f"{reference}: not imported, nothing to remove")
    return status


def cmd_pull(args: argparse.Namespace) -> int:
    from gateway.modelstore import hf_cache
    from gateway.modelstore.sources import locate, parse_model_ref
    from gateway.modelstore.store import ModelStore

    settings = _settings(args)
    ref = parse_model_ref(args.model)
    if ref.kind != "hf":
        print(
            "gateway: only hf:org/name[@revision][:file] is pulled by the gateway "
            "(ollama pull / LM Studio download their own)",
            file=sys.stderr,
        )
        return 2
    cache = hf_cache.hub_cache_dir()
    print(f"downloading {ref.text} into {cache} (weights, config, tokenizer, chat template)")
    folder = hf_cache.pull(ref.name, ref.revision, ref.selector, cache)
    try:
        located = locate(ref, ModelStore(settings.cache_dir))
    except ModelNotFoundError:
        # GGUF files are fetched only when named: a GGUF repo holds dozens of quantizations.
        print(
            f"gateway: {folder} has no model*.safetensors weights; for a GGUF repo name one "
            f"file: gateway models pull hf:{ref.name}:Q4_K_M (a file name or a piece of one)",
            file=sys.stderr,
        )
        return 1
    what = located.folder or located.gguf
    print(f'{ref.text}: {what}\nserve it with:\n  [tiers.NAME]\n  model = "{ref.text}"')
    return 0


def _progress(reference: str, message: str) -> None:
    print(f"  {reference}: {message}", flush=True)


def _bytes(count: int | None) -> str:
    if count is None:
        return "?"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _count(count: int | None) -> str:
    if count is None:
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


def add_models_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The ``models`` command and its subcommands (``gateway.cli`` builds the rest)."""
    models = sub.add_parser("models", help="models on this machine: list, show, import, rm, pull")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    listing = models_sub.add_parser(
        "list", parents=[common], help="every model found (known, HF cache, Ollama, LM Studio)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON list")
    listing.set_defaults(func=cmd_list)
    show = models_sub.add_parser("show", parents=[common], help="everything known about one")
    show.add_argument("model", help="a model reference, as in a tier")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_show)
    importing = models_sub.add_parser("import", parents=[common], help="import model(s) now")
    importing.add_argument("models", nargs="*", help="references (default: the default model)")
    importing.add_argument("--force", action="store_true", help="import again even if present")
    importing.set_defaults(func=cmd_import)
    remove = models_sub.add_parser("rm", parents=[common], help="remove the gateway's imports")
    remove.add_argument("models", nargs="+", help="references or import folder names")
    remove.set_defaults(func=cmd_rm)
    pull = models_sub.add_parser(
        "pull", parents=[common], help="download hf:org/name into the Hugging Face cache"
    )
    pull.add_argument("model", help="hf:org/name[@revision][:file]")
    pull.set_defaults(func=cmd_pull)
