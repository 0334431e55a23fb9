"""Processing-time services and the runtime context."""

import queue
import threading

import pytest

from raylink.api.state import ValueStateDescriptor
from raylink.operators import (
    ManualProcessingTimeService,
    RecordContext,
    StreamingRuntimeContext,
    SystemProcessingTimeService,
)

pytestmark = pytest.mark.timeout(30)


def test_manual_service_fires_due_callbacks_in_timestamp_order():
    clock = ManualProcessingTimeService(start=10)
    fired = []
    clock.register_timer(30, lambda ts: fired.append(("b", ts)))
    clock.register_timer(20, lambda ts: fired.append(("a", ts)))
    cancelled = clock.register_timer(25, lambda ts: fired.append(("x", ts)))
    clock.register_timer(30, lambda ts: fired.append(("c", ts)))
    assert cancelled.cancel() is True
    assert clock.num_pending() == 3
    clock.set_current_time(29)
    assert fired == [("a", 20)]
    clock.advance(1)
    assert fired == [("a", 20), ("b", 30), ("c", 30)]
    assert clock.current_processing_time() == 30
    clock.set_current_time(5)  # never goes back
    assert clock.current_processing_time() == 30
    late = clock.register_timer(1, lambda ts: fired.append(("late", ts)))
    clock.set_current_time(30)
    assert fired[-1] == ("late", 1) and late.cancel() is False


def test_system_service_routes_callbacks_through_the_mail_executor():
    mails = queue.Queue()
    service = SystemProcessingTimeService(mail_executor=mails.put)
    ran_on = []
    now = service.current_processing_time()
    service.register_timer(now - 5, lambda ts: ran_on.append((ts, threading.current_thread())))
    mail = mails.get(timeout=10)  # the timer thread only enqueued the callback
    assert ran_on == []
    mail()  # the "task thread" runs it
    assert ran_on == [(now - 5, threading.current_thread())]
    mail()  # running a mail twice does not fire twice
    assert len(ran_on) == 1


def test_system_service_cancel_and_shutdown():
    mails = queue.Queue()
    service = SystemProcessingTimeService(mail_executor=mails.put)
    fired = []
    now = service.current_processing_time()
    far = service.register_timer(now + 3_600_000, fired.append)
    assert service.num_pending() == 1
    assert far.cancel() is True
    due = service.register_timer(now, fired.append)
    mail = mails.get(timeout=10)
    due.cancel()  # cancelled after being enqueued: the mail does nothing
    mail()
    assert fired == []
    service.register_timer(now + 3_600_000, fired.append)
    service.shutdown()
    assert service.num_pending() == 0
    assert service.register_timer(now, fired.append).cancelled


def test_runtime_context_accessors_and_derive():
    clock = ManualProcessingTimeService()
    rc = StreamingRuntimeContext(
        task_name="Map -> Filter",
        operator_name="Map",
        operator_id="abc",
        subtask_index=2,
        parallelism=4,
        max_parallelism=256,
        attempt_number=1,
        record_context=RecordContext(7),
        processing_time_service=clock,
        job_parameters={"k": "v"},
    )
    assert rc.get_task_name() == "Map -> Filter"
    assert rc.get_task_name_with_subtasks() == "Map -> Filter (3/4)"
    assert rc.get_index_of_this_subtask() == 2
    assert rc.get_number_of_parallel_subtasks() == 4
    assert rc.get_max_number_of_parallel_subtasks() == 256
    assert rc.get_attempt_number() == 1
    assert rc.get_job_parameter("k") == "v" and rc.get_job_parameter("x", "d") == "d"
    rc.get_metrics_group().counter("n").inc(3)
    assert rc.get_metrics_group().counter("n").get_count() == 3
    sibling = rc.derive("Filter", "def")
    assert sibling.operator_name == "Filter" and sibling.operator_id == "def"
    assert sibling.record_context is rc.record_context
    assert sibling.accumulators is rc.accumulators
    assert sibling.processing_time_service is clock
    assert sibling.keyed_state_backend is None
    with pytest.raises(RuntimeError, match="keyed stream"):
        sibling.get_state(ValueStateDescriptor("v"))
    with pytest.raises(ValueError, match="subtask index 4"):
        StreamingRuntimeContext(subtask_index=4, parallelism=4)
