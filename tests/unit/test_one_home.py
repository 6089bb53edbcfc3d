"""Every design name has one home, lockstep/core/names.py: no second product module defines one.

A design name is a value ``lockstep.core.names`` exports (the API group, the condition type, the labels and
annotations, the token's audience and paths, the sidecar's variable names...) or any string that starts with
``lockstep.dev``; none may be defined in two product modules (names.py defines every value it exports, so
those are defined nowhere else). "Defines" means a string literal in a module-level (or class-level)
assignment: a name written in a docstring, a message or a call is not a definition.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import lockstep
import lockstep.core.names as names

PACKAGE = Path(lockstep.__file__).parent
HOME = "core/names.py"

#: Definitions left in files the lead is rewriting (issue 19); each is to be replaced by an import from
#: lockstep.core.names, then its entry deleted. Empty this list; never add to it.
LEAD_OWNED_LEFT: dict[str, set[str]] = {}


def design_names() -> set[str]:
    found: set[str] = set()
    for name in names.__all__:
        value = getattr(names, name)
        found.update(value if isinstance(value, tuple) else [value])
    return found


def defined_strings(path: Path) -> set[str]:
    """The string literals of the module-level and class-level assignments of ``path``."""
    strings: set[str] = set()

    def scan(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                scan(node.body)
            elif isinstance(node, (ast.If, ast.Try)):
                scan(node.body + node.orelse + [s for handler in getattr(node, "handlers", []) for s in handler.body])
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                strings.update(leaf.value for leaf in ast.walk(node.value)
                               if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str))

    scan(ast.parse(path.read_text()).body)
    return strings


def homes() -> dict[str, set[str]]:
    wanted = design_names()
    where: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for value in defined_strings(path):
            if value in wanted or value.startswith("lockstep.dev"):
                where[value].add(module)
    return where


def test_every_design_name_is_a_string_defined_in_names() -> None:
    assert all(isinstance(value, str) and value for value in design_names())
    defined_there = defined_strings(PACKAGE / HOME)
    computed = {names.API_VERSION, names.TOKEN_PATH}  # built from GROUP/VERSION and TOKEN_DIR
    assert design_names() - computed <= defined_there


def test_no_design_name_is_defined_in_a_second_module() -> None:
    twice = {}
    for value, modules in homes().items():
        kept = {module for module in modules if value not in LEAD_OWNED_LEFT.get(module, set())}
        if len(kept) > 1:
            twice[value] = sorted(kept - {HOME})
    assert not twice, f"define these in lockstep/core/names.py and import them: {twice}"


def test_the_lead_owned_list_names_only_what_is_still_there() -> None:
    """An entry is deleted as soon as its file imports the name (the list only shrinks)."""
    where = homes()
    stale = {module: value for module, values in LEAD_OWNED_LEFT.items() for value in values
             if module not in where.get(value, set())}
    assert not stale, f"delete these entries from LEAD_OWNED_LEFT: {stale}"
