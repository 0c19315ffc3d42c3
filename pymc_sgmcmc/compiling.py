"""Compiling the package's PyTensor functions, every one with the same Numba flags.

Numba's fast-math flags let LLVM assume that values are finite, which would
remove a kernel's check for a diverging step, so the kernels are compiled
without them. Numba's on-disk cache keeps one entry for the code PyTensor
generates for an operation, whichever flags compiled it: a tuning function
compiled with them and a kernel compiled without them would overwrite each
other's code, and a first run (which compiles) and a later run (which reads
the cache) would compute with different code, so that the same seed gave
other draws. Every function of the package is therefore compiled without them.
"""

from __future__ import annotations

import pytensor

__all__ = ["compile_function", "numba_flags"]


def numba_flags():
    """Return the context in which the package compiles: Numba without fast-math flags."""
    return pytensor.config.change_flags(numba__fastmath=False)


def compile_function(inputs, outputs, **kwargs):
    """Return :func:`pytensor.function` of ``inputs`` and ``outputs``, in :func:`numba_flags`."""
    with numba_flags():
        return pytensor.function(inputs, outputs, **kwargs)
