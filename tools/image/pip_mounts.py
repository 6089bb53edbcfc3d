#!/usr/bin/env python3
"""This machine's pip configuration, for a build's RUN steps: one merged pip.conf and the read-only
bind mounts it needs, so that pip inside the build resolves as pip outside does.

    pip_mounts.py FOLDER            reads `python3 -m pip config list` (files and PIP_* variables, in
                                    pip's order of precedence), writes FOLDER/pip.conf, prints one
                                    `--volume=SRC:DST:ro` a line: that pip.conf as /etc/pip.conf, and
                                    every local file or folder it names (CA bundle, constraints,
                                    find-links, file:// indexes) at its own path

The mounts exist only while a RUN step runs; nothing of them is committed to an image.
"""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse


def parse_config_list(text: str) -> dict[str, dict[str, str]]:
    """`pip config list` lines (`global.cert='/x'`, `:env:.find-links='/y'`) → {section: {key: value}};
    a later line wins (pip lists the environment last, and it overrides the files)."""
    merged: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        section, _, name = key.rpartition(".")
        section = "global" if section in ("", ":env:") else section
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        merged.setdefault(section, {})[name] = str(value)
    return merged


def local_paths(config: dict[str, dict[str, str]]) -> list[Path]:
    """Every existing absolute path (or file:// URL) the configuration names, sorted, without repeats."""
    found: set[Path] = set()
    for values in config.values():
        for value in values.values():
            for word in value.split():
                path = Path(unquote(urlparse(word).path)) if word.startswith("file://") else Path(word)
                if path.is_absolute() and path.exists():
                    # a file:// index names its /simple folder; mount the folder holding the packages too
                    found.add(path.parent if word.startswith("file://") and path.name == "simple" else path)
    return sorted(p for p in found if not any(q != p and q in p.parents for q in found))


def render(config: dict[str, dict[str, str]]) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    for section, values in sorted(config.items()):
        parser[section] = dict(sorted(values.items()))
    lines: list[str] = []
    for section in parser.sections():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {value}" for key, value in parser[section].items())
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True).stdout
    config = parse_config_list(listed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pip.conf").write_text(render(config))
    print(f"--volume={folder / 'pip.conf'}:/etc/pip.conf:ro")
    for path in local_paths(config):
        print(f"--volume={path}:{path}:ro")
    return 0


if __name__ == "__main__":
    sys.exit(main())
