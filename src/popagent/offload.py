"""CPU-heavy work off the event loop.

Screening a text for credentials, checking a batch of JSON items or building a
large episode costs time in proportion to the input's size. On a server every
request shares one event loop, so such work run there would stall every other
request (``/healthz`` included) for as long as it takes. ``off_loop`` runs it
elsewhere once its input is larger than ``OFF_LOOP_CHARS``; smaller work runs
inline, where the hop would cost more than the work.

Where "elsewhere" is:

- by default, a worker thread (the loop's default executor). That frees the
  loop between the work's steps, but Python's regular expressions hold the
  interpreter lock for the whole of one search, so a single search over a very
  long text still delays the loop for its duration;
- after ``use_processes()`` (what ``popagent serve`` does at startup), inputs
  larger than ``PROCESS_CHARS`` go to a small pool of worker processes, which
  share no lock with the server: the loop answers within milliseconds whatever
  is being screened. A library never starts processes unless asked.

The work itself stays pure and synchronous (the screen is linear in its input,
``popagent.credentials``) and runs the same wherever it runs. Work sent to a
process must be a module-level function whose arguments, result and errors
pickle (``ValidationError`` does). This module lives at the bottom of the
package so that every layer can use it.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = [
    "OFF_LOOP_CHARS",
    "PROCESS_CHARS",
    "json_size",
    "off_loop",
    "stop_processes",
    "text_size",
    "use_processes",
]

#: Inputs larger than this many characters leave the event loop: the screen's
#: worst case for this size is about a millisecond on a small CPU.
OFF_LOOP_CHARS = 4_096
#: With worker processes on, inputs larger than this go to them (a thread's
#: single search over a smaller text holds the lock for a few milliseconds at most).
PROCESS_CHARS = 16_384

_P = ParamSpec("_P")
_T = TypeVar("_T")

_processes: ProcessPoolExecutor | None = None
# Set by use_processes: how many worker processes to start at the first large input.
_process_count = 0


def text_size(*values: object) -> int:
    """The characters of the strings among ``values`` (other values count as nothing):
    the size ``off_loop`` decides by, before the values are checked."""
    return sum(len(v) for v in values if isinstance(v, str))


def json_size(value: object, *, limit: int = PROCESS_CHARS) -> int:
    """The characters of the strings in a JSON-like value (keys included), each other
    value counting as one; the walk stops once over ``limit``, so it costs at most
    that much whatever the value's size."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += 1
            for key, inner in item.items():
                total += len(key) if isinstance(key, str) else 1
                stack.append(inner)
                if total > limit:
                    break
        elif isinstance(item, list | tuple):
            total += 1
            stack.extend(item[: limit - total + 1])
        else:
            total += 1
    return total


def use_processes(workers: int | None = None) -> None:
    """Send large work to ``workers`` worker processes (default: half the CPUs, at
    least one) from now on, in this process. Idempotent; ``stop_processes`` ends them.

    Nothing starts here: the pool (and the semaphores and resource-tracker process
    that multiprocessing creates with it) comes with the first input large enough to
    need it, so a server that never sees one never has them. The processes start
    with the ``spawn`` method (safe beside threads)."""
    global _process_count
    if not _process_count:
        _process_count = workers or max(1, (os.cpu_count() or 2) // 2)


def _process_pool() -> ProcessPoolExecutor | None:
    global _processes
    if _processes is None and _process_count:
        context = multiprocessing.get_context("spawn")
        _processes = ProcessPoolExecutor(_process_count, mp_context=context)
    return _processes


def stop_processes() -> None:
    """End the worker processes (work already sent finishes first); back to threads."""
    global _processes, _process_count
    pool, _processes, _process_count = _processes, None, 0
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


async def off_loop(size: int, work: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``work(*args, **kwargs)``, run by what ``size`` (the input's size in
    characters) calls for: inline up to ``OFF_LOOP_CHARS``, else in a worker thread,
    or a worker process over ``PROCESS_CHARS`` after ``use_processes()``.
    Exceptions pass through."""
    if size <= OFF_LOOP_CHARS:
        return work(*args, **kwargs)
    pool = _process_pool() if size > PROCESS_CHARS else None
    if pool is not None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, functools.partial(work, *args, **kwargs))
    return await asyncio.to_thread(work, *args, **kwargs)
