"""Capture: the only code that touches torch internals.

``forgeviz.capture`` is this package, and calling it is the public context manager, so both
``with forgeviz.capture(): ...`` and ``import forgeviz.capture.session`` work:

>>> import torch, forgeviz
>>> x = torch.tensor([2.], requires_grad=True)
>>> with forgeviz.capture():
...     (x * 3).sum().backward()
>>> x.grad
tensor([3.])
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from ..api import capture

        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
