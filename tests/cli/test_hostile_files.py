"""Hostile files given to the CLI (issue 10): each one exits 2 with one line on stderr, nothing on
stdout, quickly and without a traceback, through the real `lockstep` process. Before: a RecursionError
traceback and exit 1 ("drift") for deep nesting, a ValueError traceback for a 5,000-digit integer, a
BOM'd JSON file parsed as YAML 1.1 (`1e3` became a string and the digest changed), a YAML alias bomb
expanding to gigabytes, and a 47 MiB YAML file taking 75 s and 1.3 GB before it was refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PIN = {"tools": [{"name": "a", "inputSchema": {"type": "object", "maximum": 1e3}}]}


def lockstep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lockstep.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def alias_bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


HOSTILE = {
    "deep-json": ("[" * 20_000 + "]" * 20_000, "nests deeper"),
    "deep-yaml": ("- " * 0 + "[" * 20_000 + "]" * 20_000 + "\n", ""),
    "huge-integer-json": ('{"tools": [{"name": "a", "inputSchema": {"maximum": ' + "9" * 5000 + "}}]}", "digits"),
    "huge-integer-yaml": ("tools:\n- name: a\n  inputSchema: {maximum: " + "9" * 5000 + "}\n", "digit"),
    "alias-bomb": (alias_bomb(), "YAML aliases"),
}


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("command", ["verify", "hash"])
def test_a_hostile_file_exits_2_with_one_line(tmp_path: Path, name: str, command: str) -> None:
    text, expected = HOSTILE[name]
    hostile = tmp_path / f"{name}.{'json' if 'json' in name else 'yaml'}"
    hostile.write_text(text)
    pin = tmp_path / "pin.json"
    pin.write_text(json.dumps(PIN))
    args = ["verify", str(pin), "--against", str(hostile)] if command == "verify" else ["hash", str(hostile)]
    result = lockstep(*args)
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and expected in line and "Traceback" not in line


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("w") as out:
        out.write("tools:\n")
        chunk = "- {name: t, description: " + "x" * 1000 + "}\n"
        for _ in range(25 * 1024):
            out.write(chunk)
    result = lockstep("hash", str(big))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "larger than" in line


def test_a_json_file_with_a_byte_order_mark_is_read_as_json(tmp_path: Path) -> None:
    """YAML 1.1 reads 1e3 as a string: the digest must be the one of the JSON number."""
    plain, marked = tmp_path / "plain.json", tmp_path / "marked.json"
    plain.write_text(json.dumps(PIN))
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps(PIN).encode())
    first, second = lockstep("hash", str(plain), "--json"), lockstep("hash", str(marked), "--json")
    assert first.returncode == second.returncode == 0, second.stderr
    assert json.loads(first.stdout)["digest"] == json.loads(second.stdout)["digest"]
