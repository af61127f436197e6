"""A bounded producer-consumer pipeline: batches are prepared ahead while the model trains.

``prefetch(jobs, workers, depth)`` runs the callables ``jobs`` (each makes one batch) on ``workers``
threads, at most ``depth`` ahead of the consumer, and yields their results in the order of ``jobs``.
Sampling and feature gathering are numpy/torch/DGL array work that releases the GIL, so they overlap
with the model's forward and backward passes. Each job carries its own random seed, so the batches do
not depend on the number of workers. An exception in a job is raised in the consumer; a consumer that
stops early (``break``) stops the producers.

Each producer thread runs its array operations on one core (``torch.set_num_threads(1)`` in that
thread), and the consumer keeps the cores they leave (``cpu_count - workers`` intra-op threads at
most, its own setting restored afterwards): the batches of one thread are small, and a second
intra-op thread per producer only oversubscribes the cores the model is using, which on a busy
machine makes every parallel operation wait for a descheduled thread. Parallelism comes from the
number of producer threads instead.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

import torch

_DONE = object()


def _one_core() -> None:
    torch.set_num_threads(1)


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetch(jobs: Iterable[Callable], workers: int = 1, depth: int = 4) -> Iterator:
    if workers <= 0:
        for job in jobs:
            yield job()
        return
    depth = max(1, depth)
    consumer_threads = torch.get_num_threads()  # fixes the consumer's own setting before producers start
    # the consumer (the model) keeps the cores the producers leave: oversubscribed intra-op threads
    # wait on each other at every parallel operation
    torch.set_num_threads(max(1, min(consumer_threads, (os.cpu_count() or 1) - workers)))
    try:
        if workers == 1:
            yield from _single(jobs, depth)
        else:
            yield from _pool(jobs, workers, max(depth, workers))
    finally:
        torch.set_num_threads(consumer_threads)


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
        _one_core()
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
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fourdb-sampler", initializer=_one_core) as pool:
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
