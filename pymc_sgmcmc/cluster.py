"""Full-data passes on a Dask cluster: a map over chunks of rows, reduced in order.

A step method given ``client=`` (a :class:`distributed.Client`) runs its
full-data passes (mode finding, the control variate's centre, its
refreshes) on the cluster's workers instead of in the chain's process::

    from dask.distributed import Client

    client = Client("tcp://scheduler:8786")
    step = SGHMC(data={"X": np.load("X.npy", mmap_mode="r"), ...}, client=client)

Each worker builds the tuning functions once per step method from a recipe
(the density and its compile options, sent once per process and chain) and
sums the log likelihood and its gradient over the chunks of rows it is
given: contiguous ranges of ``chunk_rows`` rows, so a worker reads a file in
runs. The chain's process gathers the chunks' sums and adds them up in the
order of the rows, exactly as the in-process pass
(:meth:`pymc_sgmcmc.estimators.Probe.full_likelihood`) does, so the two give
the same numbers up to the rounding of the chunks' own sums. Data in memory
travels to every worker inside the recipe; a memory-mapped ``.npy`` file
travels as its name (:class:`pymc_sgmcmc.disk_rows.DiskRows`), so the
workers must see the same file system.

Minibatch steps stay in the chain's process: a step reads a few hundred rows,
far less than a message to a worker costs.
"""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["ClusterPasses", "check_client"]

#: Tasks per worker of one full pass: several, so a slow worker delays the
#: pass by a fraction of its share.
TASKS_PER_WORKER = 4

#: Tuning functions a worker keeps, for as many step methods.
_KEPT_PROBES = 4

#: The tuning functions built on this worker, by the recipe's token.
_WORKER_PROBES: OrderedDict = OrderedDict()


def check_client(client):
    """Return ``client`` if it is a :class:`distributed.Client`, else raise a one-line error."""
    if client is None:
        return None
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - a Client cannot exist without the package
        Client = ()
    if not isinstance(client, Client):
        raise TypeError(
            "client must be a dask.distributed.Client (e.g. Client(scheduler_address)), "
            f"got {type(client).__name__}."
        )
    return client


@dataclass(frozen=True)
class _Recipe:
    """What a worker needs to build the tuning functions of one step method."""

    token: str
    density: object
    compile_kwargs: dict
    chunk_rows: int


def _worker_probe(recipe: _Recipe):
    """Return the tuning functions of ``recipe`` on this worker, built on first use."""
    from pymc_sgmcmc.estimators import Probe

    probe = _WORKER_PROBES.get(recipe.token)
    if probe is None:
        probe = Probe(recipe.density, recipe.compile_kwargs, recipe.chunk_rows)
        _WORKER_PROBES[recipe.token] = probe
        while len(_WORKER_PROBES) > _KEPT_PROBES:
            _WORKER_PROBES.popitem(last=False)
    _WORKER_PROBES.move_to_end(recipe.token)
    return probe


def _chunk_sums(recipe: _Recipe, position, blocks, starts) -> list:
    """Return the log likelihood and its gradient on the chunks of rows starting at ``starts``.

    Runs on a worker. ``blocks`` are the values of the model's other free
    variables (sampled by other step methods) at this pass.
    """
    probe = _worker_probe(recipe)
    # Arrays arrive in the message's buffers, which need not be aligned as
    # compiled code expects: copies are.
    position = np.array(position)
    for shared, value in zip(probe.density.other_blocks, blocks, strict=True):
        shared.set_value(np.array(value))
    return [probe.chunk_terms(position, start) for start in starts]


class ClusterPasses:
    """The full-data passes of one step method's tuning functions, on a Dask cluster.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster. A chain process that PyMC forks or spawns
        connects a client of its own to the same scheduler.
    density : MinibatchLogDensity
        The density the workers build their tuning functions from.
    compile_kwargs : dict
        Passed to :func:`pytensor.function` on the workers.
    chunk_rows : int
        Rows per chunk.
    """

    def __init__(self, client, density, compile_kwargs: dict, chunk_rows: int):
        self.address = client.scheduler.address
        self._recipe = _Recipe(uuid.uuid4().hex, density, dict(compile_kwargs), int(chunk_rows))
        self._connection = (os.getpid(), client, None)
        self._sent = ()

    def __reduce__(self):
        # A spawned chain process connects to the same scheduler.
        return (_reconnected, (self.address, self._recipe))

    def _connected(self):
        """Return this process's client and the recipe's future on the cluster.

        The workers' copies of the density hold the data as it was when the
        recipe was sent: data set anew since (``pm.set_data``) sends a new
        recipe, which the workers build anew.
        """
        pid, client, recipe = self._connection
        if pid != os.getpid():
            # A forked process shares no connection with its parent.
            from distributed import Client

            client, recipe = Client(self.address, set_as_default=False), None
        values = tuple(data.get_value(borrow=True) for data in self._recipe.density.data)
        if recipe is not None and any(
            now is not sent for now, sent in zip(values, self._sent, strict=True)
        ):
            self._recipe = replace(self._recipe, token=uuid.uuid4().hex)
            recipe = None
        if recipe is None:
            recipe = client.scatter(self._recipe, broadcast=True, hash=False)
            self._sent = values
        self._connection = (os.getpid(), client, recipe)
        return client, recipe

    def chunk_sums(self, position, blocks, n_rows: int) -> list:
        """Return the in-order list of every chunk's log likelihood and gradient at ``position``.

        The chunks are split into contiguous ranges, :data:`TASKS_PER_WORKER`
        per worker, mapped over the workers and gathered in order.
        """
        client, recipe = self._connected()
        starts = np.arange(0, n_rows, self._recipe.chunk_rows)
        workers = max(1, len(client.scheduler_info().get("workers", ())))
        ranges = np.array_split(starts, min(len(starts), TASKS_PER_WORKER * workers))
        position = np.asarray(position)
        futures = [
            client.submit(_chunk_sums, recipe, position, blocks, list(chunk), pure=False)
            for chunk in ranges
        ]
        return [terms for task in client.gather(futures) for terms in task]


def _reconnected(address, recipe) -> ClusterPasses:
    passes = ClusterPasses.__new__(ClusterPasses)
    passes.address = address
    passes._recipe = recipe
    passes._connection = (None, None, None)
    passes._sent = ()
    return passes
