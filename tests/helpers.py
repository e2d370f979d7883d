"""Helpers shared by several test files: a hang becomes a failure (:func:`no_hang`), outputs that
must be special files never touch the machine's own /dev/null (:func:`null_device`), exact
equality of nested observations (:func:`assert_same`), and ``n`` copies of a cluster as one
(:func:`union_topology`, :func:`joined_health`: tests/test_locality.py checks that each copy
behaves as its cluster alone; benchmarks/bench_env_axis.py times the state over them)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from crop_gym.model.health import Health
from crop_gym.model.topology import Topology


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


def joined_health(parts: list[Health]) -> Health:
    """Per-GPU arrays concatenated; per-node arrays after the new root's entry (a root carries no
    link, so its value is never read)."""
    gpu = [
        np.concatenate([getattr(h, f) for h in parts])
        for f in ("gpu_slowdown", "gpu_failed", "gpu_fail_prob")
    ]
    link = [
        np.concatenate([getattr(parts[0], f)[:1]] + [getattr(h, f) for h in parts])
        for f in ("link_degradation", "link_fail_prob")
    ]
    return Health(*gpu, *link)
