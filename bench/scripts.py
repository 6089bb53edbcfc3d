"""Another benchmark script of this folder, loaded by its path (``operator.py`` shadows the standard
library's ``operator`` module, so it cannot be imported by name); registered in ``sys.modules`` as
``bench_<name>`` because its dataclasses look their module up there."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).resolve().parent


def load_script(name: str) -> ModuleType:
    """bench/<name>.py as a module (loaded once per process)."""
    key = f"bench_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, FOLDER / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module
