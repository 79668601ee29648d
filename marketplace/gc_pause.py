"""Python's cyclic garbage collector held off for a bounded burst of allocation.

A batch that builds tens of thousands of objects (the dispatcher's jobs, offers and events)
triggers a collection every few hundred allocations, and each full collection walks every
object alive, those of the batch included: the batch's cost per object grows with its size.
Inside `gc_paused()` no collection runs; reference counting still frees everything that is
not in a cycle, and the collector runs again as usual once the block is left (the batch's
objects are garbage by then, or long-lived and collected in the next cycles as before).
"""

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """No cyclic collection inside the block; the collector's state is restored on the way
    out, exception or not (left disabled if it was disabled)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
