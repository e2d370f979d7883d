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

__all__ = ["action_tables", "facts_rows", "generate_rows", "row_times"]


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
_times = _compiled_copy(timing.times_arrays, comm_time=_comm, iteration_time=_iteration)
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
            if m <= 128:
                v = _block_sum(a, s_lo[top], m)
            else:
                v = s_left[top] + result  # (result holds the right half's sum)
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
    total_rows = 0
    for i in range(n_req):
        total_rows += cap
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
    """The facts of one placement, its ``k`` GPUs ``g`` sorted (``k >= 1``), into ``values[8]``
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
    for j in range(k):
        if j == 0 or gpu_server[g[j]] != gpu_server[g[j - 1]]:
            runs += 1
            run = 0
        run += 1
        best = max(best, run)
    values[1] = best
    values[2] = runs
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
    ``(values float64[R, 8], inter_links int32[R, W])`` (largest link first, root-padded)."""
    R, kmax = P.shape
    D = upper.shape[1]
    values = np.zeros((R, 8))
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
    ``links[R, W]``, constants ``const[R, 5]``) under the link loads plus ``plus`` (1: each row is
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
    pend_ptr: Any,
    pend_class: Any,
    pend_gpus: Any,
    pend_const: Any,
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

    Region ``r``'s pending jobs (in queue order) are ``pend_ptr[r]:pend_ptr[r + 1]`` of
    ``pend_class`` (their :func:`~crop_gym.envs.actions.job_key` classes), ``pend_gpus`` and
    ``pend_const`` (their job constants); a region with no table wanted has none. Returns
    ``(free, slot_ptr, slot_pos, slot_copies, req_ptr, req_k, count, gpus, servers, subtree,
    quality, row_slot, row_cand, row_src, values, links, own, eta, comm, b_inter, mask,
    row_index)``: the free GPUs; each region's view (slot ``x`` of region ``r``, for ``x`` in
    ``slot_ptr[r]:slot_ptr[r + 1]``, holds its ``slot_pos[x]``-th pending job, standing for
    ``slot_copies[x]`` of them); the distinct candidate sets (request ``i`` is region ``r``'s
    ``i - req_ptr[r]``-th distinct size in order of first appearance, :func:`generate_rows`'s
    layout); per valid row, region by region and slot by slot, its slot within the region, its
    candidate, its row among all distinct sets' rows, facts and gains; and per region the mask
    ``bool[Q * C + 1]`` and the row of each placement action ``int64[Q * C]`` (-1: masked)."""
    R = len(pend_ptr) - 1
    G = len(owner)
    free = np.empty(G, dtype=np.bool_)
    for g in range(G):
        free[g] = owner[g] < 0 and usable[g]
    # The views: the earliest pending job of each class, if it fits, up to Q slots.
    n_pend = len(pend_class)
    slot_pos = np.empty(n_pend, dtype=np.int64)
    slot_copies = np.empty(n_pend, dtype=np.int64)
    slot_ptr = np.zeros(R + 1, dtype=np.int64)
    n_slots = 0
    for r in range(R):
        a, z = pend_ptr[r], pend_ptr[r + 1]
        n_free = 0
        for g in range(reg_gpu[r], reg_gpu[r + 1]):
            if free[g]:
                n_free += 1
        for x in range(a, z):
            if n_slots - slot_ptr[r] == Q:
                break
            if pend_gpus[x] > n_free:
                continue
            earliest = True
            copies = 1
            if group_identical:
                for y in range(a, x):
                    if pend_class[y] == pend_class[x]:
                        earliest = False
                        break
                if earliest:
                    for y in range(x + 1, z):
                        if pend_class[y] == pend_class[x]:
                            copies += 1
            if earliest:
                slot_pos[n_slots] = x - a
                slot_copies[n_slots] = copies
                n_slots += 1
        slot_ptr[r + 1] = n_slots
    slot_pos = slot_pos[:n_slots]
    slot_copies = slot_copies[:n_slots]
    # The distinct sizes of each region's view, in order of first appearance.
    req_k = np.empty(n_slots, dtype=np.int64)
    slot_req = np.empty(n_slots, dtype=np.int64)
    req_ptr = np.zeros(R + 1, dtype=np.int64)
    n_req = 0
    for r in range(R):
        first = n_req
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            k = pend_gpus[pend_ptr[r] + slot_pos[x]]
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
    dvals = np.zeros((n_dist, 8))
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
    row_slot = np.empty(M, dtype=np.int64)
    row_cand = np.empty(M, dtype=np.int64)
    row_src = np.empty(M, dtype=np.int64)
    mask = np.zeros((R, Q * cap + 1), dtype=np.bool_)
    row_index = np.full((R, Q * cap), -1, dtype=np.int64)
    m = 0
    for r in range(R):
        mask[r, Q * cap] = True
        first_row = m
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            i = slot_req[x]
            s = x - slot_ptr[r]
            for c in range(count[i]):
                row_slot[m] = s
                row_cand[m] = c
                row_src[m] = req_row[i] + c
                W = max(W, dwidth[req_row[i] + c])
                mask[r, s * cap + c] = True
                row_index[r, s * cap + c] = m - first_row
                m += 1
    values = np.empty((M, 8))
    links = np.zeros((M, W), dtype=np.int32)
    const = np.empty((M, 5))
    m = 0
    for r in range(R):
        for x in range(slot_ptr[r], slot_ptr[r + 1]):
            i = slot_req[x]
            for c in range(count[i]):
                d = req_row[i] + c
                values[m] = dvals[d]
                for j in range(dwidth[d]):
                    links[m, j] = dfound[d, j]
                const[m] = pend_const[pend_ptr[r] + slot_pos[x]]
                m += 1
    T, comm, eta, own, b = row_times(
        values, links, const, eff_bw, load, 1, ring, overlap, overlap_cap, fabric, nic, latency
    )
    return (
        free,
        slot_ptr,
        slot_pos,
        slot_copies,
        req_ptr,
        req_k,
        count,
        gpus,
        servers,
        subtree,
        quality,
        row_slot,
        row_cand,
        row_src,
        values,
        links,
        own,
        eta,
        comm,
        b,
        mask,
        row_index,
    )
