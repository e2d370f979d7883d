"""The compiled kernels (numba): the candidate generator and the placement-facts kernel as loops.

Imported only through :mod:`crop_gym.model.kernels` (which says when they are used); each is the
same computation as its numpy reference, bit for bit (tests/test_kernels.py): the same
floating-point sums and products in the same order.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from numba import njit

from crop_gym.model import objective, timing

__all__ = [
    "action_tables",
    "facts_rows",
    "generate_rows",
    "observation_tables",
    "place_rows",
    "region_sums",
    "row_times",
]


def _compiled_copy(fn: Any, **callees: Any) -> Any:
    """``fn`` compiled, the functions it calls by name replaced by their compiled versions: the
    model's formulas exist once, in :mod:`crop_gym.model.timing` and
    :mod:`crop_gym.model.objective`, and run here as they are written."""
    scope = dict(fn.__globals__)
    scope.update(callees)
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return njit(cache=True, nogil=True)(copy)


_comm = _compiled_copy(timing.comm_time)
_iteration = _compiled_copy(timing.iteration_time)
_sharing = _compiled_copy(timing.sharing_factor)
_times = _compiled_copy(
    timing.times_arrays, comm_time=_comm, iteration_time=_iteration, sharing_factor=_sharing
)
_value = _compiled_copy(objective.job_value)


EPS = 1e-9


@njit(cache=True, nogil=True)
def _block_sum(a: Any, lo: int, n: int) -> float:
    """numpy's sum of ``a[lo:lo + n]`` for ``n <= 128``: one by one below 8 items, else eight
    running sums combined pairwise, then the rest one by one."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def _pairwise(a: Any, lo: int, n: int) -> float:
    """numpy's pairwise sum of ``a[lo:lo + n]`` (what ``ndarray.sum`` computes along a row):
    blocks of at most 128 items (:func:`_block_sum`), and beyond that the sum of the two halves
    (the first a multiple of 8), evaluated with a stack (numba cannot cache recursion)."""
    if n <= 128:
        return _block_sum(a, lo, n)
    size = 64
    s_lo = np.zeros(size, dtype=np.int64)
    s_n = np.zeros(size, dtype=np.int64)
    s_state = np.zeros(size, dtype=np.int64)  # 0: new, 1: left pending, 2: right pending
    s_left = np.zeros(size)
    sp = 1
    s_lo[0], s_n[0] = lo, n
    result = 0.0
    while sp:
        top = sp - 1
        m = s_n[top]
        if m <= 128 or s_state[top] == 2:
            # (For a parent, result holds its right half's sum.)
            v = _block_sum(a, s_lo[top], m) if m <= 128 else s_left[top] + result
            sp -= 1
            if sp == 0:
                return v
            parent = sp - 1
            if s_state[parent] == 1:
                s_left[parent] = v
                s_state[parent] = 2
                h = s_n[parent] // 2
                h -= h % 8
                s_lo[sp], s_n[sp], s_state[sp] = s_lo[parent] + h, s_n[parent] - h, 0
                sp += 1
            else:
                result = v
        else:
            s_state[top] = 1
            h = m // 2
            h -= h % 8
            s_lo[sp], s_n[sp], s_state[sp] = s_lo[top], h, 0
            sp += 1
    return result


@njit(cache=True, nogil=True)
def _row_before(ka: Any, kb: Any) -> bool:
    """Whether a row of rank key ``ka`` ranks before one of ``kb`` (keys: servers spanned,
    rounded badness, free GPUs left, subtree node, emission order)."""
    for j in range(5):
        if ka[j] < kb[j]:
            return True
        if ka[j] > kb[j]:
            return False
    return False


@njit(cache=True, nogil=True)
def generate_rows(
    q: Any,
    uniform: bool,
    base: Any,
    free: Any,
    srv_lo: Any,
    srv_hi: Any,
    srv_node: Any,
    sw_node: Any,
    sw_slo: Any,
    sw_shi: Any,
    sw_glo: Any,
    sw_ghi: Any,
    gpu_server: Any,
    reg_srv: Any,
    reg_sw: Any,
    reg_gpu: Any,
    req_ptr: Any,
    req_k: Any,
    cap: int,
) -> Any:
    """The candidate rows of each request: region ``r`` asks for sizes
    ``req_k[req_ptr[r]:req_ptr[r + 1]]`` (distinct, each at most its free GPUs).

    Servers, switch subtrees and GPUs of region ``r`` are ``reg_srv[r]:reg_srv[r + 1]``,
    ``reg_sw[r]:reg_sw[r + 1]`` and ``reg_gpu[r]:reg_gpu[r + 1]``; ``base`` is the GPUs by
    (server, badness, index). Returns ``(count, gpus, servers, subtree, quality)``: the rows of
    request ``i`` are rows ``sum(count[:i]):sum(count[:i + 1])`` (best first), each of its size's
    GPUs in ``gpus`` (sorted), one after the other."""
    n_req = len(req_k)
    total_rows = n_req * cap
    count = np.zeros(n_req, dtype=np.int64)
    servers = np.zeros(total_rows, dtype=np.int32)
    subtree = np.zeros(total_rows, dtype=np.int32)
    quality = np.zeros(total_rows)
    size_total = 0
    for i in range(n_req):
        size_total += cap * req_k[i]
    gpus = np.zeros(size_total, dtype=np.int32)
    out_row = 0
    out_gpu = 0
    n_regions = len(req_ptr) - 1
    S = len(srv_lo)
    f = np.zeros(S, dtype=np.int64)
    avg = np.zeros(S)
    lo_q = np.zeros(S, dtype=np.int64)
    for r in range(n_regions):
        if req_ptr[r] == req_ptr[r + 1]:
            continue
        s0, s1 = reg_srv[r], reg_srv[r + 1]
        w0, w1 = reg_sw[r], reg_sw[r + 1]
        g0, g1 = reg_gpu[r], reg_gpu[r + 1]
        Gr = g1 - g0
        # The region's GPU order (server by server: free GPUs least bad first, then busy ones),
        # its badness in that order and the running sums (0 first).
        order = np.empty(Gr, dtype=np.int64)
        pos = 0
        for s in range(s0, s1):
            lo_q[s] = pos
            n = 0
            for j in range(srv_lo[s], srv_hi[s]):
                g = base[j]
                if free[g]:
                    order[pos] = g
                    pos += 1
                    n += 1
            f[s] = n
            for j in range(srv_lo[s], srv_hi[s]):
                g = base[j]
                if not free[g]:
                    order[pos] = g
                    pos += 1
        qs = np.empty(Gr)
        qcs = np.zeros(Gr + 1)
        c = 0.0
        for j in range(Gr):
            qs[j] = q[order[j]]
            c = c + qs[j] if j else qs[j]
            qcs[j + 1] = c
        for s in range(s0, s1):
            avg[s] = (qcs[lo_q[s] + f[s]] - qcs[lo_q[s]]) / max(f[s], 1)
        n_sw = w1 - w0
        sw_free = np.zeros(n_sw, dtype=np.int64)
        sw_maxf = np.zeros(n_sw, dtype=np.int64)
        sw_qmin = np.full(n_sw, np.inf)
        for w in range(n_sw):
            for s in range(sw_slo[w0 + w], sw_shi[w0 + w]):
                sw_free[w] += f[s]
                sw_maxf[w] = max(sw_maxf[w], f[s])
                if f[s] > 0:
                    sw_qmin[w] = min(sw_qmin[w], qs[lo_q[s]])
        max_rows = (s1 - s0) + 2 * n_sw
        for i in range(req_ptr[r], req_ptr[r + 1]):
            k = req_k[i]
            # Rows: their keys (servers, rounded badness, left, node, emission), quality, GPUs.
            keys = np.zeros((max_rows, 5))
            qual = np.zeros(max_rows)
            rg = np.zeros((max_rows, k), dtype=np.int64)
            nrow = 0
            for s in range(s0, s1):
                if f[s] >= k:
                    qv = qcs[lo_q[s] + k] - qcs[lo_q[s]]
                    keys[nrow, 0] = 1.0
                    keys[nrow, 1] = np.round(qv, 9)
                    keys[nrow, 2] = f[s] - k
                    keys[nrow, 3] = srv_node[s]
                    keys[nrow, 4] = nrow
                    qual[nrow] = qv
                    for j in range(k):
                        rg[nrow, j] = order[lo_q[s] + j]
                    nrow += 1
            singles = nrow
            # Compact rows (no server inside holds k): servers by (most free, least bad on
            # average, index), filled in that order.
            compact_q = np.full(n_sw, np.inf)
            for w in range(n_sw):
                if sw_free[w] < k or sw_maxf[w] >= k:
                    continue
                a, z = sw_slo[w0 + w], sw_shi[w0 + w]
                srv = np.arange(a, z)
                m = z - a
                for x in range(1, m):  # insertion sort by (-f, avg, index)
                    y = srv[x]
                    j = x - 1
                    while j >= 0:
                        p = srv[j]
                        if f[p] < f[y] or (f[p] == f[y] and avg[p] > avg[y]):
                            srv[j + 1] = p
                            j -= 1
                        else:
                            break
                    srv[j + 1] = y
                vals = np.empty(k)
                got = 0
                used = 0
                for x in range(m):
                    s = srv[x]
                    if got == k:
                        break
                    if f[s] == 0:
                        continue
                    used += 1
                    take = min(f[s], k - got)
                    for j in range(take):
                        rg[nrow, got + j] = order[lo_q[s] + j]
                        vals[got + j] = qs[lo_q[s] + j]
                    got += take
                qv = _pairwise(vals, 0, k)
                compact_q[w] = qv
                keys[nrow, 0] = used
                keys[nrow, 1] = np.round(qv, 9)
                keys[nrow, 2] = sw_free[w] - k
                keys[nrow, 3] = sw_node[w0 + w]
                keys[nrow, 4] = nrow
                qual[nrow] = qv
                nrow += 1
            # Health-first rows: a subtree's k best free GPUs by (rounded badness, -free GPUs
            # of their server, index), kept if healthier than every row inside.
            if not uniform:
                for w in range(n_sw):
                    if sw_free[w] < k:
                        continue
                    inside = compact_q[w]
                    for s in range(sw_slo[w0 + w], sw_shi[w0 + w]):
                        if f[s] >= k:
                            inside = min(inside, qcs[lo_q[s] + k] - qcs[lo_q[s]])
                    if not inside > k * sw_qmin[w] + EPS:
                        continue
                    a, z = sw_glo[w0 + w], sw_ghi[w0 + w]
                    best = np.empty(k, dtype=np.int64)
                    nb = 0
                    for g in range(a, z):  # keep the k best, in ranking order
                        if not free[g]:
                            continue
                        qg = np.round(q[g], 9)
                        fg = f[gpu_server[g]]
                        if nb == k:
                            h = best[k - 1]
                            qh = np.round(q[h], 9)
                            if not (qg < qh or (qg == qh and fg > f[gpu_server[h]])):
                                continue
                            j = k - 2
                        else:
                            j = nb - 1
                            nb += 1
                        while j >= 0:
                            h = best[j]
                            qh = np.round(q[h], 9)
                            if qg < qh or (qg == qh and fg > f[gpu_server[h]]):
                                best[j + 1] = h
                                j -= 1
                            else:
                                break
                        best[j + 1] = g
                    vals = np.empty(k)
                    for j in range(k):
                        vals[j] = q[best[j]]
                    qv = _pairwise(vals, 0, k)
                    if qv >= inside - EPS:
                        continue
                    used = 0
                    last = -1
                    for j in range(k):
                        rg[nrow, j] = best[j]
                    srt = np.sort(best)
                    for j in range(k):
                        sv = gpu_server[srt[j]]
                        if sv != last:
                            used += 1
                            last = sv
                    keys[nrow, 0] = used
                    keys[nrow, 1] = np.round(qv, 9)
                    keys[nrow, 2] = sw_free[w] - k
                    keys[nrow, 3] = sw_node[w0 + w]
                    keys[nrow, 4] = nrow
                    qual[nrow] = qv
                    nrow += 1
            # Rank: the best cap distinct rows (only compact and health-first rows can repeat
            # another, so the best cap + extras rows are enough).
            need = min(nrow, cap + (nrow - singles))
            top = np.empty(need, dtype=np.int64)
            nt = 0
            for x in range(nrow):
                if nt == need and not _row_before(keys[x], keys[top[need - 1]]):
                    continue
                j = nt - 1 if nt < need else need - 2
                if nt < need:
                    nt += 1
                while j >= 0 and _row_before(keys[x], keys[top[j]]):
                    top[j + 1] = top[j]
                    j -= 1
                top[j + 1] = x
            start_row = out_row
            start_gpu = out_gpu
            for x in range(nt):
                if out_row - start_row == cap:
                    break
                row = np.sort(rg[top[x]])
                dup = False
                for y in range(out_row - start_row):
                    same = True
                    for j in range(k):
                        if gpus[start_gpu + y * k + j] != row[j]:
                            same = False
                            break
                    if same:
                        dup = True
                        break
                if dup:
                    continue
                for j in range(k):
                    gpus[out_gpu + j] = row[j]
                out_gpu += k
                servers[out_row] = keys[top[x], 0]
                subtree[out_row] = keys[top[x], 3]
                quality[out_row] = qual[top[x]]
                out_row += 1
            count[i] = out_row - start_row
    return count, gpus[:out_gpu], servers[:out_row], subtree[:out_row], quality[:out_row]


@njit(cache=True, nogil=True)
def _facts_row(
    g: Any, gpu_server: Any, devices: Any, links: Any, upper: Any, values: Any, found: Any
) -> int:
    """The facts of one placement, its ``k`` GPUs ``g`` sorted (``k >= 1``), into ``values[9]``
    and its spanned inter-server links into ``found`` (largest first); returns how many links.

    The same numbers as :func:`crop_gym.model.facts.facts_kernel` on the row padded with
    repeats of its last GPU: a repeat adds no server, link or ring step, its maxima are the
    row's, and its factors are 1."""
    k = len(g)
    D = upper.shape[1]
    values[0] = k
    # Servers spanned and the most GPUs on one server (a server is a run of the sorted row).
    runs = 0
    best = 0
    run = 0
    sq = 0  # Σ_i g_i²: the p-th GPU of a server's run adds 2p + 1
    for j in range(k):
        if j == 0 or gpu_server[g[j]] != gpu_server[g[j - 1]]:
            runs += 1
            run = 0
        sq += 2 * run + 1
        run += 1
        best = max(best, run)
    values[1] = best
    values[2] = runs
    values[8] = sq
    # Per-GPU terms: the worst GPU link and slowdown, the products of 1 - π (in order).
    wb = -np.inf
    wl = -np.inf
    ws = -np.inf
    ok0 = 1.0
    ok1 = 1.0
    for j in range(k):
        x = g[j]
        wb = max(wb, devices[x, 0])
        wl = max(wl, devices[x, 1])
        ws = max(ws, devices[x, 2])
        ok0 *= devices[x, 3]
        ok1 *= devices[x, 4]
    multi = k >= 2
    values[3] = -wb if multi else np.inf
    values[4] = wl if multi else 0.0
    values[6] = ws
    # Inter-server links: at each depth, a link is spanned when the row's GPUs sit under more
    # than one link there (each run of equal links is one link).
    lat = 0.0
    surv = 1.0
    n = 0
    spans = np.zeros(D, dtype=np.bool_)
    for d in range(D):
        for j in range(1, k):
            if upper[g[j], d] != upper[g[j - 1], d]:
                spans[d] = True
                break
    for j in range(k):
        for d in range(D):
            e = 0
            a = upper[g[j], d]
            if spans[d] and (j == 0 or a != upper[g[j - 1], d]):
                e = a
            lat = max(lat, links[e, 0])
            surv *= links[e, 1]
            if e > 0:
                found[n] = e
                n += 1
    values[5] = lat
    values[7] = (ok1 if multi else ok0) * surv
    part = np.sort(found[:n])
    for j in range(n):
        found[j] = part[n - 1 - j]
    return n


@njit(cache=True, nogil=True)
def facts_rows(P: Any, k: Any, gpu_server: Any, devices: Any, links: Any, upper: Any) -> Any:
    """The placement facts of the rows of ``P`` (row ``r``: its ``k[r]`` GPUs sorted, then its
    last GPU repeated), as :func:`crop_gym.model.facts.facts_kernel` computes them: returns
    ``(values float64[R, 9], inter_links int32[R, W])`` (largest link first, root-padded)."""
    R, kmax = P.shape
    D = upper.shape[1]
    values = np.zeros((R, 9))
    found = np.zeros((R, max(kmax * D, 1)), dtype=np.int64)
    width = 0
    for r in range(R):
        n = _facts_row(P[r, : k[r]], gpu_server, devices, links, upper, values[r], found[r])
        width = max(width, n)
    return values, found[:, :width].astype(np.int32)


@njit(cache=True, nogil=True)
def row_times(
    values: Any,
    links: Any,
    const: Any,
    eff_bw: Any,
    load: Any,
    plus: int,
    ring: bool,
    overlap: float,
    overlap_cap: float,
    fabric: float,
    nic: float,
    latency: float,
) -> Any:
    """``(T, C, η, value, b_inter)`` of rows of jobs (facts ``values[R, 8]`` and root-padded
    ``links[R, W]``, constants ``const[R, 8]`` in the order of
    :data:`~crop_gym.model.timing.JOB_COLUMNS`) under the link loads plus ``plus`` (1: each row is
    a candidate that adds its own rings): :func:`crop_gym.model.timing.inter_bandwidth`, then
    :func:`crop_gym.model.timing.times_arrays` and :func:`crop_gym.model.objective.job_value`
    (the same functions, compiled). ``ring``: the ring all-reduce (else hierarchical);
    ``overlap_cap``: NaN for none (numba's dispatch is cheap on numbers, not on strings)."""
    R, W = links.shape
    b = np.full(R, np.inf)
    for r in range(R):
        for j in range(W):
            e = links[r, j]
            share = eff_bw[e] / max(load[e] + plus, 1)
            if share < b[r]:
                b[r] = share
    k = values[:, 0]
    algo = "ring" if ring else "hierarchical"
    if np.isnan(overlap_cap):
        T, C, eta = _times(
            algo,
            overlap,
            None,
            fabric,
            nic,
            latency,
            const[:, 0],
            const[:, 1],
            const[:, 2],
            const[:, 4],
            const[:, 7],
            k,
            values[:, 1],
            values[:, 2],
            values[:, 3],
            b,
            values[:, 4],
            values[:, 5],
            values[:, 6],
        )
    else:
        T, C, eta = _times(
            algo,
            overlap,
            overlap_cap,
            fabric,
            nic,
            latency,
            const[:, 0],
            const[:, 1],
            const[:, 2],
            const[:, 4],
            const[:, 7],
            k,
            values[:, 1],
            values[:, 2],
            values[:, 3],
            b,
            values[:, 4],
            values[:, 5],
            values[:, 6],
        )
    return T, C, eta, _value(const[:, 3], k, values[:, 7], eta), b


@njit(cache=True, nogil=True)
def action_tables(
    q: Any,
    uniform: bool,
    base: Any,
    owner: Any,
    usable: Any,
    srv_lo: Any,
    srv_hi: Any,
    srv_node: Any,
    sw_node: Any,
    sw_slo: Any,
    sw_shi: Any,
    sw_glo: Any,
    sw_ghi: Any,
    gpu_server: Any,
    reg_srv: Any,
    reg_sw: Any,
    reg_gpu: Any,
    devices: Any,
    link_tab: Any,
    upper: Any,
    eff_bw: Any,
    load: Any,
    queue_ptr: Any,
    queue_class: Any,
    queue_gpus: Any,
    queue_const: Any,
    pend_ptr: Any,
    pend_index: Any,
    group_identical: bool,
    Q: int,
    cap: int,
    ring: bool,
    overlap: float,
    overlap_cap: float,
    fabric: float,
    nic: float,
    latency: float,
) -> Any:
    """The action tables of every region at once: what
    :func:`crop_gym.envs.actions.build_action_tables` computes with the view, the generator, the
    facts memo and the gains, in one call.

    Region ``r``'s queue is ``queue_ptr[r]:queue_ptr[r + 1]`` of ``queue_class`` (the jobs'
    :func:`~crop_gym.envs.actions.job_key` classes), ``queue_gpus`` and ``queue_const`` (their
    job constants), and its pending jobs, in queue order, are those at positions
    ``pend_index[pend_ptr[r]:pend_ptr[r + 1]]`` of it (a region with no table wanted has none).

    Returns ``(reg, slot, slot_const, copies, req, gpus, cand, quality, row, values, links,
    gains, mask, row_index)`` (few arrays: numba boxes each one it returns), with columns as rows:

    * ``reg int64[4, R + 1]``: where each region's slots, requests and rows start, and the pending
      jobs its view stands for (entry ``r``);
    * the views: ``slot int64[3, n]``, per slot its job's position among the pending jobs and in
      the queue, and its GPUs; ``slot_const[n, 8]``; ``copies[R, Q]``, the pending jobs each slot
      stands for (0 past the view);
    * the distinct candidate sets: ``req int64[2, m]`` (per request its size and how many
      candidates; request ``i`` is region ``r``'s ``i - reg[1, r]``-th distinct size, in order of
      first appearance, in :func:`generate_rows`'s layout), ``gpus``, ``cand int32[2, d]``
      (servers spanned, subtree) and ``quality``;
    * the valid rows, region by region and slot by slot: ``row int64[5, M]`` (its slot within the
      region, its candidate, its row among its region's distinct sets' rows, where its GPUs start
      and end among its region's distinct sets' GPUs), its facts (``values``, ``links``) and
      ``gains float64[4, M]`` (own value, η, all-reduce time, bottleneck share);
    * per region the mask ``bool[Q * C + 1]`` and the row of each placement action
      ``int64[Q * C]`` (-1: masked)."""
    R = len(pend_ptr) - 1
    G = len(owner)
    free = np.empty(G, dtype=np.bool_)
    for g in range(G):
        free[g] = owner[g] < 0 and usable[g]
    # The views: the earliest pending job of each class, if it fits, up to Q slots.
    n_pend = len(pend_index)
    slot_pos = np.empty(n_pend, dtype=np.int64)
    slot_qidx = np.empty(n_pend, dtype=np.int64)
    slot_copies = np.empty(n_pend, dtype=np.int64)
    slot_ptr = np.zeros(R + 1, dtype=np.int64)
    copies = np.zeros((R, Q), dtype=np.int64)
    in_view = np.zeros(R, dtype=np.int64)
    n_slots = 0
    for r in range(R):
        a, z = pend_ptr[r], pend_ptr[r + 1]
        q0 = queue_ptr[r]
        n_free = 0
        for g in range(reg_gpu[r], reg_gpu[r + 1]):
            if free[g]:
                n_free += 1
        for x in range(a, z):
            if n_slots - slot_ptr[r] == Q:
                break
            job = q0 + pend_index[x]
            if queue_gpus[job] > n_free:
                continue
            earliest = True
            n_copies = 1
            if group_identical:
                cls = queue_class[job]
                for y in range(a, x):
                    if queue_class[q0 + pend_index[y]] == cls:
                        earliest = False
                        break
                if earliest:
                    for y in range(x + 1, z):
                        if queue_class[q0 + pend_index[y]] == cls:
                            n_copies += 1
            if earliest:
                copies[r, n_slots - slot_ptr[r]] = n_copies
                in_view[r] += n_copies
                slot_pos[n_slots] = x - a
                slot_qidx[n_slots] = pend_index[x]
                slot_copies[n_slots] = n_copies
                n_slots += 1
        slot_ptr[r + 1] = n_slots
    slot_pos = slot_pos[:n_slots]
    slot_qidx = slot_qidx[:n_slots]
    slot_copies = slot_copies[:n_slots]
    slot_k = np.empty(n_slots, dtype=np.int64)
    slot_const = np.empty((n_slots, queue_const.shape[1]))
    for r in range(R):
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            job = queue_ptr[r] + slot_qidx[x]
            slot_k[x] = queue_gpus[job]
            slot_const[x] = queue_const[job]
    # The distinct sizes of each region's view, in order of first appearance.
    req_k = np.empty(n_slots, dtype=np.int64)
    slot_req = np.empty(n_slots, dtype=np.int64)
    req_ptr = np.zeros(R + 1, dtype=np.int64)
    n_req = 0
    for r in range(R):
        first = n_req
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            k = slot_k[x]
            found = -1
            for i in range(first, n_req):
                if req_k[i] == k:
                    found = i
                    break
            if found < 0:
                req_k[n_req] = k
                found = n_req
                n_req += 1
            slot_req[x] = found
        req_ptr[r + 1] = n_req
    req_k = req_k[:n_req]
    count, gpus, servers, subtree, quality = generate_rows(
        q,
        uniform,
        base,
        free,
        srv_lo,
        srv_hi,
        srv_node,
        sw_node,
        sw_slo,
        sw_shi,
        sw_glo,
        sw_ghi,
        gpu_server,
        reg_srv,
        reg_sw,
        reg_gpu,
        req_ptr,
        req_k,
        cap,
    )
    # Facts of each distinct candidate.
    req_row = np.zeros(n_req + 1, dtype=np.int64)
    req_gpu = np.zeros(n_req + 1, dtype=np.int64)
    for i in range(n_req):
        req_row[i + 1] = req_row[i] + count[i]
        req_gpu[i + 1] = req_gpu[i] + count[i] * req_k[i]
    n_dist = req_row[n_req]
    kmax = 1
    for i in range(n_req):
        kmax = max(kmax, req_k[i])
    D = upper.shape[1]
    dvals = np.zeros((n_dist, 9))
    dfound = np.zeros((n_dist, max(kmax * D, 1)), dtype=np.int64)
    dwidth = np.zeros(n_dist, dtype=np.int64)
    for i in range(n_req):
        k = req_k[i]
        for c in range(count[i]):
            d = req_row[i] + c
            lo = req_gpu[i] + c * k
            dwidth[d] = _facts_row(
                gpus[lo : lo + k], gpu_server, devices, link_tab, upper, dvals[d], dfound[d]
            )
    # The rows: slot by slot, the candidates of its size; the masks and the rows of actions.
    M = 0
    W = 0
    for x in range(n_slots):
        M += count[slot_req[x]]
    row_ptr = np.zeros(R + 1, dtype=np.int64)
    row_slot = np.empty(M, dtype=np.int64)
    row_cand = np.empty(M, dtype=np.int64)
    row_src = np.empty(M, dtype=np.int64)
    row_lo = np.empty(M, dtype=np.int64)
    row_hi = np.empty(M, dtype=np.int64)
    mask = np.zeros((R, Q * cap + 1), dtype=np.bool_)
    row_index = np.full((R, Q * cap), -1, dtype=np.int64)
    m = 0
    for r in range(R):
        mask[r, Q * cap] = True
        first_row = m
        d0 = req_row[req_ptr[r]]
        g0 = req_gpu[req_ptr[r]]
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            i = slot_req[x]
            s = x - slot_ptr[r]
            for c in range(count[i]):
                row_slot[m] = s
                row_cand[m] = c
                row_src[m] = req_row[i] + c - d0
                row_lo[m] = req_gpu[i] + c * req_k[i] - g0
                row_hi[m] = row_lo[m] + req_k[i]
                W = max(W, dwidth[req_row[i] + c])
                mask[r, s * cap + c] = True
                row_index[r, s * cap + c] = m - first_row
                m += 1
        row_ptr[r + 1] = m
    values = np.empty((M, 9))
    links = np.zeros((M, W), dtype=np.int32)
    const = np.empty((M, slot_const.shape[1]))
    m = 0
    for r in range(R):
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            i = slot_req[x]
            for c in range(count[i]):
                d = req_row[i] + c
                values[m] = dvals[d]
                for j in range(dwidth[d]):
                    links[m, j] = dfound[d, j]
                const[m] = slot_const[x]
                m += 1
    _T, comm, eta, own, b = row_times(
        values, links, const, eff_bw, load, 1, ring, overlap, overlap_cap, fabric, nic, latency
    )
    reg = np.zeros((4, R + 1), dtype=np.int64)
    reg[0] = slot_ptr
    reg[1] = req_ptr
    reg[2] = row_ptr
    reg[3, :R] = in_view
    slot = np.empty((3, n_slots), dtype=np.int64)
    slot[0] = slot_pos
    slot[1] = slot_qidx
    slot[2] = slot_k
    req = np.empty((2, n_req), dtype=np.int64)
    req[0] = req_k
    req[1] = count
    cand = np.empty((2, len(servers)), dtype=np.int32)
    cand[0] = servers
    cand[1] = subtree
    row = np.empty((5, M), dtype=np.int64)
    row[0] = row_slot
    row[1] = row_cand
    row[2] = row_src
    row[3] = row_lo
    row[4] = row_hi
    gains = np.empty((4, M))
    gains[0] = own
    gains[1] = eta
    gains[2] = comm
    gains[3] = b
    return (
        reg, slot, slot_const, copies, req, gpus, cand, quality, row, values, links, gains,
        mask, row_index,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def observation_tables(
    owner: Any,
    usable: Any,
    job_eta: Any,
    job_k: Any,
    link_load: Any,
    seen_gpu: Any,
    flags: Any,
    uplink: Any,
    switch_weight: Any,
    server_switch: Any,
    bw_ref: float,
    max_job_gpus: int,
    regions: Any,
    G: int,
    table_rows: Any,
    table_slots: Any,
    slot_k: Any,
    slot_cols: Any,
    row_slot: Any,
    row_cand: Any,
    values: Any,
    links: Any,
    eta: Any,
    b_inter: Any,
    row_gpus: Any,
    row_gpu_lo: Any,
    row_gpu_hi: Any,
    copies: Any,
    Q: int,
    C: int,
    pending: Any,
    in_view: Any,
    pending_gpus: Any,
    steps: Any,
    max_steps: int,
    queue_size: int,
    F: Any,
    utilization: Any,
    comm_overhead: Any,
    failed_frac: Any,
    abnormal_frac: Any,
) -> Any:
    """The per-GPU, candidate, queue and summary tables of the observation of ``n`` episodes (the columns
    of :mod:`crop_gym.envs.observation`, computed as :class:`~crop_gym.envs.observation.
    ObservationBuilder` does: the same float64 values, cast to float32 at the end).

    Episode ``i`` is region ``regions[i]`` (GPUs ``regions[i] * G ...``); its candidate rows are
    ``table_rows[i]:table_rows[i + 1]`` (slot, candidate, facts, η, bottleneck; row ``m``'s GPUs
    ``row_gpus[row_gpu_lo[m]:row_gpu_hi[m]]``) and its view slots
    ``table_slots[i]:table_slots[i + 1]`` (their jobs' GPUs ``slot_k`` and class columns
    ``slot_cols``: grad_size, compute_time, weight); ``copies[i]`` the pending jobs each slot
    stands for.
    ``flags`` is empty without slow or failure-prone GPUs, ``switch_weight`` when the switches are
    counted from ``server_switch``; the summary reads each episode's pending jobs (those the view
    stands for, their GPUs), steps, and its region's F, utilisation, communication overhead and
    failed and abnormal GPU shares. Returns ``(gpus float32[n, G, 10], candidates float32[n,
    Q * C, 17], queue float32[n, Q, 8], summary float32[n, 10])``."""
    n = len(regions)
    ncol = seen_gpu.shape[1]
    gpus = np.zeros((n, G, ncol), dtype=np.float32)
    free = np.zeros(n, dtype=np.int64)
    for i in range(n):
        g0 = regions[i] * G
        for j in range(G):
            g = g0 + j
            s = owner[g]
            for c in range(ncol):
                gpus[i, j, c] = seen_gpu[g, c]
            if s >= 0:
                gpus[i, j, 1] = np.float32(1.0) + seen_gpu[g, 1]
                gpus[i, j, 8] = np.float32(job_eta[s]) + seen_gpu[g, 8]
                gpus[i, j, 9] = np.float32(min(job_k[s] / max_job_gpus, 1.0)) + seen_gpu[g, 9]
            elif usable[g]:
                gpus[i, j, 0] = np.float32(1.0) + seen_gpu[g, 0]
                free[i] += 1
            ld = link_load[uplink[g]]
            gpus[i, j, 6] = ld / (ld + 1.0)
    cand = np.zeros((n, Q * C, 17), dtype=np.float32)
    queue = np.zeros((n, Q, 8), dtype=np.float32)
    W = links.shape[1]
    d = np.zeros(17)
    scale = max(Q - 1, 1)
    for i in range(n):
        x0 = table_slots[i]
        for m in range(table_rows[i], table_rows[i + 1]):
            x = x0 + row_slot[m]
            # The job's and the slot's columns, then the placement's.
            d[:] = 0.0
            d[0] = 1.0
            d[1] = min(slot_k[x] / max_job_gpus, 1.0)
            d[2] = slot_cols[x, 0]
            d[3] = slot_cols[x, 1]
            d[15] = row_slot[m] / scale
            d[16] = slot_cols[x, 2]
            k = values[m, 0]
            s = values[m, 2]
            d[4] = s / 32.0
            d[5] = (s - 1.0) / max(k - 1.0, 1.0)
            # Distinct switches above the servers spanned (see _TreeColumns).
            if W == 0:
                sw = 1.0
            elif len(switch_weight):
                tot = 0.0
                for j in range(W):
                    tot += switch_weight[links[m, j]]
                sw = max(tot, 1.0)
            else:
                cnt = 0
                for j in range(W):
                    v = server_switch[links[m, j]]
                    if v < 0:
                        continue
                    seen = False
                    for j2 in range(j):
                        if server_switch[links[m, j2]] == v:
                            seen = True
                            break
                    if not seen:
                        cnt += 1
                sw = float(max(cnt, 1))
            d[6] = sw / 8.0
            if len(flags):
                f0 = 0.0
                f1 = 0.0
                for j in range(row_gpu_lo[m], row_gpu_hi[m]):
                    f0 += flags[row_gpus[j], 0]
                    f1 += flags[row_gpus[j], 1]
                d[7] = f0 / k
                d[8] = f1 / k
            d[9] = 1.0 - 1.0 / values[m, 6]
            d[10] = values[m, 7]
            d[11] = eta[m]
            d[12] = eta[m] * values[m, 7]
            most = 0
            for j in range(W):
                most = max(most, link_load[links[m, j]])
            d[13] = most / (most + 1.0) if W else 0.0
            d[14] = min(min(values[m, 3], b_inter[m]), bw_ref) / bw_ref
            a = row_slot[m] * C + row_cand[m]
            for c in range(17):
                cand[i, a, c] = min(max(d[c], 0.0), 1.0)
        # The queue table: one row per filled slot.
        nq = table_slots[i + 1] - x0
        for q in range(nq):
            x = x0 + q
            queue[i, q, 0] = 1.0
            queue[i, q, 1] = min(slot_k[x] / max_job_gpus, 1.0)
            queue[i, q, 2] = slot_cols[x, 0]
            queue[i, q, 3] = slot_cols[x, 1]
            queue[i, q, 4] = slot_cols[x, 2]
            queue[i, q, 7] = min(copies[i, q] / 16.0, 1.0)
            best = np.float32(0.0)
            for c in range(C):
                best = max(best, cand[i, q * C + c, 11])
            queue[i, q, 6] = best
        for m in range(table_rows[i], table_rows[i + 1]):
            queue[i, row_slot[m], 5] += 1.0
        for q in range(nq):
            queue[i, q, 5] = queue[i, q, 5] / C
    summary = np.empty((n, 10), dtype=np.float32)
    K = max(queue_size, 1)
    for i in range(n):
        r = regions[i]
        summary[i, 0] = min(pending[i] / K, 1.0)
        summary[i, 1] = min(max(pending[i] - in_view[i], 0) / K, 1.0)
        summary[i, 2] = min(pending_gpus[i] / G, 1.0)
        summary[i, 3] = free[i] / G
        summary[i, 4] = min(max(F[r] / G, 0.0), 1.0)
        summary[i, 5] = utilization[r]
        summary[i, 6] = min(max(comm_overhead[r], 0.0), 1.0)
        summary[i, 7] = failed_frac[r]
        summary[i, 8] = abnormal_frac[r]
        summary[i, 9] = min(steps[i] / max(max_steps, 1), 1.0)
    return gpus, cand, queue, summary


@njit(cache=True, nogil=True)
def region_sums(active: Any, first_gpu: Any, data: Any, out: int, region_gpus: int, R: int) -> Any:
    """Per region, over its active slots in the order of their jobs' first GPUs (as
    :meth:`ClusterState.region_metrics <crop_gym.model.state.ClusterState.region_metrics>` adds
    them): ``(F, jobs, busy GPUs, Σ k C / T / busy GPUs)`` (the last 0 without a job). ``data`` is the slot table (its value, ``T``
    and ``C`` are columns ``out + 3``, ``out`` and ``out + 1``)."""
    rows = np.flatnonzero(active)
    order = rows[np.argsort(first_gpu[rows], kind="mergesort")]
    F = np.zeros(R)
    jobs = np.zeros(R, dtype=np.int64)
    busy = np.zeros(R)
    comm = np.zeros(R)
    for s in order:
        r = first_gpu[s] // region_gpus
        k = data[s, 0]
        F[r] += data[s, out + 3]
        jobs[r] += 1
        busy[r] += k
        comm[r] += k * data[s, out + 1] / data[s, out]
    for r in range(R):
        comm[r] = comm[r] / max(busy[r], 1.0) if busy[r] > 0 else 0.0
    return F, jobs, busy.astype(np.int64), comm


@njit(cache=True, nogil=True)
def place_rows(
    data: Any,
    links: Any,
    active: Any,
    first_gpu: Any,
    owner: Any,
    load: Any,
    slots: Any,
    values: Any,
    new_links: Any,
    const: Any,
    gpus: Any,
    gpu_ptr: Any,
    eff_bw: Any,
    nf: int,
    out: int,
    region_gpus: int,
    R: int,
    ring: bool,
    overlap: float,
    overlap_cap: float,
    fabric: float,
    nic: float,
    latency: float,
) -> Any:
    """Place jobs in ``slots`` of the state's arrays (in place), as
    :meth:`ClusterState.place <crop_gym.model.state.ClusterState.place>` does: job ``i`` holds
    ``gpus[gpu_ptr[i]:gpu_ptr[i + 1]]`` with facts ``values[i]``, links ``new_links[i]`` and
    constants ``const[i]``; the loads of its links grow by one; every job sharing one of those
    links, and the new ones, are re-evaluated; returns the new F of every region."""
    n = len(slots)
    N = len(load)
    W = links.shape[1]
    on = np.zeros(N, dtype=np.bool_)
    for i in range(n):
        s = slots[i]
        for c in range(nf):
            data[s, c] = values[i, c]
        for c in range(out - nf):
            data[s, nf + c] = const[i, c]
        data[s, out + 3] = 0.0
        for j in range(W):
            links[s, j] = 0
        for j in range(new_links.shape[1]):
            e = new_links[i, j]
            links[s, j] = e
            if e > 0:
                load[e] += 1
                on[e] = True
        active[s] = True
        for j in range(gpu_ptr[i], gpu_ptr[i + 1]):
            owner[gpus[j]] = s
        first_gpu[s] = gpus[gpu_ptr[i]]
    # The jobs to re-evaluate: the new ones and those sharing one of their links.
    S = len(active)
    pick = np.zeros(S, dtype=np.bool_)
    for i in range(n):
        pick[slots[i]] = True
    for s in range(S):
        if active[s] and not pick[s]:
            for j in range(W):
                if on[links[s, j]]:
                    pick[s] = True
                    break
    rows = np.flatnonzero(pick)
    m = len(rows)
    rv = np.empty((m, nf))
    rl = np.empty((m, W), dtype=links.dtype)
    rc = np.empty((m, out - nf))
    for x in range(m):
        s = rows[x]
        for c in range(nf):
            rv[x, c] = data[s, c]
        for c in range(out - nf):
            rc[x, c] = data[s, nf + c]
        for j in range(W):
            rl[x, j] = links[s, j]
    T, C, eta, value, _ = row_times(
        rv, rl, rc, eff_bw, load, 0, ring, overlap, overlap_cap, fabric, nic, latency
    )
    for x in range(m):
        s = rows[x]
        data[s, out] = T[x]
        data[s, out + 1] = C[x]
        data[s, out + 2] = eta[x]
        data[s, out + 3] = value[x]
    F, _, _, _ = region_sums(active, first_gpu, data, out, region_gpus, R)
    return F
