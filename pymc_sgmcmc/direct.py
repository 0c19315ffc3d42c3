"""Calling a compiled PyTensor function without its wrapper, where the backend allows."""

from __future__ import annotations

import os
import types

__all__ = ["claim_jax_process", "direct_call", "graph_body"]

#: The process whose kernels first ran JAX (None until one did).
_jax_process = None


def claim_jax_process() -> None:
    """Refuse to run JAX in a process forked from one where JAX already ran.

    JAX starts threads; a process forked after that (PyMC forks one per
    chain on Linux when ``cores > 1``) deadlocks at its first JAX call.

    Raises
    ------
    RuntimeError
        In such a forked process, before it calls JAX.
    """
    global _jax_process
    if _jax_process is None:
        _jax_process = os.getpid()
    elif _jax_process != os.getpid():
        raise RuntimeError(
            "JAX ran in this process's parent before PyMC forked it, which deadlocks JAX; "
            "sample with cores=1, or pass mp_ctx='forkserver' to pm.sample."
        )


def direct_call(function, n_inputs: int, on_device: bool = False):
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
    on_device : bool, default False
        For a JAX function: keep the shared values on JAX's device between
        calls instead of copying them there at every call.
    """
    function.trust_input = True
    compiled = getattr(function.vm, "jit_fn", None)
    cells = getattr(function.vm, "inputs", None)
    if compiled is None or cells is None or len(cells) < n_inputs:
        return function
    shared = tuple(cells[n_inputs:])
    if on_device:
        return _DeviceCall(compiled, shared)
    compiled = graph_body(compiled)

    def call(*arguments):
        return compiled(*arguments, *[cell[0] for cell in shared])

    call.compiled = compiled
    return call


def graph_body(compiled):
    """Return the compiled graph of a Numba function itself, without the linker's wrapper.

    PyTensor's Numba linker compiles a function's graph, then a wrapper that
    forwards its arguments to it, and caches the wrapper. Numba optimises
    each function together with all the code it calls, so the wrapper's
    compilation optimises the whole graph a second time: 1 to 2.5 s of the
    3 to 5.5 s that a small regression's tuning functions take to compile
    when the operations they call are in the cache. The graph's own
    function, compiled to be called from Python and cached under the
    wrapper's key with a suffix of its own, computes the same values without
    that second pass. Where PyTensor's cache does not hold the wrapper (a
    graph that cannot be cached, ``numba__cache`` off) or the wrapper is
    already compiled, the wrapper is returned.

    Parameters
    ----------
    compiled : numba dispatcher
        A Numba function's ``vm.jit_fn``.
    """
    try:
        from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
        from pytensor.link.numba.dispatch.basic import numba_njit
    except ImportError:
        return compiled
    wrapper = getattr(compiled, "py_func", None)
    key = CACHED_SRC_FUNCTIONS.get(wrapper) if wrapper is not None else None
    body = getattr(wrapper, "__globals__", {}).get("jitable_func")
    if key is None or getattr(body, "py_func", None) is None or compiled.signatures:
        return compiled
    source = body.py_func
    # Numba names a cache entry after the function's file, which for a graph is
    # a temporary file of a new name in every process; the wrapper's is "<string>".
    function = types.FunctionType(
        source.__code__.replace(co_filename=wrapper.__code__.co_filename),
        source.__globals__,
        source.__name__,
        source.__defaults__,
        source.__closure__,
    )
    CACHED_SRC_FUNCTIONS[function] = f"{key}_graph"
    options = dict(compiled.targetoptions)
    options.pop("nopython", None)
    fastmath = options.pop("fastmath", False)
    return numba_njit(function, fastmath=fastmath, final_function=True, cache=True, **options)


class _DeviceCall:
    """Call a JAX function with the shared values copied to its device once, not per call.

    A shared value replaced since the last call (``pm.set_data``) is copied again.
    """

    def __init__(self, compiled, cells):
        import jax

        self._put = jax.device_put
        self._compiled = compiled
        self._cells = cells
        self._sources = [None] * len(cells)
        self._copies = [None] * len(cells)

    def __call__(self, *arguments):
        for index, cell in enumerate(self._cells):
            if cell[0] is not self._sources[index]:
                self._sources[index] = cell[0]
                self._copies[index] = self._put(cell[0])
        return self._compiled(*arguments, *self._copies)
