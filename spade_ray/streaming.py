"""`Ahead`: run work on a producer thread, one result ahead of the consumer.

The round uses it to overlap the generator with the solver: while the main thread solves,
executes and scores one chunk of tasks, the producer writes and validates the next. A bounded
queue (one item) is the backpressure: the producer never runs more than a chunk ahead, so a cap
reached on the main thread wastes at most one chunk of generation. All results are consumed on
the caller's thread (the trace store has one SQLite connection).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
_DONE = object()


class Ahead(Generic[T, R]):
    """Iterate to get `(item, work(item))` in item order; an exception `work` raised comes back
    in place of its result, and the producer goes on with the next item. The producer stops
    before its next item once `stop()` was called or `keep_going()` turns False."""

    def __init__(self, work: Callable[[T], R], items: Iterable[T],
                 keep_going: Callable[[], bool], name: str) -> None:
        self._work, self._items, self._keep_going = work, items, keep_going
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True, name=name)

    def stop(self) -> None:
        self._stopped.set()

    def __iter__(self) -> Iterator[tuple[T, R | Exception]]:
        self._thread.start()
        try:
            while (entry := self._queue.get()) is not _DONE:
                yield entry
        finally:
            self.stop()
            while self._thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    self._queue.get(timeout=0.1)
                except queue.Empty:
                    pass
            self._thread.join()

    def _produce(self) -> None:
        try:
            for item in self._items:
                if self._stopped.is_set() or not self._keep_going():
                    break
                try:
                    self._queue.put((item, self._work(item)))
                except Exception as e:  # noqa: BLE001 - handed to the consumer, who records it
                    self._queue.put((item, e))
        finally:
            self._queue.put(_DONE)
