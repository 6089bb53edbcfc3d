"""Benchmark: how long does digesting a large MCP interface take?

Run it with ``python bench/digest.py`` (``--runs N`` to change the repeat
count, ``--seed S`` for another synthetic interface). It builds a deterministic
interface of 1,000 tools (about 1 KB of description and 2-4 KB of nested
``inputSchema`` each), 100 prompts and 200 resources, about 3 MB of JSON, and
prints the median time and throughput (MB of canonical JSON per second) of:

- ``Interface.from_document``: validation, the step before digesting;
- ``digest_interface``: canonical JSON, SHA-256 and the aggregate of every component;
- ``rfc8785.dumps`` + SHA-256 over the whole document, the pure-Python reference;
- ``json.dumps(sort_keys=True)`` + SHA-256, the reference line (not canonical).

It also checks that ``canonical_json`` is byte-identical to ``rfc8785.dumps``
for the benchmark document and reports the peak memory of the digest path.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import rfc8785

from lockstep.core import Interface, canonical, canonical_json, digest_interface

TOOLS = 1_000
PROMPTS = 100
RESOURCES = 200
TIME_BUDGET_SECONDS = 18.0  # for the timed runs; building and checking take a few more seconds

WORDS = [
    "forecast", "weather", "city", "region", "hourly", "daily", "temperature", "humidity", "wind",
    "pressure", "station", "query", "database", "table", "column", "index", "record", "schema", "filter",
    "sort", "limit", "offset", "cursor", "page", "file", "path", "directory", "read", "write", "append",
    "delete", "move", "copy", "permission", "owner", "group", "mode", "user", "account", "email",
    "address", "phone", "role", "token", "scope", "session", "request", "response", "status", "the", "a",
    "of", "to", "and", "in", "for", "with", "on", "by", "from", "at", "as", "is", "are", "be", "this",
    "that", "which", "returns", "café", "naïve", "résumé", "Zürich", "São", "Paulo", "Kraków",
]
JSON_TYPES = ("string", "integer", "number", "boolean")


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _paragraph(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    while sum(len(part) + 1 for part in parts) < size:
        parts.append(_sentence(rng, rng.randint(6, 18)))
    return " ".join(parts)


def _property(rng: random.Random, depth: int) -> dict[str, Any]:
    if depth < 3 and rng.random() < 0.3:
        return _object_schema(rng, depth + 1, rng.randint(2, 5))
    if depth < 3 and rng.random() < 0.15:
        return {"type": "array", "description": _sentence(rng, 8), "items": _property(rng, depth + 1),
                "maxItems": rng.randint(1, 500)}
    kind = rng.choice(JSON_TYPES)
    schema: dict[str, Any] = {"type": kind, "description": _sentence(rng, rng.randint(6, 14))}
    if kind == "string" and rng.random() < 0.4:
        schema["enum"] = [rng.choice(WORDS) + str(index) for index in range(rng.randint(2, 6))]
    elif kind == "string":
        schema["pattern"] = "^[a-z0-9_\\-]{1,64}$"
    elif kind == "integer":
        schema.update(minimum=0, maximum=rng.choice((10, 100, 1000, 65535)))
    elif kind == "number":
        # Mostly fractions, whose Python repr already is the JCS form; a few integral floats
        # such as 1.0 take the exact (rfc8785) path, as they would from a real server.
        schema.update(minimum=0, maximum=rng.choice((0.5, 1.5, 2.25, 99.9, 1.0)), default=0.25)
    return schema


def _object_schema(rng: random.Random, depth: int, properties: int) -> dict[str, Any]:
    names = [f"{rng.choice(WORDS)}_{index}" for index in range(properties)]
    return {
        "type": "object",
        "description": _sentence(rng, 10),
        "properties": {name: _property(rng, depth) for name in names},
        "required": names[: rng.randint(0, len(names))],
        "additionalProperties": False,
    }


def _input_schema(rng: random.Random) -> dict[str, Any]:
    target = rng.randint(1_500, 1_900)  # compact JSON; the last property overshoots by a few hundred bytes
    schema = _object_schema(rng, 1, 3)
    index = 0
    while len(json.dumps(schema, separators=(",", ":"))) < target:
        schema["properties"][f"option_{index}"] = _property(rng, 2)
        index += 1
    return schema


def _tool(rng: random.Random, index: int) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": f"tool_{index:04d}",
        "title": _sentence(rng, 4)[:-1],
        "description": _paragraph(rng, 1_000),
        "inputSchema": _input_schema(rng),
        "annotations": {"readOnlyHint": rng.random() < 0.5, "destructiveHint": rng.random() < 0.2,
                        "idempotentHint": True, "openWorldHint": False},
    }
    if rng.random() < 0.3:
        tool["_meta"] = {"com.example/build": f"{rng.getrandbits(64):016x}", "com.example/rank": index}
    return tool


def _prompt(rng: random.Random, index: int) -> dict[str, Any]:
    return {
        "name": f"prompt_{index:03d}",
        "description": _paragraph(rng, 400),
        "arguments": [
            {"name": f"arg_{arg}", "description": _sentence(rng, 8), "required": rng.random() < 0.5}
            for arg in range(rng.randint(1, 5))
        ],
    }


def _resource(rng: random.Random, index: int) -> dict[str, Any]:
    return {
        "uri": f"file:///srv/data/{rng.choice(WORDS)}/{index:04d}.json",
        "name": f"resource_{index:04d}",
        "description": _paragraph(rng, 300),
        "mimeType": "application/json",
        "size": rng.randint(100, 10_000_000),
        "annotations": {"audience": ["user", "assistant"], "priority": rng.choice((0.25, 0.5, 0.75))},
    }


def build_document(seed: int = 8785) -> dict[str, Any]:
    """A deterministic synthetic interface document of about 3 MB."""
    rng = random.Random(seed)
    return {
        "instructions": _paragraph(rng, 2_000),
        "tools": [_tool(rng, index) for index in range(TOOLS)],
        "prompts": [_prompt(rng, index) for index in range(PROMPTS)],
        "resources": [_resource(rng, index) for index in range(RESOURCES)],
        "resourceTemplates": [
            {"uriTemplate": f"file:///srv/{kind}/{{id}}", "name": kind, "description": _sentence(rng, 12)}
            for kind in ("reports", "logs", "exports")
        ],
    }


def timed(action: Callable[[], object]) -> float:
    """Seconds of one call, with the garbage collector paused as timeit does."""
    gc.disable()
    try:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start
    finally:
        gc.enable()


def measure(actions: list[Callable[[], object]], runs: int) -> list[list[float]]:
    """Run the actions round-robin, so that a burst of load from other processes hits all alike."""
    times: list[list[float]] = [[] for _ in actions]
    for _ in range(runs):
        gc.collect()
        for index, action in enumerate(actions):
            times[index].append(timed(action))
    return times


def _jcs_sha256(document: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(document)).hexdigest()


def _json_sha256(document: Any) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def peak_memory(action: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def breakdown_steps(document: dict[str, Any]) -> list[tuple[str, Callable[[], object]]]:
    """The internal steps of canonical_json + SHA-256 on the whole document, one by one."""
    prepared = canonical._prepared(document, [])
    text = canonical._ENCODER.encode(prepared)
    data = text.encode("utf-8")
    return [
        ("pre-scan (keys, containers, numbers)", lambda: canonical._prepared(document, [])),
        ("json C encoder (sort_keys, compact)", lambda: canonical._ENCODER.encode(prepared)),
        ("UTF-8 encode", lambda: text.encode("utf-8")),
        ("SHA-256", lambda: hashlib.sha256(data).digest()),
    ]


def choose_runs(actions: list[Callable[[], object]]) -> int:
    """As many runs as fit the time budget (one warm-up round of the actions measures it)."""
    start = time.perf_counter()
    gc.collect()
    for action in actions:
        action()
    one_round = time.perf_counter() - start
    return max(5, min(51, int(TIME_BUDGET_SECONDS / max(one_round, 1e-6))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="runs per line (default: fit in about 20 s)")
    parser.add_argument("--seed", type=int, default=8785)
    args = parser.parse_args(argv)

    document = build_document(args.seed)
    interface = Interface.from_document(document)
    canonical = canonical_json(document)
    reference = rfc8785.dumps(document)
    megabytes = len(canonical) / 1e6

    lines: list[tuple[str, Callable[[], object]]] = [
        ("Interface.from_document (validation)", lambda: Interface.from_document(document)),
        ("digest_interface (lockstep/v1)", lambda: digest_interface(interface)),
        ("from_document + digest_interface (full path)", lambda: digest_interface(Interface.from_document(document))),
        ("canonical_json + SHA-256, whole document", lambda: hashlib.sha256(canonical_json(document))),
        ("rfc8785.dumps + SHA-256, whole document", lambda: _jcs_sha256(document)),
        ("json.dumps(sort_keys) + SHA-256 (reference)", lambda: _json_sha256(document)),
    ]
    steps = breakdown_steps(document)
    runs = args.runs or choose_runs([action for _, action in lines + steps])
    times = measure([action for _, action in lines + steps], runs)
    step_times = times[len(lines):]
    results = [(label, statistics.median(samples), min(samples)) for (label, _), samples in zip(lines, times)]
    reference_seconds = results[-1][1]

    print(f"interface: {TOOLS} tools, {PROMPTS} prompts, {RESOURCES} resources, "
          f"{len(interface)} components, {megabytes:.2f} MB canonical JSON; "
          f"median of {runs} runs; Python {sys.version.split()[0]}")
    print(f"{'step':48} {'median ms':>10} {'min ms':>8} {'MB/s':>8} {'x json.dumps':>13}")
    for label, seconds, fastest in results:
        print(f"{label:48} {seconds * 1e3:10.1f} {fastest * 1e3:8.1f} {megabytes / seconds:8.1f} "
              f"{seconds / reference_seconds:13.2f}")
    print("where canonical_json + SHA-256 spends its time (whole document, median):")
    for (label, _), samples in zip(steps, step_times):
        print(f"  {label:46} {statistics.median(samples) * 1e3:10.1f} ms")
    digest_seconds = results[1][1]
    print(f"digest_interface: {digest_seconds / reference_seconds:.2f}x the json.dumps line "
          f"(target <= 2x), {digest_seconds * 1e3:.1f} ms (target < 100 ms)")
    print(f"canonical_json byte-identical to rfc8785.dumps: {canonical == reference}")
    print(f"peak memory (tracemalloc) of digest_interface: {peak_memory(lambda: digest_interface(interface)) / 1e6:.2f} MB; "
          f"of canonical_json(whole document): {peak_memory(lambda: canonical_json(document)) / 1e6:.2f} MB")
    return 0 if canonical == reference else 1


if __name__ == "__main__":
    sys.exit(main())
