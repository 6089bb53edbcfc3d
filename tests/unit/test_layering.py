"""The core stays pure: no Kubernetes, network or MCP SDK imports under lockstep/core."""

import ast
import sys
from pathlib import Path

import lockstep.core

CORE = Path(lockstep.core.__file__).parent
#: Canonical JSON, and the signature primitives of signed approvals (computation only: the KMS and HSM signers,
#: which reach a network, are the CLI's).
ALLOWED_THIRD_PARTY = {"rfc8785", "cryptography", "securesystemslib"}
FORBIDDEN_STDLIB = {"socket", "ssl", "http", "urllib", "asyncio", "subprocess", "selectors"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_core_imports_only_stdlib_canonical_json_signatures_and_itself():
    for path in CORE.glob("*.py"):
        for name in imported_modules(path):
            if name in ("lockstep", "__future__") or name in ALLOWED_THIRD_PARTY:
                continue
            assert name in sys.stdlib_module_names, f"{path.name} imports third-party {name}"
            assert name not in FORBIDDEN_STDLIB, f"{path.name} imports network/process module {name}"


def test_core_never_imports_the_outer_layers():
    for path in CORE.glob("*.py"):
        source = path.read_text()
        for outer in ("lockstep.operator", "lockstep.sidecar", "lockstep.cli", "lockstep.reader", "lockstep.proxy"):
            assert outer not in source, f"{path.name} depends on {outer}"


#: The modules every part shares the design's rules through (issue 19): they are core, so the two tests
#: above hold for them; names.py imports nothing at all.
SHARED_RULES = ("names.py", "selection.py", "spec.py", "mcp_methods.py", "enforcement.py", "conditions.py")


def test_the_shared_rules_live_in_the_core() -> None:
    core_modules = {path.name for path in CORE.glob("*.py")}
    assert set(SHARED_RULES) <= core_modules
    assert imported_modules(CORE / "names.py") <= {"__future__"}
