"""Decode speed with speculative decoding: off, prompt lookup, and a draft model, side by side.

In-process on the gateway's own runner (the engine the gateway uses), greedy, the modes
alternating run by run (the first of each discarded), three tasks:

* edit: rewrite a 60-line function with one change (most of the reply is in the prompt);
* json: extract a record's fields as JSON under a schema (values copied from the input);
* chat: free chat (hardly anything to copy: drafting should cost nothing).

Each row: decode tokens/s after the first token, the text (which must be the same in every
mode: the drafts are verified) and the drafted/accepted counts. ``--draft-model`` adds the
draft-model mode (any model reference; it must share the tokenizer), ``--model-folder``
measures another target than the embedded default.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.stats import Summary, ratio, table, write_json

if TYPE_CHECKING:
    from gateway.seam.request_parts import ChatMessage

FUNCTION = '''def summarize_orders(orders, currency="EUR", include_refunds=False):
    """Totals, counts and averages of a list of order records, by customer."""
    totals = {}
    counts = {}
    refunds = {}
    largest = {}
    for order in orders:
        customer = order["customer"]
        amount = order["amount"]
        if order.get("currency", currency) != currency:
            amount = convert(amount, order["currency"], currency)
        if order.get("refunded"):
            refunds[customer] = refunds.get(customer, 0) + amount
            if not include_refunds:
                continue
        totals[customer] = totals.get(customer, 0) + amount
        counts[customer] = counts.get(customer, 0) + 1
        if amount > largest.get(customer, 0):
            largest[customer] = amount
    report = []
    for customer in sorted(totals):
        total = totals[customer]
        count = counts[customer]
        average = total / count if count else 0
        report.append(
            {
                "customer": customer,
                "total": round(total, 2),
                "count": count,
                "average": round(average, 2),
                "largest": round(largest.get(customer, 0), 2),
                "refunded": round(refunds.get(customer, 0), 2),
                "currency": currency,
            }
        )
    grand_total = sum(row["total"] for row in report)
    grand_count = sum(row["count"] for row in report)
    summary = {
        "customers": len(report),
        "orders": grand_count,
        "total": round(grand_total, 2),
        "average": round(grand_total / grand_count, 2) if grand_count else 0,
        "currency": currency,
    }
    if include_refunds:
        summary["refunded"] = round(sum(refunds.values()), 2)
    top = sorted(report, key=lambda row: row["total"], reverse=True)[:3]
    summary["top_customers"] = [row["customer"] for row in top]
    for row in report:
        share = row["total"] / grand_total if grand_total else 0
        row["share"] = round(share, 4)
    log_summary(summary)
    return {"summary": summary, "customers": report}
'''
RECORD = (
    "Customer record 4471: name Margarethe Okonkwo-Lindqvist, born 1987-03-14 in Tampere, "
    "email margarethe.ol@example.org, phone +358 40 555 0142, address Hämeenkatu 22 B 9, "
    "33200 Tampere, Finland; customer since 2016-09-01, tier gold, preferred language Finnish, "
    "last order 2026-11-28 (order number ORD-2026-118842, 3 items, 214.90 EUR)."
)
RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        key: {"type": "string"}
        for key in (
            "name",
            "born",
            "email",
            "phone",
            "address",
            "customer_since",
            "tier",
            "last_order_number",
        )
    },
    "required": ["name", "email", "phone", "address", "last_order_number"],
    "additionalProperties": False,
}
TASKS: dict[str, tuple[list[ChatMessage], dict[str, Any] | None]] = {
    "edit": (
        [
            {
                "role": "system",
                "content": "You are a code editor. You reply with the complete edited code in "
                "one ```python block and nothing else.",
            },
            {
                "role": "user",
                "content": f"```python\n{FUNCTION}```\n\nRename the parameter "
                "`include_refunds` to `with_refunds`.",
            },
        ],
        None,
    ),
    "json": (
        [{"role": "user", "content": f"Extract the fields of this record as JSON.\n\n{RECORD}"}],
        RECORD_SCHEMA,
    ),
    "chat": ([{"role": "user", "content": "Tell me about the rivers of Europe."}], None),
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported
    from gateway.config import default_cache_dir
    from gateway.engines.mlx_runner import MLXRunner
    from gateway.engines.weights import load_model
    from gateway.modelstore.sources import parse_model_ref, resolve
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
    from gateway.seam.backend import Finished, SamplingParams, TokenEvent
    from gateway.seam.request_parts import Grammar

    store = ModelStore(Path(args.cache_dir or default_cache_dir()))
    folder = Path(args.model_folder) if args.model_folder else store.ensure(DEFAULT_MODEL_ID)
    runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute)
    modes: dict[str, tuple[str, Any]] = {"off": ("off", None), "lookup": ("lookup", None)}
    if args.draft_model:
        draft_folder = resolve(parse_model_ref(args.draft_model), store, progress=print).folder
        draft, _, _ = load_model(draft_folder, runner.weights)
        modes[f"draft {args.draft_model}"[:22]] = ("draft_model", draft)
    tasks = args.tasks or list(TASKS)
    speeds: dict[tuple[str, str], list[float]] = {}
    texts: dict[tuple[str, str], set[str]] = {}
    accepted: dict[tuple[str, str], list[float]] = {}
    load_start = os.getloadavg()
    for task in tasks:
        messages, schema = TASKS[task]
        prompt = runner.render_chat(messages)
        grammar = Grammar("json_schema", json.dumps(schema)) if schema else None
        params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, grammar=grammar)
        for index in range(args.runs + 1):  # alternating; the first of each is the warm-up
            order = list(modes.items())
            for name, (speculation, draft) in order if index % 2 else reversed(order):
                runner.speculation, runner.draft_model = speculation, draft
                times, pieces, finished = [], [], None
                for event in runner.generate(prompt, params):
                    if isinstance(event, TokenEvent) and event.token_ids:
                        times.append(time.perf_counter())
                        pieces.append(event.text)
                    elif isinstance(event, Finished):
                        finished = event
                if not index:
                    continue
                key = (task, name)
                speeds.setdefault(key, []).append((len(times) - 1) / (times[-1] - times[0]))
                texts.setdefault(key, set()).add("".join(pieces))
                drafted = finished.drafted if finished else None
                share = drafted.accepted / max(len(times) - 1, 1) if drafted else 0.0
                accepted.setdefault(key, []).append(share)
    load_end = os.getloadavg()
    summaries = {key: Summary.of(values) for key, values in speeds.items()}
    print(table([(f"decode_tps/{task}", name, s) for (task, name), s in summaries.items()]))
    result: dict[str, Any] = {
        "benchmark": "speculative",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "compute": compute.as_dict(),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "rows": {},
    }
    print()
    for (task, name), summary in summaries.items():
        base = summaries[(task, "off")]
        same = texts[(task, name)] == texts[(task, "off")] and len(texts[(task, name)]) == 1
        share = Summary.of(accepted[(task, name)]).median
        result["rows"][f"{task}/{name}"] = {
            "decode_tps": summary.as_dict(),
            "ratio_to_off": ratio(summary, base),
            "same_text_as_off": same,
            "accepted_share_of_tokens": share,
            "tokens": len(next(iter(texts[(task, name)]))),
        }
        print(
            f"{task:5} {name:22} x{ratio(summary, base):.2f} of off   "
            f"same text: {same}   drafted tokens accepted / tokens: {share:.2f}"
        )
    print(f"load average (1, 5, 15 min): start {load_start}, end {load_end}")
    return result


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
