"""Ctrl-C while compiled code runs: held until the code returns, then handled as usual."""

from __future__ import annotations

import _signal
import signal
import threading

__all__ = ["InterruptsHeld", "interrupted", "interrupts_held"]

_SIGINT = int(signal.SIGINT)
# The handler is swapped through the C module behind :mod:`signal`, whose
# ``signal`` takes and returns plain integers and handlers: ``signal.signal``
# adds enum conversions that make a pair of calls cost about 5 microseconds
# instead of 0.4, paid at every draw.


class InterruptsHeld:
    """Hold a SIGINT that arrives inside a ``with`` block and deliver it when the block ends.

    Compiled Numba code calls back into Python at times; a ``KeyboardInterrupt``
    raised inside such a callback can crash the interpreter instead of
    reaching ``pm.sample``. Inside the block the signal is only recorded; at
    its end the handler that was in place before is restored and the signal
    raised again, so it is handled exactly as it would have been (PyMC's
    handler, Python's ``KeyboardInterrupt``, or ignored), one kernel call
    later. Outside the main thread, where Python runs no signal handler, the
    block runs as is. One object serves any number of blocks, one at a time.
    """

    def __init__(self):
        self._received = False
        self._previous = None
        self._active = False
        self._record = self._on_signal

    def _on_signal(self, signum, frame):
        self._received = True

    def __enter__(self):
        self._active = threading.current_thread() is threading.main_thread()
        if self._active:
            self._received = False
            self._previous = _signal.signal(_SIGINT, self._record)
        return self

    def __exit__(self, *exception):
        if self._active:
            _signal.signal(_SIGINT, self._previous)
            self._active = False
            if self._received:
                signal.raise_signal(signal.SIGINT)
        return False


#: The one instance the step methods hold their kernel calls with.
interrupts_held = InterruptsHeld()


def interrupted(error: BaseException | None) -> bool:
    """Return whether ``error`` or one of its causes is a ``KeyboardInterrupt``."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
