"""What both generators start from: badness scores, per-topology and per-health data.

:func:`gpu_quality` scores every GPU. :class:`_TopoData` holds the static lists and arrays of a
topology (one per topology, kept in :data:`_TOPO_DATA`) and :class:`_HealthData` what depends on the
health alone (kept in the state's candidate cache until the health changes).
``SMALL_SERVERS`` picks the generator: the plain-Python one (:mod:`~crop_gym.candidates.small`) or
the numpy one (:mod:`~crop_gym.candidates.vectorised`), which also reads it for its per-switch
loops. Set it here (e.g. ``monkeypatch.setattr(crop_gym.candidates.data, "SMALL_SERVERS", n)``);
:class:`_TopoData` objects made before keep the choice they made.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.objective import ClusterState
from crop_gym.topology import SWITCH, Topology

if TYPE_CHECKING:
    from crop_gym.candidates.small import _Server, _Switch


def gpu_quality(state: ClusterState, robust: bool = True) -> NDArray[np.float64]:
    """Badness score of every GPU, ``σ_g / speed_g / (1 - π_g)`` (1 = healthy reference GPU).

    With ``robust=False`` every GPU scores 1.
    """
    if not robust:
        return np.ones(state.topology.num_gpus)
    h = state.health
    return h.gpu_slowdown / state.topology.gpu_speed / (1.0 - h.gpu_fail_prob)


#: Clusters with at most this many servers (and switch subtrees with at most this many) run the
#: per-server loops in plain Python; larger ones use numpy. Both give identical candidates.
SMALL_SERVERS = 32


class _TopoData:
    """Static per-topology lists and arrays used by the generator."""

    __slots__ = (
        "G",
        "S",
        "arange_f",
        "gpu_server",
        "small",
        "srv_key2",
        "srv_lo",
        "srv_lo_arr",
        "srv_node",
        "srv_node_arr",
        "sw_ranges",
        "switches",
        "topo",
    )

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.G = topo.num_gpus
        self.S = topo.num_servers
        self.small = self.S <= SMALL_SERVERS
        self.srv_lo_arr = topo.server_gpu_lo.astype(np.int64)
        self.srv_lo: list[int] = self.srv_lo_arr.tolist()
        self.srv_node_arr = topo.server_node.astype(np.int64)
        self.srv_node: list[int] = self.srv_node_arr.tolist()
        self.gpu_server: list[int] = topo.gpu_server.tolist()
        # Sort key of a GPU in the per-version order: (server, busy) as 2 * server + busy.
        self.srv_key2 = (2 * topo.gpu_server).astype(np.int64)
        self.arange_f = np.arange(self.G + 1, dtype=np.float64)
        # Switch subtrees in node order: (node, first server, end server, first GPU, end GPU).
        self.switches: list[tuple[int, int, int, int, int]] = [
            (
                int(n),
                int(topo.node_srv_lo[n]),
                int(topo.node_srv_hi[n]),
                int(topo.node_gpu_lo[n]),
                int(topo.node_gpu_hi[n]),
            )
            for n in np.flatnonzero(topo.kind == SWITCH)
        ]
        # (index, entry, first server, end server) of each switch subtree.
        self.sw_ranges = [(i, sw, sw[1], sw[2]) for i, sw in enumerate(self.switches)]


_TOPO_DATA: weakref.WeakKeyDictionary[Topology, _TopoData] = weakref.WeakKeyDictionary()


def _topo_data(topo: Topology) -> _TopoData:
    td = _TOPO_DATA.get(topo)
    if td is None:
        td = _TOPO_DATA[topo] = _TopoData(topo)
    return td


class _HealthData:
    """What depends on the health alone: badness scores and each server's GPUs in health order.

    Small clusters also keep here the last version's servers and switch subtrees (``last``), which
    the next version reuses where its free GPUs are the same, and memoise what a server's free
    GPUs give (:class:`~crop_gym.candidates.small._Server`, keyed by its free-GPU pattern: after a
    removal a server often returns to an earlier pattern).
    """

    __slots__ = (
        "_key2",
        "_q_l",
        "_q_rank",
        "_q_round",
        "_servers",
        "base_order",
        "last",
        "q",
        "rep_sums",
        "td",
        "uniform",
    )

    def __init__(self, state: ClusterState, robust: bool, td: _TopoData) -> None:
        self.td = td
        topo = state.topology
        q = gpu_quality(state, robust)
        self.q = q
        self.uniform = not robust or bool((q == 1.0).all())
        if self.uniform:
            # GPUs are numbered server by server, so (server, index) order is the identity.
            self.base_order = np.arange(td.G)
        else:
            # By server, then badness, then index (lexsort is stable).
            self.base_order = np.lexsort((q, topo.gpu_server))
        self._q_round: NDArray[np.float64] | None = None
        self._q_l: list[float] | None = None
        self._q_rank: list[int] | None = None
        self._key2: NDArray[np.int64] | None = None
        self._servers: list[_ServerSpec] | None = None
        # np_sum([x] * k) by (x, k): the badness of k GPUs of equal badness x.
        self.rep_sums: dict[tuple[float, int], float] = {}
        # The last _Small built on this health (small clusters): its free GPUs (as
        # ClusterState.free_bits), its servers, their free GPUs and least badness
        # (``_Server.nf``, ``_Server.qmin``) and its switches.
        self.last: tuple[int, list[_Server], list[int], list[float], list[_Switch]] | None = None

    @property
    def q_round(self) -> NDArray[np.float64]:
        """``np.round(q, 9)``."""
        if self._q_round is None:
            self._q_round = np.round(self.q, 9)
        return self._q_round

    @property
    def q_l(self) -> list[float]:
        """:attr:`q` as a list."""
        if self._q_l is None:
            self._q_l = self.q.tolist()
        return self._q_l

    @property
    def q_rank(self) -> list[int]:
        """Per GPU, the rank of its rounded badness (:attr:`q_round`) among the distinct ones."""
        if self._q_rank is None:
            q_round = self.q_round.tolist()
            rank = {v: i for i, v in enumerate(sorted(set(q_round)))}
            self._q_rank = [rank[v] for v in q_round]
        return self._q_rank

    @property
    def key2(self) -> NDArray[np.int64]:
        """Sort key ``2 * server`` of the GPUs in health order."""
        if self._key2 is None:
            self._key2 = self.td.srv_key2[self.base_order]
        return self._key2

    @property
    def servers(self) -> list[_ServerSpec]:
        """Per server: (its first GPU, end GPU, node, its GPUs in health order, their badness
        (``None`` when uniform), memo of :class:`~crop_gym.candidates.small._Server` by free-GPU
        pattern (the server's bits of :attr:`ClusterState.free_bits`, shifted to bit 0), and a
        picker of its GPUs' items, in health order, from a sequence indexed by GPU - first GPU
        (it gives a tuple or bytes)."""
        if self._servers is None:
            td = self.td
            order_l = self.base_order.tolist()
            q_o: list[float] | None = None if self.uniform else self.q[self.base_order].tolist()
            lo = [*td.srv_lo, td.G]
            self._servers = [
                (
                    lo[s],
                    lo[s + 1],
                    td.srv_node[s],
                    order_l[lo[s] : lo[s + 1]],
                    None if q_o is None else q_o[lo[s] : lo[s + 1]],
                    {},
                    _picker([g - lo[s] for g in order_l[lo[s] : lo[s + 1]]]),
                )
                for s in range(td.S)
            ]
        return self._servers


def _picker(idx: list[int]) -> Callable[[bytes], Any]:
    """An ``itemgetter`` of the items ``idx``, as a tuple or bytes even for one item."""
    if len(idx) == 1:
        return itemgetter(slice(idx[0], idx[0] + 1))
    return itemgetter(*idx)


#: (first GPU, end GPU, node, GPUs in health order, their badness, memo, picker) of a server;
#: see :meth:`_HealthData.servers`.
_ServerSpec = tuple[
    int, int, int, list[int], list[float] | None, dict[int, "_Server"], Callable[[bytes], Any]
]
