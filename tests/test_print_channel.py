"""The print sink's hand-over to the driver (``operators.print_channel``): with a channel
installed the ``N> record`` lines queue in order instead of reaching the process's stdout, a
full queue holds the printing task back, and with nobody reading they end on stdout."""

from __future__ import annotations

import threading

import pytest

from raylink.operators import print_channel
from raylink.operators.print_channel import PrintChannel
from raylink.operators.sinks import PrintSinkOperator
from raylink.tests.harness import OneInputStreamOperatorTestHarness

pytestmark = pytest.mark.timeout(60)


def open_sink(to_stderr: bool = False) -> PrintSinkOperator:
    harness = OneInputStreamOperatorTestHarness(PrintSinkOperator(to_stderr=to_stderr), subtask_index=1, parallelism=2)
    return harness.open().operator


@pytest.fixture
def channel(monkeypatch):
    installed = PrintChannel(max_lines=4)
    monkeypatch.setattr(print_channel, "_installed", installed)
    return installed


def test_lines_queue_in_order_for_the_driver_and_not_on_stdout(channel, capsys):
    sink = open_sink()
    sink.process_batch([("a", 1), ("b", 2)])
    sink.process_element(("a", 2))
    open_sink(to_stderr=True).process_element("oops")
    assert capsys.readouterr().out == ""
    chunks = channel.take()
    assert chunks == [(False, "2> ('a', 1)\n2> ('b', 2)\n"), (False, "2> ('a', 2)\n"), (True, "2> oops\n")]
    print_channel.write_chunks(chunks)
    captured = capsys.readouterr()
    assert captured.out == "2> ('a', 1)\n2> ('b', 2)\n2> ('a', 2)\n" and captured.err == "2> oops\n"
    assert channel.take() == []


def test_a_full_channel_holds_the_printer_until_the_driver_takes(channel):
    sink = open_sink()
    sink.process_batch(list(range(4)))  # the channel's bound
    done = threading.Event()
    printer = threading.Thread(target=lambda: (sink.process_batch([4]), done.set()))
    printer.start()
    assert not done.wait(0.3)  # held back while the queue is full
    assert "".join(text for _, text in channel.take()) == "".join(f"2> {i}\n" for i in range(4))
    assert done.wait(10)
    printer.join(10)
    assert channel.take() == [(False, "2> 4\n")]


def test_with_nobody_reading_the_lines_go_to_the_process_s_stdout(channel, monkeypatch, capsys):
    monkeypatch.setattr(print_channel, "PUT_TIMEOUT_S", 0.2)
    sink = open_sink()
    sink.process_batch(list(range(4)))
    sink.process_batch([4, 5])
    assert capsys.readouterr().out == "2> 4\n2> 5\n"
    assert len(channel.take()) == 1


def test_without_a_channel_the_sink_prints_itself(monkeypatch, capsys):
    monkeypatch.setattr(print_channel, "_installed", None)
    open_sink().process_batch([("x", 1)])
    assert capsys.readouterr().out == "2> ('x', 1)\n"
