"""Coverage-guided fuzzing of Lockstep's hostile-input parsers with atheris (libFuzzer for Python).

    python fuzz/run.py TARGET [libFuzzer options]     # e.g. -max_total_time=60 -runs=100000
    make fuzz                                          # every target, FUZZ_SECONDS each (default 60)

Targets (tests/lockstep_testing/fuzz_targets.py): canonical, interface, manifest, report, admission,
proxy-policy, proxy-report, proxy-answer (a JSON value decoded from the input) and report-body, cli-file,
event-stream, proxy-answer-bytes (the raw bytes). A crash is an exception
other than the target's named errors; libFuzzer writes the input to crash-<sha1> in the current folder.
Turn every crash into a regression test (tests/fuzz) before fixing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

# Instrument Lockstep's own modules (and only those: instrumenting the kubernetes client and aiohttp
# too takes minutes): every module a target reaches is imported here, inside the block.
with atheris.instrument_imports(include=["lockstep", "lockstep_testing"]):
    from lockstep_testing.fuzz_targets import BYTE_TARGETS, VALUE_TARGETS, value_from_bytes
    import lockstep.proxy.app  # noqa: F401 - the proxy targets import it lazily: instrument it here
    import lockstep_testing.lenient_wire  # noqa: F401



#: Keys the targets look for, so that structured values reach past their first checks.
KEYS = ["tools", "prompts", "resources", "resourceTemplates", "instructions", "name", "uri", "uriTemplate",
        "inputSchema", "description", "annotations", "_meta", "apiVersion", "kind", "metadata", "spec",
        "approved", "digest", "formula", "components", "definitions", "selector", "matchLabels", "labels",
        "annotations", "containers", "initContainers", "ephemeralContainers", "volumes", "volumeMounts",
        "projected", "sources", "serviceAccountToken", "audience", "hostNetwork", "shareProcessNamespace",
        "observedAt", "failure", "reason", "bootId", "bootTime", "sequence", "sentAt", "view", "image",
        "targetContainerName", "lockstep.dev/interface", "lockstep.dev/inject", "ignore", "endpoint", "port",
        "withheld", "dropped", "component", "action", "client", "count", "result", "capabilities",
        # Message classes (issue 32): what makes a response also a request, server requests, embedded ones.
        "method", "params", "error", "id", "jsonrpc", "inputRequests", "resultType", "messages", "systemPrompt"]
STRINGS = ["lockstep-sidecar", "lockstep-token", "lockstep.dev", "lockstep/v1", "MCPServerInterface",
           "lockstep.dev/v1alpha1", "tool", "Isolate", "Audit", "Manual", "FirstSeen", "disabled", "enabled",
           "sha256:" + "a" * 64, "2026-11-22T02:00:00Z", "0" * 32, "", "sampling/createMessage", "tools/list",
           "input_required", "2.0"]


def structured(data: atheris.FuzzedDataProvider, depth: int = 0) -> object:
    """A JSON value drawn from the fuzzer's bytes (libFuzzer cannot see inside the C JSON parser)."""
    choice = data.ConsumeIntInRange(0, 9 if depth < 6 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return data.ConsumeBool()
    if choice == 2:
        return data.ConsumeInt(8)
    if choice == 3:
        return data.ConsumeRegularFloat()
    if choice == 4:
        return data.PickValueInList(STRINGS)
    if choice == 5:
        return data.ConsumeUnicodeNoSurrogates(data.ConsumeIntInRange(0, 24))
    if choice in (6, 7):
        return [structured(data, depth + 1) for _ in range(data.ConsumeIntInRange(0, 4))]
    return {data.PickValueInList(KEYS): structured(data, depth + 1) for _ in range(data.ConsumeIntInRange(0, 5))}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in {**VALUE_TARGETS, **BYTE_TARGETS}:
        names = ", ".join(sorted({**VALUE_TARGETS, **BYTE_TARGETS}))
        raise SystemExit(f"usage: python fuzz/run.py TARGET [libFuzzer options]; TARGET is one of {names}")
    name = sys.argv[1]
    if name in BYTE_TARGETS:
        target = BYTE_TARGETS[name]

        def one_input(data: bytes) -> None:
            target(data)
    else:
        value_target = VALUE_TARGETS[name]

        def one_input(data: bytes) -> None:
            value_target(value_from_bytes(data) if data[:1] in (b"{", b"[") else
                         structured(atheris.FuzzedDataProvider(data)))

    sys.setrecursionlimit(2000)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
