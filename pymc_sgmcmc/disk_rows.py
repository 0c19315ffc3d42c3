"""Data given to a step method in place of the model's: in memory or on disk.

A model written for data too large for memory holds a subset of its rows in
``pm.Data`` (so that NUTS, prior predictive checks and PyMC's own checks run
on it), and the step method is given the full arrays by the containers'
names, ``SGHMC(data={"X": np.load("X.npy", mmap_mode="r"), ...})``. Only the
step method's compiled functions read them; the model is not changed.

A memory-mapped ``.npy`` file is read in place: a minibatch gathers its rows
from the file, and a full-data pass reads it chunk by chunk
(:meth:`pymc_sgmcmc.estimators.Probe.full`). The pages read stay in the
operating system's file cache, shared and reclaimable, and are released from
the process (:class:`PageRelease`): those of scattered rows before the next
read, those of runs of rows every :data:`RELEASE_PAGES` pages, so its resident
memory is bounded by the rows of one read, not by N. Minibatch rows are drawn as for data in memory:
each epoch is a uniform random permutation of all N rows, read ``batch_size``
rows per step, so every row is visited once per epoch; reading them is random
access into the file.

A Zarr array is compressed in chunks of many rows, so reading one scattered
row would decompress its whole chunk. It is copied once, chunk by chunk, into
an uncompressed ``.npy`` file in the system's temporary directory
(:func:`stage_zarr`), which is then read as above: memory stays bounded by a
few chunks while copying, the minibatches are those of the same rows in
memory, and the copy is removed with the Zarr array object.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np

__all__ = [
    "PAGE_BYTES",
    "PIECE_ROWS",
    "RELEASE_PAGES",
    "SCATTERED_ROW_BYTES",
    "DiskRows",
    "PageRelease",
    "is_on_disk",
    "is_run",
    "prepare_rows",
    "stage_zarr",
]

#: Pages of memory-mapped files read between two releases: at most 64 MiB
#: resident. Rows read in one run, as a full-data pass reads them, occupy the
#: pages they span until released.
RELEASE_PAGES = 16_384

#: Bytes per page of memory.
PAGE_BYTES = mmap.PAGESIZE

#: What one row read alone may keep resident: the operating system maps the
#: whole block of the file cache that holds it (0.6 to 0.7 MiB per row
#: measured on Linux 6.18 for an 8 GB file), so such rows release their pages
#: after every read.
SCATTERED_ROW_BYTES = 2**21

#: Rows read alone in one call of the tuning functions, at most: a larger
#: set is read in pieces of this many rows, released in between.
PIECE_ROWS = 256

#: Bytes of a Zarr array copied at a time (whole chunks, at least one).
STAGE_BYTES = 2**26

#: Copies of Zarr arrays by the array object's id, while it lives.
_STAGED: dict = {}


class DiskRows(np.memmap):
    """A read-only ``.npy`` file mapped copy-on-write, which pickles as its file name.

    Copy-on-write keeps the array writeable in NumPy's eyes (it is never
    written), so compiled code takes it with the same type as data in memory
    and is not compiled again for a read-only one; pickling it (for chain
    processes that PyMC does not fork) maps the file again instead of copying
    its contents.
    """

    def __reduce__(self):
        return (_map, (self.filename, self.dtype.str, self.shape, self.offset))


def _map(filename, dtype, shape, offset) -> DiskRows:
    return DiskRows(filename, dtype=np.dtype(dtype), mode="c", shape=shape, offset=offset)


def prepare_rows(name: str, array, model_value: np.ndarray) -> np.ndarray:
    """Return ``array`` ready to stand for the model's ``pm.Data`` ``name``.

    Parameters
    ----------
    name : str
        The container's name, for the messages.
    array : numpy.ndarray, numpy.memmap or zarr.Array
        The full data: an array in memory, a memory-mapped ``.npy`` file as
        :func:`numpy.load` returns it with ``mmap_mode``, or a Zarr array
        (copied by :func:`stage_zarr`).
    model_value : numpy.ndarray
        The container's value in the model (a subset of the rows).

    Raises
    ------
    TypeError
        If ``array`` is none of these.
    ValueError
        If its dtype, trailing shape or memory layout differ from what the
        model's compiled functions take. An array in memory of another dtype
        is converted where that keeps its values (integers of another width);
        a memory-mapped file must be stored with the container's dtype.
    """
    if _is_zarr(array):
        return stage_zarr(name, array, model_value)
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"data['{name}'] must be a NumPy array, a memory-mapped .npy file "
            f"(np.load(path, mmap_mode='r')) or a Zarr array, got {type(array).__name__}."
        )
    if array.dtype != model_value.dtype:
        converted = None
        if not isinstance(array, np.memmap) and np.can_cast(
            array.dtype, model_value.dtype, casting="same_kind"
        ):
            converted = array.astype(model_value.dtype)
        if converted is None or not np.array_equal(converted, array):
            raise ValueError(
                f"data['{name}'] has dtype {array.dtype} but the model's pm.Data '{name}' has "
                f"{model_value.dtype} (PyMC's choice for such data): store the array as "
                f"{model_value.dtype}."
            )
        array = converted
    if array.ndim != model_value.ndim or array.shape[1:] != model_value.shape[1:]:
        raise ValueError(
            f"data['{name}'] has shape {array.shape} but the model's pm.Data '{name}' has "
            f"{model_value.shape}: rows may differ in number, not in shape."
        )
    if not array.flags.c_contiguous:
        raise ValueError(
            f"data['{name}'] is not stored in C order: save it with "
            "np.save(path, np.ascontiguousarray(array))."
        )
    if isinstance(array, np.memmap):
        if not isinstance(array.base, mmap.mmap):
            raise ValueError(
                f"data['{name}'] is a view of a memory-mapped file: give the file as "
                "np.load(path, mmap_mode='r') returns it, and its rows in the model as a subset."
            )
        return _map(array.filename, array.dtype.str, array.shape, array.offset)
    if not array.flags.writeable:
        return array.copy()
    return array


def _is_zarr(array) -> bool:
    return type(array).__module__.split(".")[0] == "zarr"


def is_on_disk(array) -> bool:
    """Return whether ``array`` is a memory-mapped file or a Zarr array."""
    return isinstance(array, np.memmap) or _is_zarr(array)


def stage_zarr(name: str, array, model_value: np.ndarray) -> DiskRows:
    """Return a Zarr array copied chunk by chunk into a memory-mapped ``.npy`` file.

    The copy lives in a directory of :func:`tempfile.mkdtemp` (set ``TMPDIR``
    to move it), is made once per Zarr array object (again if its shape
    changed), and is removed when that object is. At most
    :data:`STAGE_BYTES` (whole chunks) are read at a time, and the written
    pages are released as they are flushed.

    Parameters
    ----------
    name : str
        The container's name, for the messages.
    array : zarr.Array
        The full data, its rows along the first axis.
    model_value : numpy.ndarray
        The container's value in the model (a subset of the rows).

    Raises
    ------
    ValueError
        If the array's trailing shape differs from the container's, or its
        values change when cast to the container's dtype.
    """
    staged = _STAGED.get(id(array))
    if staged is not None and staged[0]() is array and staged[1].shape == tuple(array.shape):
        return staged[1]
    if len(array.shape) != model_value.ndim or tuple(array.shape[1:]) != model_value.shape[1:]:
        raise ValueError(
            f"data['{name}'] has shape {tuple(array.shape)} but the model's pm.Data '{name}' has "
            f"{model_value.shape}: rows may differ in number, not in shape."
        )
    directory = tempfile.mkdtemp(prefix="pymc_sgmcmc-")
    path = Path(directory) / f"{name}.npy"
    try:
        copy = np.lib.format.open_memmap(
            path, mode="w+", dtype=model_value.dtype, shape=tuple(array.shape)
        )
        row_bytes = max(copy.itemsize, copy.strides[0])
        chunk_rows = int(array.chunks[0])
        slab = max(1, STAGE_BYTES // (chunk_rows * row_bytes)) * chunk_rows
        for start in range(0, len(copy), slab):
            values = np.asarray(array[start : start + slab])
            converted = values.astype(model_value.dtype, copy=False)
            if values.dtype != converted.dtype and not np.array_equal(converted, values):
                raise ValueError(
                    f"data['{name}'] has dtype {values.dtype} but the model's pm.Data '{name}' "
                    f"has {model_value.dtype} (PyMC's choice for such data): store the array as "
                    f"{model_value.dtype}."
                )
            copy[start : start + len(values)] = converted
            copy.flush()
            if hasattr(mmap, "MADV_DONTNEED"):
                copy.base.madvise(mmap.MADV_DONTNEED)
        mapped = _map(str(path), copy.dtype.str, copy.shape, copy.offset)
        del copy
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    key = id(array)
    _STAGED[key] = (weakref.ref(array), mapped)
    weakref.finalize(array, _remove_copy, key, directory, os.getpid())
    return mapped


def _remove_copy(key, directory, owner: int) -> None:
    _STAGED.pop(key, None)
    # A forked chain process holds a copy of the Zarr array object, and may
    # drop it while the process that made the file still reads it.
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


def is_run(indices) -> bool:
    """Return whether ``indices`` are consecutive increasing rows."""
    indices = np.ravel(indices)
    return indices.size < 2 or bool(np.all(np.diff(indices) == 1))


def _mapped_file(array) -> DiskRows | None:
    """Return the mapped file ``array`` reads, or None for data in memory."""
    while isinstance(array, np.ndarray):
        if isinstance(array, DiskRows):
            return array
        array = array.base
    return None


class PageRelease:
    """Releases the pages of memory-mapped data after every :data:`RELEASE_PAGES` pages read.

    Parameters
    ----------
    arrays : sequence of numpy.ndarray
        The data; those that are not memory-mapped files are left alone.
    """

    def __init__(self, arrays):
        self._files = [file for file in map(_mapped_file, arrays) if file is not None]
        self._row_pages = sum(file.strides[0] for file in self._files) / PAGE_BYTES
        self._pages = 0.0
        #: How many times the pages were released.
        self.releases = 0

    @property
    def active(self) -> bool:
        """Whether any of the data is a memory-mapped file."""
        return bool(self._files)

    def read(self, indices) -> None:
        """Count the pages about to be read at ``indices``; release those read before if due.

        Rows in one run (a chunk of a full pass) count the pages they span;
        rows read alone (a minibatch) count :data:`SCATTERED_ROW_BYTES` each
        and file, so that their pages are released before the next read.
        """
        if not self._files:
            return
        rows = np.size(indices)
        if is_run(indices):
            self._pages += rows * self._row_pages + len(self._files)
        else:
            self._pages += rows * len(self._files) * SCATTERED_ROW_BYTES / PAGE_BYTES
        if self._pages >= RELEASE_PAGES:
            self.release()

    def release(self) -> None:
        """Drop the mapped files' pages from the process (the file cache keeps them)."""
        self._pages = 0.0
        self.releases += 1
        if not hasattr(mmap, "MADV_DONTNEED"):
            return
        for file in self._files:
            file.base.madvise(mmap.MADV_DONTNEED)
