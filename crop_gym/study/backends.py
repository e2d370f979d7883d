"""Where a study's runs execute: local processes (default) or a Ray cluster.

A backend takes the runs still to do and yields ``(run, record)`` pairs as runs finish, in any
order; it writes nothing (the driver writes each record, :mod:`crop_gym.study.results`). Both call
:func:`crop_gym.study.worker.execute_run`, a pure function of the run, so the numbers of a run are
the same whichever backend ran it (only the wall-clock timings differ).

Signals. A local pool's workers never outlive the driver: they ignore Ctrl-C (the driver stops
them), the driver terminates them whenever it leaves a study early (an error, Ctrl-C, or a signal
that ``crop-gym study`` turns into :class:`~crop_gym.study.cli.Terminated`), and on Linux the kernel
sends them SIGTERM when the driver dies however it dies (:func:`crop_gym.study.worker.worker_init`).
Ray tasks are cancelled (``force=True``) and a Ray started for the study is shut down. The records
written before stay, so running the same command again resumes.

Lost workers. A run whose worker process dies (killed, out of memory, a lost node) is run again:
Ray retries the task up to ``retries`` times (``max_retries``); the local pool, which cannot tell
which of its runs killed it, is rebuilt and the unfinished runs resubmitted, giving up after
``retries + 1`` consecutive breaks with no run finished in between. A run that raises an error
(a trace the simulator refuses) is not retried: the error stops the study with one line.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from crop_gym.errors import CropGymError
from crop_gym.study.grid import Run
from crop_gym.study.worker import execute_run, worker_init

__all__ = ["BACKENDS", "Backend", "LocalBackend", "RayBackend", "StudyError", "make_backend"]

#: Names of ``--backend``.
BACKENDS: tuple[str, ...] = ("local", "ray")


class StudyError(CropGymError, ValueError):
    """A run failed (its error, or its worker died more often than the retries allow)."""


class Backend(Protocol):
    """Executes runs and yields their records as they finish."""

    @property
    def name(self) -> str:
        """The backend's name (``local``, ``ray``)."""
        ...

    def execute(self, runs: Sequence[Run]) -> Iterator[tuple[Run, dict[str, Any]]]:
        """Run every run of ``runs``; yield ``(run, record)`` as each finishes."""
        ...


def _first_line(exc: BaseException) -> str:
    lines = [s.strip() for s in str(exc).splitlines() if s.strip()]
    return lines[0] if lines else type(exc).__name__


@dataclass(frozen=True)
class LocalBackend:
    """A pool of local worker processes (``spawn``: safe with threads, same as on macOS/Windows).

    Attributes:
        workers: Worker processes; 1 runs in this process (no pool).
        retries: Pool rebuilds allowed in a row without progress after a worker died.
    """

    workers: int = 1
    retries: int = 2
    name: str = "local"

    def execute(self, runs: Sequence[Run]) -> Iterator[tuple[Run, dict[str, Any]]]:
        """Run ``runs`` on the pool; yield ``(run, record)`` as each finishes."""
        if self.workers <= 1:
            for run in runs:
                yield run, _checked(run, execute_run)
            return
        pending = {run.run_id: run for run in runs}
        breaks = 0
        context = multiprocessing.get_context("spawn")
        while pending:
            before = set(multiprocessing.active_children())
            pool = ProcessPoolExecutor(
                max_workers=min(self.workers, len(pending)),
                mp_context=context,
                initializer=worker_init,
                initargs=(os.getpid(),),
            )
            finished = False
            workers: set[multiprocessing.process.BaseProcess] = set()
            try:
                futures: dict[Future[dict[str, Any]], Run] = {
                    pool.submit(execute_run, run): run for run in pending.values()
                }
                # Every worker starts during the submissions (spawned pools start them on demand).
                workers = set(multiprocessing.active_children()) - before
                progressed = False
                broken = False
                while futures and not broken:
                    done, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for fut in done:
                        run = futures.pop(fut)
                        try:
                            record = fut.result()
                        except BrokenProcessPool:
                            broken = True
                            continue
                        except (CropGymError, ValueError) as exc:
                            raise StudyError(f"run {run.run_id}: {_first_line(exc)}") from None
                        del pending[run.run_id]
                        progressed = True
                        yield run, record
                if broken:
                    breaks = 0 if progressed else breaks + 1
                    if breaks > self.retries:
                        raise StudyError(
                            f"a worker process died {breaks} times in a row with no run finished; "
                            f"{len(pending)} run(s) left (first: {next(iter(pending))})"
                        )
                finished = True
            finally:
                if not finished:  # an error, Ctrl-C, a signal, or the caller stopped iterating
                    _stop(workers)
                pool.shutdown(wait=finished, cancel_futures=True)


def _stop(workers: set[multiprocessing.process.BaseProcess], grace_s: float = 5.0) -> None:
    """Terminate ``workers`` now (SIGTERM, then SIGKILL after ``grace_s``): their runs are lost
    and will be run again on the next start, as runs in flight always are."""
    for proc in workers:
        if proc.is_alive():
            proc.terminate()
    for proc in workers:
        proc.join(grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join(grace_s)


def _checked(run: Run, func: Any) -> dict[str, Any]:
    try:
        record: dict[str, Any] = func(run)
    except (CropGymError, ValueError) as exc:
        raise StudyError(f"run {run.run_id}: {_first_line(exc)}") from None
    return record


@dataclass(frozen=True)
class RayBackend:
    """Ray tasks, one per run (``pip install "crop-gym[cluster]"``).

    Attributes:
        address: ``None``: the cluster in ``RAY_ADDRESS``, else a Ray started here for the study;
            ``"auto"``: the running cluster this machine belongs to; ``"ray://host:10001"``: a
            remote cluster through Ray Client. A Ray already initialised in this process (a test, a
            notebook) is used as it is.
        retries: Times a run is retried when its worker dies (Ray's ``max_retries``).
        cpus_per_run: CPUs Ray reserves for each run.
    """

    address: str | None = None
    retries: int = 3
    cpus_per_run: float = 1.0
    name: str = "ray"

    def execute(self, runs: Sequence[Run]) -> Iterator[tuple[Run, dict[str, Any]]]:
        """Submit every run as a Ray task; yield ``(run, record)`` as each finishes."""
        try:
            import ray
            import ray.exceptions
        except ModuleNotFoundError:
            raise StudyError(
                '--backend ray needs Ray: pip install "crop-gym[cluster]" (or pip install ray)'
            ) from None
        started = False
        if not ray.is_initialized():
            # ray.init replaces the SIGTERM handler with one that exits at once; keep the
            # caller's (crop-gym study's raises, so that the tasks are cancelled below).
            on_term = signal.getsignal(signal.SIGTERM) if _main_thread() else None
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            except ConnectionError as exc:
                raise StudyError(f"--address {self.address}: {_first_line(exc)}") from None
            finally:
                if on_term is not None:
                    signal.signal(signal.SIGTERM, on_term)
            started = True
        refs: dict[Any, Run] = {}
        try:
            task = ray.remote(
                num_cpus=self.cpus_per_run, max_retries=self.retries, retry_exceptions=False
            )(execute_run)
            refs = {task.remote(run): run for run in runs}
            while refs:
                done, _ = _unwrapped(ray.wait, list(refs), num_returns=1)
                for ref in done:
                    run = refs.pop(ref)
                    try:
                        record = _unwrapped(ray.get, ref)
                    except ray.exceptions.RayTaskError as exc:
                        cause = exc.cause if isinstance(exc.cause, Exception) else exc
                        raise StudyError(f"run {run.run_id}: {_first_line(cause)}") from None
                    except ray.exceptions.WorkerCrashedError:
                        raise StudyError(
                            f"run {run.run_id}: its worker died {self.retries + 1} times "
                            "(the retries are spent)"
                        ) from None
                    yield run, record
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)
            if started:
                ray.shutdown()


def _unwrapped(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, a Ray function that waits in compiled code.

    A signal handler that raises while Ray waits (Ctrl-C's KeyboardInterrupt, crop-gym study's
    Terminated) reaches Python as a ``SystemError`` caused by that exception: raise the exception
    itself, so that it stops the study as it would anywhere else.
    """
    try:
        return call(*args, **kwargs)
    except SystemError as exc:
        cause = exc.__cause__
        if isinstance(cause, BaseException) and not isinstance(cause, Exception):
            raise cause from None
        raise


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def make_backend(
    name: str, *, workers: int = 1, address: str | None = None, retries: int = 3
) -> Backend:
    """The backend called ``name`` (:data:`BACKENDS`).

    Raises:
        StudyError: For an unknown name.
    """
    if name == "local":
        return LocalBackend(workers=workers, retries=retries)
    if name == "ray":
        return RayBackend(address=address, retries=retries)
    raise StudyError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
