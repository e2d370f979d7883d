"""Helpers shared by several test files: a hang becomes a failure (:func:`no_hang`), outputs that
must be special files never touch the machine's own /dev/null (:func:`null_device`), exact
equality of nested observations (:func:`assert_same`), and ``n`` copies of a cluster as one
(:func:`union_topology`, built as a graph: tests/test_locality.py checks
:meth:`Topology.replicated` against it), one cluster's action table and observation
(:func:`table_of`, :func:`observe`), and a policy's answer checked against the policy contract
(:func:`check_answer`)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from crop_gym.envs.actions import PendingQueue, build_action_tables
from crop_gym.envs.observation import ObservedHealth
from crop_gym.model.conditions import Conditions
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import Topology
from crop_gym.policy import Placement


class Hang(TimeoutError):
    """The guarded body ran past its time."""


@contextlib.contextmanager
def no_hang(seconds: int = 10) -> Iterator[None]:
    """Raise :class:`Hang` when the body blocks longer than ``seconds`` (SIGALRM, main thread)."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def null_device(folder: Path) -> Path:
    """A character device to use as an output path: a copy of /dev/null made in ``folder``.

    Never the real /dev/null as an output: run as root, a regression would replace it with a
    regular file for the whole machine. Without the right to make device nodes (not root), the real
    one is safe to use, as /dev is then not writable.
    """
    node = folder / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        return Path(os.devnull)
    return node


def assert_same(a: Any, b: Any) -> None:
    """Exact equality of nested observations: dicts, tuples and lists, arrays (with dtype), scalars."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def small_tree() -> nx.DiGraph:
    """A switch over two servers of two GPUs, as ``Topology.from_graph`` takes it (edge attributes
    to spoil in a test: ``g.edges["sw", "s0"]["bandwidth"] = ...``)."""
    g = nx.DiGraph(root="sw")
    g.add_node("sw", kind="switch")
    for s in range(2):
        g.add_node(f"s{s}", kind="server")
        g.add_edge("sw", f"s{s}", bandwidth=1e9, latency=1e-5)
        for i in range(2):
            g.add_node(f"s{s}g{i}", kind="gpu")
            g.add_edge(f"s{s}", f"s{s}g{i}", bandwidth=4e9, latency=1e-6)
    return g


def union_topology(topology: Topology, n: int) -> Topology:
    """``n`` copies of ``topology`` under a new root (nodes numbered copy after copy)."""
    g0, root0 = topology.graph, topology.node_names[0]
    union = nx.DiGraph(root="U")
    union.add_node("U", kind="root")
    for i in range(n):
        copy = nx.relabel_nodes(g0, {v: (i, v) for v in g0.nodes})
        union.update(copy)
        attrs = union.nodes[(i, root0)]
        attrs.pop("root", None)
        attrs["kind"] = "switch"
        union.add_edge("U", (i, root0), bandwidth=1e30, latency=0.0)
    union.graph["root"] = "U"  # update() copied the copies' graph attributes
    return Topology.from_graph(union, name=f"{n}x{topology.name}")


def table_of(state: Any, pending: Any, **options: Any) -> Any:
    """The action table of a single cluster ``state`` with ``pending`` jobs (a list of jobs or a
    :class:`~crop_gym.envs.actions.PendingQueue`): the batch of one of
    :func:`~crop_gym.envs.actions.build_action_tables`."""
    queue = pending if isinstance(pending, PendingQueue) else PendingQueue.of(state, pending)
    (table,) = build_action_tables(state, [queue], **options)
    return table


def observe(
    builder: Any,
    state: Any,
    observed: Any,
    pending: Any,
    table: Any,
    step: int = 0,
    max_steps: int = 1,
    *,
    extra: Any = None,
) -> dict[str, Any]:
    """One cluster's observation from ``builder`` (the batch of one of
    :meth:`~crop_gym.envs.observation.ObservationBuilder.build`); ``observed`` is the health the
    agent sees."""
    cond = state.conditions
    seen = (
        ObservedHealth.of(cond)
        if observed is state.health
        else ObservedHealth.of(Conditions(state.topology, observed), true=cond)
    )
    x = None if extra is None else np.asarray(extra)[None]
    queue = pending if isinstance(pending, PendingQueue) else PendingQueue.of(state, pending)
    obs = builder.build(state, seen, [table], [queue], [step], max_steps, extra=x)
    return {key: value[0] for key, value in obs.items()}


def check_answer(
    state: ClusterState, placements: Sequence[Placement], queue: Sequence[Job] | None = None
) -> None:
    """Assert that a policy's answer keeps the contract on ``state``: every placement valid
    (:meth:`ClusterState.check_placements`: free usable GPUs, the job's GPU count, no GPU or job
    twice) and, with ``queue``, every placed job taken from it."""
    if queue is not None:
        ids = {j.job_id for j in queue}
        stray = [p.job_id for p in placements if p.job_id not in ids]
        assert not stray, f"placed jobs that are not in the queue: {stray}"
    state.check_placements([p.job for p in placements], [p.gpus for p in placements])
