"""A model block compiled once and shared by every chain: density, probe and kernels."""

from __future__ import annotations

import logging
import weakref

import numpy as np
from pytensor.graph.traversal import apply_ancestors

from pymc_sgmcmc.cluster import ClusterPasses
from pymc_sgmcmc.disk_rows import PageRelease
from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.estimators import ESTIMATORS, Probe
from pymc_sgmcmc.kernel import Kernel, is_jax
from pymc_sgmcmc.loop import InterpretedKernel, PositionTerms, compiled_terms_needed
from pymc_sgmcmc.metric import METRICS
from pymc_sgmcmc.minibatch import (
    MinibatchError,
    MinibatchLogDensity,
    build_minibatch_log_density,
    with_data,
)

__all__ = ["CompiledModel", "compiled_model"]

#: PyMC's logger, which PyMC shows at INFO level while it samples.
_log = logging.getLogger("pymc")

#: Said with every compilation: it is slow only the first time.
_CACHED = "slow the first time a model of this structure is seen, then read from PyTensor's cache"


class CompiledModel:
    """The minibatch log density of a model block and what is compiled from it.

    The numeric probe (for the measurements) and the kernels (for sampling)
    are compiled on first use and kept, so every chain of a step method
    reuses them; a kernel depends on the sampler's declaration, the
    gradient estimator and the kind of metric only, never on a chain's
    settings, which are its inputs.

    Parameters
    ----------
    density : MinibatchLogDensity
        The symbolic minibatch density of the block.
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile` for the kernels and to
        :func:`pytensor.function` for the probe.
    chunk_rows : int, default 50,000
        Rows per chunk of the probe's full passes over the data.
    probe_kwargs : dict, optional
        Passed to :func:`pytensor.function` for the probe instead of
        ``compile_kwargs``.
    client : distributed.Client, optional
        Run the probe's full-data passes on this Dask cluster
        (:mod:`pymc_sgmcmc.cluster`).
    """

    def __init__(
        self,
        density: MinibatchLogDensity,
        compile_kwargs: dict | None = None,
        chunk_rows=50_000,
        probe_kwargs: dict | None = None,
        client=None,
    ):
        self.density = density
        self.compile_kwargs = dict(compile_kwargs or {})
        self.probe_kwargs = dict(self.compile_kwargs if probe_kwargs is None else probe_kwargs)
        self.chunk_rows = int(chunk_rows)
        #: Runs the probe's full passes on a Dask cluster, if one is given.
        self.cluster = (
            None
            if client is None
            else ClusterPasses(client, density, self.probe_kwargs, self.chunk_rows)
        )
        #: Releases the pages of data read from memory-mapped files, for the
        #: kernels and the probe.
        self.pages = PageRelease([data.get_value(borrow=True) for data in density.data])
        self._probe = None
        self._kernels = {}
        self._interpreted = {}
        self._gradient_operations = {}

    @property
    def probe(self) -> Probe:
        """The numeric probe, compiled on first use."""
        if self._probe is None:
            _log.info("Compiling the tuning functions (%s).", _CACHED)
            self._probe = Probe(
                self.density, self.probe_kwargs, self.chunk_rows, self.cluster, self.pages
            )
        return self._probe

    def kernel(
        self, dynamics: Dynamics | type[Dynamics], estimator: str, metric: str = "identity"
    ) -> Kernel:
        """Return the kernel of ``dynamics`` with ``estimator`` and ``metric``.

        The kernel is compiled on first use; ``metric`` is a kind of
        :data:`pymc_sgmcmc.metric.METRICS`, and a dynamics class stands for
        its instance with default options.
        """
        if isinstance(dynamics, type):
            dynamics = dynamics()
        key = _kernel_key(dynamics, estimator, metric)
        if key not in self._kernels:
            _log.info(
                "Compiling the %s kernel: %s gradient, %s metric (%s).",
                type(dynamics).__name__,
                estimator.replace("_", "-"),
                metric.replace("_", "-"),
                _CACHED,
            )
            self._kernels[key] = Kernel(
                self.density,
                ESTIMATORS[estimator](self.density),
                dynamics,
                self.compile_kwargs,
                METRICS[metric],
            )
        return self._kernels[key]

    def gradient_operations(self, estimator: str) -> int:
        """Return the operations in the graph of ``estimator``'s gradient estimate, as built.

        Compiling a fused kernel takes time in proportion to its graph, most
        of which is this estimate: PyTensor rewrites the whole graph at every
        compilation, even when Numba then reads the code from its cache.
        """
        if estimator not in self._gradient_operations:
            gradient = ESTIMATORS[estimator](self.density).gradient
            self._gradient_operations[estimator] = sum(1 for _ in apply_ancestors([gradient]))
        return self._gradient_operations[estimator]

    def interpreted_kernel(
        self, dynamics: Dynamics, estimator: str, metric: str = "identity"
    ) -> InterpretedKernel:
        """Return the interpreted loop of ``dynamics`` with ``estimator`` and ``metric``.

        It compiles nothing beyond the probe, which the measurements use
        too, and the dynamics' position terms where they move with the
        position (:class:`~pymc_sgmcmc.loop.PositionTerms`).
        """
        key = _kernel_key(dynamics, estimator, metric)
        if key not in self._interpreted:
            terms = None
            if compiled_terms_needed(dynamics):
                _log.info("Compiling the %s position terms (%s).", type(dynamics).__name__, _CACHED)
                # JAX's per-call cost would outweigh the terms' own; C runs them on the CPU.
                kwargs = {"mode": "CVM"} if is_jax(self.compile_kwargs) else self.compile_kwargs
                terms = PositionTerms(self.density, dynamics, METRICS[metric], kwargs)
            self._interpreted[key] = InterpretedKernel(
                self.probe, estimator, dynamics, METRICS[metric], terms
            )
        return self._interpreted[key]


def _kernel_key(dynamics: Dynamics, estimator: str, metric: str) -> tuple:
    """Return what a kernel depends on: the declaration, its graph options, estimator, metric."""
    return (type(dynamics), dynamics.graph_options(), estimator, metric)


#: The compiled models of each live model, by what they were compiled from.
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _model_structure(model, value_variables, initial_point) -> tuple:
    """Return what a model's minibatch density depends on besides the data's values.

    The variables (free, observed, potentials) and their transforms by
    identity, the sampled variables' shapes and the data's shapes: a model
    that gains a variable or a potential, or whose data changes length,
    gives a different tuple.
    """
    return (
        tuple(map(id, model.free_RVs)),
        tuple(map(id, model.observed_RVs)),
        tuple(map(id, model.potentials)),
        tuple(id(model.rvs_to_transforms.get(rv)) for rv in model.free_RVs),
        tuple(map(id, value_variables)),
        tuple(np.shape(initial_point[v.name]) for v in value_variables),
        tuple(np.shape(data.get_value(borrow=True)) for data in model.data_vars),
    )


def _options_key(options: dict) -> tuple | None:
    """Return ``options`` as a hashable key, or None if a value is not a plain constant."""
    if not all(isinstance(value, str | int | float | bool | None) for value in options.values()):
        return None
    return tuple(sorted(options.items()))


def compiled_model(
    model,
    value_variables,
    initial_point,
    shared: dict,
    compile_kwargs: dict,
    chunk_rows: int,
    probe_kwargs: dict,
    data: dict | None = None,
    client=None,
) -> CompiledModel:
    """Return the compiled model of ``value_variables``, reused from an earlier step if possible.

    A step method sampling all of a model's continuous variables (no
    ``shared`` replacements) with the same options as an earlier one on the
    same, unchanged model gets that step's :class:`CompiledModel`: its
    density, probe and kernels are compiled once per process instead of
    once per step object. The compiled functions read the data's current
    values, so ``pm.set_data`` with data of the same shape keeps them valid;
    any change of structure compiles anew. A compound step's block, whose
    other variables are shared variables of its own, is always built anew,
    and so is one given ``data``: arrays (in memory or memory-mapped files)
    that stand for the model's ``pm.Data`` of the same names
    (:func:`pymc_sgmcmc.minibatch.with_data`), and one given a Dask
    ``client``, whose probe passes over the data on the cluster.
    """
    options = (_options_key(compile_kwargs), _options_key(probe_kwargs))
    cacheable = not shared and not data and client is None and None not in options
    if cacheable:
        key = (_model_structure(model, value_variables, initial_point), *options, chunk_rows)
        compiled = _COMPILED.get(model, {}).get(key)
        if compiled is not None:
            return compiled
    density = build_minibatch_log_density(model, value_variables, shared)
    if data and shared:
        raise MinibatchError(
            "data= needs the step method to sample every free variable: another step method "
            "would read the model's subset of the rows; sample them all with this step."
        )
    if data:
        containers = {variable.name: variable for variable in model.data_vars}
        density = with_data(density, dict(data), containers)
    compiled = CompiledModel(density, compile_kwargs, chunk_rows, probe_kwargs, client)
    if cacheable:
        _COMPILED.setdefault(model, {})[key] = compiled
    return compiled
