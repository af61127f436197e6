"""A bounded producer-consumer pipeline: batches are prepared ahead while the model trains.

``prefetch(jobs, workers, depth)`` runs the callables ``jobs`` (each makes one batch) on ``workers``
threads, at most ``depth`` ahead of the consumer, and yields their results in the order of ``jobs``.
Sampling and feature gathering are numpy/torch/DGL array work that releases the GIL, so they overlap
with the model's forward and backward passes. Each job carries its own random seed, so the batches do
not depend on the number of workers. An exception in a job is raised in the consumer; a consumer that
stops early (``break``) stops the producers.
"""
from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetch(jobs: Iterable[Callable], workers: int = 1, depth: int = 4) -> Iterator:
    if workers <= 0:
        for job in jobs:
            yield job()
        return
    depth = max(1, depth)
    if workers == 1:
        yield from _single(jobs, depth)
    else:
        yield from _pool(jobs, workers, max(depth, workers))


def _single(jobs: Iterable[Callable], depth: int) -> Iterator:
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for job in jobs:
                if stop.is_set() or not put(job()):
                    return
        except BaseException as exc:  # handed to the consumer
            put(_Failure(exc))
            return
        put(_DONE)

    thread = threading.Thread(target=produce, name="fourdb-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join()


def _pool(jobs: Iterable[Callable], workers: int, depth: int) -> Iterator:
    pending: deque = deque()
    it = iter(jobs)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fourdb-sampler") as pool:
        try:
            for job in it:
                pending.append(pool.submit(job))
                if len(pending) >= depth:
                    break
            while pending:
                result = pending.popleft().result()
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(pool.submit(nxt))
                yield result
        finally:
            for f in pending:
                f.cancel()
