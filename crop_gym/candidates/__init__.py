"""Candidate placements: compact GPU sets for a job of ``k`` GPUs (DESIGN §3, step 1).

Shared by CROP, the baselines and the environments. For every subtree (server, ToR, pod, root) with
at least ``k`` free usable GPUs, take the ``k`` best GPUs inside it: fill the servers with the most
free GPUs first (so that as few links as possible are spanned) and, inside a server, take the healthiest
and fastest GPUs first (lowest ``σ_g / speed_g / (1 - π_g)``). Duplicates are removed and the list is
capped, keeping the candidates that span the fewest servers, then the healthiest, then the tightest fit
(fewest free GPUs left in the subtree, which limits fragmentation). Ring order = DFS order = sorted
GPU indices.

With ``robust=True`` every switch subtree also offers a *health-first* candidate: its ``k`` healthiest
free GPUs (servers with the most free GPUs first among equally healthy ones), when that set is
healthier than every compact candidate taken inside the subtree. Without it a job could only avoid a
straggler by leaving a server that holds it whole, and CROP's measured ratio to the optimum under the
``severe`` profile dropped from 0.96 to 0.87 (docs/CROP.md).

With ``robust=False`` device health is ignored when choosing (the "CROP without robustness"
ablation): every usable GPU looks alike. Failed GPUs are never candidates.

Candidate sets depend only on the free GPUs, the health and ``k``; they are cached per
:attr:`ClusterState.version`, so jobs of the same size share one computation, and what every size
needs (the GPU order inside each server, free counts, badness prefix sums) is computed once per
version. What depends on the health alone (badness scores, the health order of each server's GPUs)
is kept until the health changes. Clusters with few servers work in plain Python (numpy's per-call
overhead dominates there) and keep, from one version to the next, every server and switch subtree
whose free GPUs did not change, with the rows already computed for them (a placement changes a
server or two); larger ones use vectorised numpy. Both give the same candidates, bit for bit.

The package, by role:

* :mod:`~crop_gym.candidates.generate`: the entry points (:func:`candidate_placements`,
  :func:`candidate_sets`) and the choice, per state version, between the two generators below;
* :mod:`~crop_gym.candidates.small`: the plain-Python generator for small clusters;
* :mod:`~crop_gym.candidates.vectorised`: the numpy generator for large clusters;
* :mod:`~crop_gym.candidates.data`: what both generators start from: :func:`gpu_quality`, the
  per-topology and per-health data, and the ``SMALL_SERVERS`` knob that picks the generator;
* :mod:`~crop_gym.candidates.candidate_set`: the result, :class:`CandidateSet`, and the
  candidate rows both generators produce and :func:`~crop_gym.candidates.candidate_set._assemble`
  turns into one.

``SMALL_SERVERS`` is re-exported here for reading; it is read, and must be set (e.g. monkeypatched),
on :mod:`crop_gym.candidates.data`.
"""

from crop_gym.candidates.candidate_set import CandidateSet
from crop_gym.candidates.data import SMALL_SERVERS as SMALL_SERVERS
from crop_gym.candidates.data import gpu_quality
from crop_gym.candidates.generate import candidate_placements, candidate_sets

__all__ = ["CandidateSet", "candidate_placements", "candidate_sets", "gpu_quality"]
