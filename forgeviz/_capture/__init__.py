"""Capture: the only code that touches torch internals (internal; the public API is ``forgeviz``).

Imports run one way, from the leaves up: ``untraced`` and ``storage`` (torch only) and ``native`` (the compiled
library); ``source``, ``names``, ``modules``, ``summary``, ``grads``; ``session`` (the kernel's one
capture session); then what reads through it: ``walk``, ``strides``, ``broadcast``, the memory
ledgers and ``memory``, and ``memory_choice`` (which tracker runs here).
"""
