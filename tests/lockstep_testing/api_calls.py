"""Derive the Kubernetes API calls of the operator from its source, for the chart's RBAC test.

Static, by reading ``lockstep/operator/*.py`` with ``ast``:

* every call whose path argument resolves to an API path (an f-string, or a helper function or
  property returning one), with its verb from the method (``get``/``list``/``merge_patch``/``post``,
  or ``request("METHOD", path)``); a GET of a collection is a ``list``;
* every kopf resource handler (``@kopf.on.event(group, version, plural)`` and friends): list and
  watch, plus patch for the handlers that keep progress on the object.

Names in f-strings are resolved from the module-level constants of the scanned files (GROUP,
VERSION, PLURAL, ...) and from assignments in the same function. What cannot be resolved is ignored,
so the scan is exact for the code's style (paths built in one place) rather than for any Python.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ApiCall", "calls_in_source"]

_METHOD_VERB = {"get": "get", "list": "list", "list_all": "list", "merge_patch": "patch", "patch": "patch",
                "post": "create", "delete": "delete", "put": "update"}
_HTTP_VERB = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update", "DELETE": "delete"}
_WATCHING_HANDLERS = {"event", "index"}
_PROGRESS_HANDLERS = {"create", "update", "delete", "resume", "field", "timer", "daemon"}
HOLE = "{}"


@dataclass(frozen=True, order=True)
class ApiCall:
    group: str  # "" for the core group
    resource: str  # with "/subresource" when there is one
    verb: str


def calls_in_source(files: Iterable[Path]) -> set[ApiCall]:
    trees = {path: ast.parse(path.read_text(), filename=str(path)) for path in files}
    constants = _constants(trees.values())
    helpers = _path_helpers(trees.values(), constants)
    calls: set[ApiCall] = set()
    for tree in trees.values():
        calls |= _handler_calls(tree, constants)
        for function in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
            local = {**constants, **_local_strings(function, constants)}
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    calls |= _call(node, local, helpers)
    return calls


def _constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    """Module-level NAME = "text" and NAME, NAME = "a", "b" assignments."""
    found: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                found[target.id] = value.value
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                for name, item in zip(target.elts, value.elts):
                    if isinstance(name, ast.Name) and isinstance(item, ast.Constant) and isinstance(item.value, str):
                        found[name.id] = item.value
    return found


def _text(node: ast.AST, names: dict[str, str]) -> str | None:
    """A string expression with unresolved parts as {}; None if it is no string expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                parts.append(names.get(value.value.id, HOLE))
            else:
                parts.append(HOLE)
        return "".join(parts)
    return None


def _local_strings(function: ast.AST, constants: dict[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _text(node.value, {**constants, **found})
            if text is not None:
                found[node.targets[0].id] = text
    return found


def _path_helpers(trees: Iterable[ast.Module], constants: dict[str, str]) -> dict[str, list[str]]:
    """Functions and properties that return API paths, by name."""
    helpers: dict[str, list[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            local = {**constants, **_local_strings(node, constants)}
            paths = []
            for ret in (n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None):
                options = [ret.value.body, ret.value.orelse] if isinstance(ret.value, ast.IfExp) else [ret.value]
                paths += [t for t in (_text(o, local) for o in options) if t and t.startswith("/api")]
            if paths:
                helpers.setdefault(node.name, []).extend(paths)
    return helpers


def _paths_of(node: ast.AST, names: dict[str, str], helpers: dict[str, list[str]]) -> list[str]:
    text = _text(node, names)
    if text is not None:
        return [text] if text.startswith("/api") else []
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return helpers.get(name, [])
    if isinstance(node, ast.Attribute):
        return helpers.get(node.attr, [])
    return []


def _call(node: ast.Call, names: dict[str, str], helpers: dict[str, list[str]]) -> set[ApiCall]:
    if not isinstance(node.func, ast.Attribute) or not node.args:
        return set()
    method = node.func.attr
    if method == "request" and len(node.args) >= 2:
        verb_text = _text(node.args[0], names)
        verb, path_node = _HTTP_VERB.get(verb_text or ""), node.args[1]
    else:
        verb, path_node = _METHOD_VERB.get(method), node.args[0]
    if verb is None:
        return set()
    return {call for path in _paths_of(path_node, names, helpers) if (call := _parse(path, verb))}


def _parse(path: str, verb: str) -> ApiCall | None:
    """An ApiCall from a path such as /api/v1/namespaces/{}/pods/{}/status (a query string is not part
    of the resource: ?labelSelector=...)."""
    segments = path.partition("?")[0].strip("/").split("/")
    if segments[0] == "api":
        group, rest = "", segments[2:]
    elif segments[0] == "apis" and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        return None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return None
    resource = rest[0]
    if len(rest) == 1 and verb == "get":
        verb = "list"  # a GET of a collection
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    return ApiCall(group, resource, verb)


def _handler_calls(tree: ast.Module, constants: dict[str, str]) -> set[ApiCall]:
    calls: set[ApiCall] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)):
                continue
            owner = decorator.func.value
            if not (isinstance(owner, ast.Attribute) and owner.attr == "on"):
                continue
            kind = decorator.func.attr
            args = [_text(a, constants) for a in decorator.args]
            if kind not in _WATCHING_HANDLERS | _PROGRESS_HANDLERS or len(args) < 3 or None in args:
                continue
            group, plural = str(args[0]), str(args[2])
            verbs = {"list", "watch"} | ({"patch"} if kind in _PROGRESS_HANDLERS else set())
            calls |= {ApiCall(group, plural, verb) for verb in verbs}
    return calls
