"""BusyClock: the time at least one call was in flight, overlapping calls counted once (on a
clock the test moves by hand)."""

from spade_ray.rollout.actor import BusyClock


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_overlapping_calls_count_once():
    now = Clock()
    busy = BusyClock(now)
    busy.__enter__()  # a solver call ...
    now.t += 2
    with busy:  # ... and a generator call waiting on the same engine
        now.t += 1
    now.t += 3
    busy.__exit__()
    assert busy.seconds() == 6


def test_idle_time_is_not_counted_and_a_call_in_flight_is():
    now = Clock()
    busy = BusyClock(now)
    with busy:
        now.t += 1
    now.t += 5
    assert busy.seconds() == 1
    with busy:
        now.t += 2
        assert busy.seconds() == 3
