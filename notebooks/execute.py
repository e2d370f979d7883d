"""Execute the teaching notebooks in place, so their stored outputs are fresh.

Usage (from the repository root; the Jupyter kernel is the current Python's ``ipykernel``)::

    python notebooks/execute.py                 # every notebook
    python notebooks/execute.py 03_crop_step_by_step.ipynb

Each notebook runs top to bottom in a new kernel, with the repository root on ``PYTHONPATH`` and
one thread per numeric library (the outputs are then the same on every machine we tried). The run
time of each notebook is printed. ``tests/test_notebooks.py`` re-executes them the same way and
fails when the stored outputs differ from the fresh ones (notebooks/README.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Environment of the kernel: the repository importable, one thread, no GPU, a headless backend.
KERNEL_ENV = {
    "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "PYTHONHASHSEED": "0",
    "TQDM_DISABLE": "1",
}
#: Per-notebook budget of the lessons: CPU seconds of the kernel (checked by tests/test_notebooks.py).
BUDGET_CPU_S = 180
#: Wall-clock limit of one cell (generous: a loaded machine runs slower than the CPU budget).
CELL_TIMEOUT_S = 600


def execute(nb: object, timeout: int = CELL_TIMEOUT_S) -> object:
    """Run a notebook (an ``nbformat`` node) in a fresh kernel, in the notebooks folder."""
    from nbclient import NotebookClient

    old = {k: os.environ.get(k) for k in KERNEL_ENV}
    os.environ.update(KERNEL_ENV)
    try:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(HERE)}},
        )
        client.execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def main(argv: list[str]) -> int:
    import nbformat

    paths = [HERE / a for a in argv] if argv else sorted(HERE.glob("[0-9]*.ipynb"))
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        execute(nb)
        nbformat.write(nb, path)
        print(f"{path.name}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
