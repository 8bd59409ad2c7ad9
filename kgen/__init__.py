"""kgen: render, lint and run multi-node PyTorch training on Kubernetes and bare metal.

The Python API (docs/api.md) is importable from here: ``from kgen import render, lint, RenderRequest``.
It lives in kgen.sdk, loaded on first use, so that ``import kgen`` (and every ``kgen`` process) stays light.

``render``, ``lint`` and ``launch`` are also the names of the subpackages kgen.render, kgen.lint and kgen.launch
(the launch model). Importing a subpackage makes Python set the package's attribute of that name to the module;
this package's class keeps the functions instead (``_Kgen.__setattr__``), so ``kgen.render`` is always the function. The
subpackages stay importable by their dotted names (``from kgen.render.spec import TrainingSpec``);
``import kgen.render.spec as spec`` does not work (the ``as`` form reads the attribute).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # the lazy names for type checkers: mypy reads kgen.render as the function, not the subpackage
    from kgen.sdk import *  # noqa: F403

_SUBPACKAGES = ("render", "lint", "launch")  # the function of that name wins over the subpackage (see above)


def __getattr__(name: str) -> Any:
    """PEP 562: ``kgen.render`` and every other name of kgen.sdk, loaded on first use."""
    if name.startswith("__") or name == "sdk":  # dunder probes, and the import of kgen.sdk itself
        raise AttributeError(f"module 'kgen' has no attribute {name!r}")
    from kgen import sdk

    if name in sdk.__all__:
        value = getattr(sdk, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kgen' has no attribute {name!r}")


class _Kgen(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SUBPACKAGES and isinstance(value, types.ModuleType):
            return  # the import system announcing kgen.render / kgen.lint / kgen.launch: the function keeps it
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Kgen
