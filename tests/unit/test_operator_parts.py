"""The operator's reconciler is composed of parts, not mixins (issue 27): a part is read alone, and a
call from one part into another goes through an object it was given, which the tools can follow.

A method declared under ``if TYPE_CHECKING:`` is a stub of another part's method, the way mixins called
each other; a class whose bases are other product classes is a mixin hierarchy again."""

from __future__ import annotations

import ast
from pathlib import Path

import lockstep

OPERATOR = Path(lockstep.__file__).parent / "operator"


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(OPERATOR.rglob("*.py"))]


def test_no_part_declares_another_parts_methods_under_type_checking() -> None:
    stubs = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                stubs += [f"{path.name}:{item.lineno} {item.name}" for item in ast.walk(node)
                          if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)]
    assert stubs == []


def test_the_reconciler_inherits_from_nothing() -> None:
    from lockstep.operator.reconciler import Reconciler

    assert Reconciler.__bases__ == (object,)

