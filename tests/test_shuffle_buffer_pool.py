"""Buffer pools: permits, availability futures, overdraft, network-wide limits."""

import threading

import pytest

from raylink.shuffle.buffer_pool import InsufficientBuffersError, LocalBufferPool, NetworkBufferPool

pytestmark = pytest.mark.timeout(30)


def test_standalone_pool_blocks_and_future_completes_on_recycle():
    pool = LocalBufferPool(None, 0, 2)
    assert pool.request() and pool.request()
    assert not pool.request()
    assert not pool.is_available()
    fut = pool.get_available_future()
    assert not fut.done()
    assert pool.get_available_future() is fut  # one future per unavailable period
    pool.recycle()
    assert fut.done() and pool.is_available()
    assert pool.get_available_future().done()


def test_future_completes_from_another_thread():
    pool = LocalBufferPool(None, 0, 1)
    assert pool.request()
    fut = pool.get_available_future()
    started = threading.Event()

    def consumer():
        started.wait(5)
        pool.recycle()

    t = threading.Thread(target=consumer)
    t.start()
    started.set()
    assert fut.result(timeout=5) is None
    t.join(5)
    assert pool.is_available()


def test_network_pool_limits_local_pools():
    net = NetworkBufferPool(4)
    a = net.create_buffer_pool(1, 3)
    b = net.create_buffer_pool(1, 3)
    assert net.free_buffers == 2
    assert a.request() and a.request() and a.request()  # 1 guaranteed + 2 borrowed
    assert not a.request()  # its max
    assert b.request()  # guaranteed
    assert not b.request()  # network exhausted
    fut = b.get_available_future()
    assert not fut.done()
    a.recycle()  # a borrowed segment goes back to the network pool
    assert fut.done()
    assert b.request()
    assert net.usage() == 1.0


def test_insufficient_buffers():
    net = NetworkBufferPool(3)
    net.create_buffer_pool(2, 4)
    with pytest.raises(InsufficientBuffersError, match="Insufficient number of network buffers"):
        net.create_buffer_pool(2, 4)
    with pytest.raises(InsufficientBuffersError):
        net.request_exclusive(2)
    net.request_exclusive(1)
    assert net.free_buffers == 0
    net.recycle_exclusive(1)
    assert net.free_buffers == 1


def test_destroy_returns_reservation():
    net = NetworkBufferPool(4)
    p = net.create_buffer_pool(2, 4)
    assert p.request() and p.request() and p.request()
    assert net.free_buffers == 1
    p.destroy()
    assert net.free_buffers == 4


def test_a_destroyed_pool_is_no_longer_referenced_by_the_network_pool():
    """A pool (min 0, as a gate's floating pool) waiting for a segment when its task goes away:
    the executor-wide network pool (which outlives jobs in a session cluster) must not keep it."""
    import gc
    import weakref

    net = NetworkBufferPool(1)
    other = net.create_buffer_pool(0, 2)
    assert other.request()  # the only segment
    pool = net.create_buffer_pool(0, 2)
    assert not pool.request()  # waits for the network pool
    alive = weakref.ref(pool)
    pool.destroy()
    del pool
    gc.collect()
    assert alive() is None
    other.recycle()
    assert net.free_buffers == 1


def test_overdraft_keeps_pool_unavailable_until_paid_back():
    pool = LocalBufferPool(None, 0, 2)
    assert pool.request_overdraft() and pool.request_overdraft()
    assert pool.request_overdraft() is False  # overdraft
    assert pool.num_in_use == 3 and pool.num_overdraft == 1
    assert pool.usage() == 1.5
    fut = pool.get_available_future()
    pool.recycle()  # pays the overdraft back; still at max
    assert not fut.done() and not pool.is_available()
    pool.recycle()
    assert fut.done() and pool.is_available()
    assert pool.usage() == 0.5


def test_buffer_listener_called_on_recycle():
    pool = LocalBufferPool(None, 0, 1)
    assert pool.add_buffer_listener(lambda: False) is False  # available now: not registered
    assert pool.request()
    got = []

    def listener():
        ok = pool.request()
        got.append(ok)
        return not ok

    assert pool.add_buffer_listener(listener) is True
    pool.recycle()
    assert got == [True]
    assert pool.num_in_use == 1


def test_recycle_more_than_in_use_is_an_error():
    pool = LocalBufferPool(None, 0, 2)
    with pytest.raises(ValueError):
        pool.recycle()


def test_concurrent_request_and_recycle_keep_counts_exact():
    import queue

    pool = LocalBufferPool(None, 0, 8)
    n = 5000
    handed_over = queue.Queue()
    max_in_use = []

    def producer():
        for i in range(n):
            while not pool.request():
                pool.get_available_future().result(timeout=5)
            max_in_use.append(pool.num_in_use)
            handed_over.put(i)

    def consumer():
        for _ in range(n):
            handed_over.get(timeout=5)
            pool.recycle()

    tp = threading.Thread(target=producer)
    tc = threading.Thread(target=consumer)
    tp.start()
    tc.start()
    tp.join(20)
    tc.join(20)
    assert max(max_in_use) <= 8
    assert pool.num_in_use == 0 and pool.is_available()
