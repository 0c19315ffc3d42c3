"""Calling compiled functions directly: the graph's own Numba function, cached across processes."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytensor
import pytensor.tensor as pt

from pymc_sgmcmc.compiling import compile_function
from pymc_sgmcmc.direct import direct_call

#: Builds a small Numba function with a shared input, calls it directly and
#: prints whether the call's compiled code was read from Numba's cache.
_PROCESS = textwrap.dedent(
    """
    import json
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from pymc_sgmcmc.compiling import compile_function
    from pymc_sgmcmc.direct import direct_call

    x = pt.vector("x")
    data = pytensor.shared(np.linspace(0.0, 1.0, 7), name="data")
    function = compile_function([x], [pt.exp(x).sum() * data.sum(), x * 2.5], mode="NUMBA")
    call = direct_call(function, 1)
    values = call(np.arange(3.0))
    stats = call.compiled.stats
    print(json.dumps({
        "hits": sum(stats.cache_hits.values()),
        "misses": sum(stats.cache_misses.values()),
        "values": [float(values[0]), *map(float, values[1])],
    }))
    """
)


def _in_new_process(compile_directory) -> dict:
    environment = dict(os.environ)
    environment["PYTENSOR_FLAGS"] = f"base_compiledir={compile_directory}"
    environment["NUMBA_CACHE_DIR"] = str(compile_directory / "numba-own")
    finished = subprocess.run(
        [sys.executable, "-c", _PROCESS],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(finished.stdout.strip().splitlines()[-1])


def test_a_direct_call_runs_the_graph_itself_and_gives_the_functions_values():
    x = pt.vector("x")
    data = pytensor.shared(np.linspace(0.0, 1.0, 7), name="data")
    function = compile_function([x], [pt.exp(x).sum() * data.sum(), x * 2.5], mode="NUMBA")
    call = direct_call(function, 1)
    assert call.compiled is not function.vm.jit_fn
    position = np.arange(3.0)
    expected = function(position)
    values = call(position)
    np.testing.assert_array_equal(values[0], expected[0])
    np.testing.assert_array_equal(values[1], expected[1])
    # The shared values are read at every call, as the wrapper reads them.
    data.set_value(np.ones(7))
    np.testing.assert_array_equal(call(position)[0], np.exp(position).sum() * 7)


def test_the_graphs_function_is_read_from_the_cache_in_a_new_process(tmp_path):
    """The graph's function is compiled once: a second process reads it from the cache."""
    first = _in_new_process(tmp_path)
    second = _in_new_process(tmp_path)
    assert first["misses"] == 1 and first["hits"] == 0
    assert second["misses"] == 0 and second["hits"] == 1
    assert first["values"] == second["values"]
