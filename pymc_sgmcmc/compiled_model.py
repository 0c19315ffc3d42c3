"""A model block compiled once and shared by every chain: density, probe and kernels."""

from __future__ import annotations

import logging

from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.estimators import ESTIMATORS, Probe
from pymc_sgmcmc.kernel import Kernel
from pymc_sgmcmc.metric import METRICS
from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = ["CompiledModel"]

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
    """

    def __init__(
        self,
        density: MinibatchLogDensity,
        compile_kwargs: dict | None = None,
        chunk_rows=50_000,
        probe_kwargs: dict | None = None,
    ):
        self.density = density
        self.compile_kwargs = dict(compile_kwargs or {})
        self.probe_kwargs = dict(self.compile_kwargs if probe_kwargs is None else probe_kwargs)
        self.chunk_rows = int(chunk_rows)
        self._probe = None
        self._kernels = {}

    @property
    def probe(self) -> Probe:
        """The numeric probe, compiled on first use."""
        if self._probe is None:
            _log.info("Compiling the tuning functions (%s).", _CACHED)
            self._probe = Probe(self.density, self.probe_kwargs, self.chunk_rows)
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
        key = (type(dynamics), dynamics.graph_options(), estimator, metric)
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
