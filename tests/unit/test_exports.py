"""The public API is the ``__all__`` of ``lockstep`` and ``lockstep.core`` (kept sorted by ruff)."""

import types

import lockstep
import lockstep.core


def test_all_is_complete_and_every_name_exists():
    for module in (lockstep, lockstep.core):
        assert len(set(module.__all__)) == len(module.__all__)
        public = {
            name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        }
        assert public <= set(module.__all__) | {"__version__"}, public - set(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), name
