"""Calling a compiled PyTensor function without its wrapper, where the backend allows."""

from __future__ import annotations

__all__ = ["direct_call"]


def direct_call(function, n_inputs: int):
    """Return a callable that runs ``function``'s compiled code with the least overhead.

    A function built by a JIT linker (Numba, JAX) holds its compiled code as
    ``vm.jit_fn``, which takes the explicit inputs followed by the current
    values of the shared variables (the model's data) and returns the
    outputs as a tuple. Calling it directly skips the wrapper's input checks
    and storage bookkeeping, about 7 to 10 microseconds per call. Other
    backends keep the function, told to trust its inputs, and return its
    outputs as a list. Either way the callable's inputs must already have
    the types the function was compiled for.

    Parameters
    ----------
    function : pytensor.compile.function.types.Function
        A compiled function whose outputs are a list (not a single variable).
    n_inputs : int
        Its explicit inputs.
    """
    function.trust_input = True
    compiled = getattr(function.vm, "jit_fn", None)
    cells = getattr(function.vm, "inputs", None)
    if compiled is None or cells is None or len(cells) < n_inputs:
        return function
    shared = tuple(cells[n_inputs:])

    def call(*arguments):
        return compiled(*arguments, *[cell[0] for cell in shared])

    return call
