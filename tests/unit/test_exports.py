"""The public API is the sorted ``__all__`` of ``lockstep`` and ``lockstep.core``."""

import types

import lockstep
import lockstep.core


def test_all_is_sorted_and_complete():
    for module in (lockstep, lockstep.core):
        assert list(module.__all__) == sorted(module.__all__)
        public = {
            name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        }
        assert public <= set(module.__all__) | {"__version__"}, public - set(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), name
