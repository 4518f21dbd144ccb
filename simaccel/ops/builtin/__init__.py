"""The built-in op families: every module in this folder declares some (simaccel.ops.declare).

Importing the package imports them all, so a new built-in family is one new module here (or
one more declaration in a module here) plus its kernel in kernels/.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
