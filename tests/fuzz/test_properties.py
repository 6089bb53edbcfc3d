"""Property-based fuzzing (hypothesis) of the parsers and decisions that take hostile input: the canonical
form, the interface parser, the manifest loader, the report parser and body, the CLI's file loader, the
admission handler, and the proxy's judgement of answers (what quarantine lets through is approved), its
report section and its event-stream splitter (lossless). Each property: only the named errors, never a
crash. The short run is here (CI: HYPOTHESIS_PROFILE=ci); the long, coverage-guided run is `make fuzz` (fuzz/run.py, atheris)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from lockstep_testing.fuzz_targets import BYTE_TARGETS, VALUE_TARGETS
from lockstep_testing.json_strategies import json_values

#: Values shaped like what each target expects, so the fuzzer gets past the first type check.
SHAPED = st.fixed_dictionaries({}, optional={
    "tools": st.lists(st.dictionaries(st.sampled_from(["name", "inputSchema", "description", "title", "_meta"]),
                                      json_values(8), max_size=4), max_size=3),
    "apiVersion": st.just("lockstep.dev/v1alpha1"), "kind": st.just("MCPServerInterface"),
    "spec": st.one_of(json_values(8), st.fixed_dictionaries({}, optional={
        "approved": st.lists(st.dictionaries(st.sampled_from(["digest", "formula", "components", "definitions"]),
                                             json_values(6), max_size=4), max_size=2),
        "containers": st.lists(st.dictionaries(st.sampled_from(["name", "ports", "volumeMounts", "image"]),
                                               json_values(6)), max_size=2),
        "initContainers": st.lists(json_values(6), max_size=2),
        "volumes": st.lists(json_values(6), max_size=2), "hostNetwork": json_values(2),
        "selector": json_values(6), "endpoint": json_values(6), "probe": json_values(6)})),
    "metadata": json_values(6), "observedAt": json_values(2), "digest": json_values(2),
    "components": json_values(8), "formula": st.just("lockstep/v1"), "bootId": json_values(2),
    "sequence": json_values(2), "failure": json_values(4),
})


@pytest.mark.parametrize("target", sorted(VALUE_TARGETS))
@given(value=st.one_of(json_values(), SHAPED))
# Found by this property in CI: components as an object raised a bare ValueError in Observation.from_dict.
@example(value={"formula": "lockstep/v1", "observedAt": "", "components": {"0": None}})
@example(value={"formula": "lockstep/v1", "observedAt": "", "components": ["ab"]})
def test_value_targets_raise_only_named_errors(target: str, value: Any) -> None:
    VALUE_TARGETS[target](value)


@pytest.mark.parametrize("target", sorted(BYTE_TARGETS))
@given(data=st.one_of(st.binary(max_size=512), st.text(max_size=256).map(str.encode),
                      st.sampled_from([b"[" * 5000, b"\xef\xbb\xbf{}", b"a: &x [1]\nb: *x\n", b"{\"a\": 1e999}",
                                       b"- " * 3000, b"9" * 5000, b"\x00", b"{\"sequence\": 1}"])))
def test_byte_targets_raise_only_named_errors(target: str, data: bytes) -> None:
    BYTE_TARGETS[target](data)


@pytest.mark.parametrize("target", sorted({**VALUE_TARGETS, **BYTE_TARGETS}))
def test_coverage_guided_short_run(target: str, tmp_path: Any) -> None:
    """A short atheris run per target (the long one is `make fuzz`); skipped where atheris does not install."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris, or .[fuzz])")
    harness = Path(__file__).resolve().parents[2] / "fuzz" / "run.py"
    result = subprocess.run([sys.executable, str(harness), target, "-runs=3000", "-max_len=2048", "-seed=1",
                             f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 3000 runs" in result.stderr  # libFuzzer really ran them
