"""gc_paused: no cyclic collection inside the block, the collector's state restored after."""

import gc

import pytest

from marketplace.gc_pause import gc_paused


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_no_collection_runs_inside_and_the_collector_is_back_after(collector_enabled):
    # given the collector enabled, and a callback that records every collection
    collections = []

    def record(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(record)
    try:
        # when a block allocates far beyond the collector's threshold inside gc_paused
        with gc_paused():
            inside = gc.isenabled()
            collections.clear()  # any that started before the block
            kept = [[i] for i in range(50 * gc.get_threshold()[0])]
            during = list(collections)
        after = gc.isenabled()
    finally:
        gc.callbacks.remove(record)
    # then no collection started in it, and the collector runs again after it
    assert len(kept) > 0
    assert inside is False
    assert during == []
    assert after is True


def test_the_state_is_restored_on_an_exception_and_a_disabled_collector_stays_disabled(
    collector_enabled,
):
    # given the collector enabled; when the block raises
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    # then it is enabled again
    assert gc.isenabled()
    # given it disabled by the caller; when a block runs, then it stays disabled after
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
