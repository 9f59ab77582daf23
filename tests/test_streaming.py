"""streaming.Ahead: the producer thread the round generates on, one result ahead."""

import threading

from spade_ray.streaming import Ahead


def test_results_come_back_in_item_order_with_their_items():
    ahead = Ahead(lambda x: x * 10, [1, 2, 3], keep_going=lambda: True, name="t")
    assert list(ahead) == [(1, 10), (2, 20), (3, 30)]


def test_an_exception_comes_back_in_place_of_its_result_and_the_rest_still_run():
    def work(x):
        if x == 2:
            raise ValueError("two")
        return x

    results = list(Ahead(work, [1, 2, 3], keep_going=lambda: True, name="t"))
    assert [(item, type(r).__name__) for item, r in results] == [
        (1, "int"), (2, "ValueError"), (3, "int")]


def test_the_producer_runs_at_most_one_item_ahead():
    started = []
    ahead = Ahead(started.append, range(10), keep_going=lambda: True, name="t")
    entries = iter(ahead)
    next(entries)
    threading.Event().wait(0.2)  # let the producer run as far as the queue allows
    assert len(started) <= 3  # the one consumed, one in the queue, one waiting to be put
    entries.close()


def test_stop_ends_the_stream_before_the_next_item():
    ahead = Ahead(lambda x: x, range(100), keep_going=lambda: True, name="t")
    seen = []
    for item, _ in ahead:
        seen.append(item)
        if item == 1:
            ahead.stop()
    assert seen[:2] == [0, 1] and len(seen) <= 4  # what was already in flight, then nothing


def test_keep_going_false_stops_the_producer():
    results = list(Ahead(lambda x: x, range(100), keep_going=lambda: False, name="t"))
    assert results == []
