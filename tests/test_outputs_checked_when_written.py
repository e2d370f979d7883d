"""Issue 30, class 3: outputs are checked when they are written, not only before the work.

Each case swaps something on the way to an output *after* the command checked it and before it
writes (the command's ``check_outputs`` is wrapped so that the swap happens right after it): the
output's folder for a link to another folder or for a new folder, or the output's own name for a
link, a FIFO or a folder. Whatever the swap, the command ends with one line and status 2, nothing
is written through it (the other folder is byte for byte as it was), what the swap put there is
still there, and no temporary file is left. A folder that cannot take a file (``/proc``) is refused
before the work, with the user's path.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import no_hang

import crop_gym.io
from crop_gym.cli import main
from crop_gym.errors import ConfigError

EF = (
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration",
    "a,1000,500,resnet50,2000,64,2,700",
    "b,1010,800,bert,3000,128,8,900",
)

#: Commands that write ``--json`` (``{T}`` the trace, ``{O}`` the output).
COMMANDS: dict[str, str] = {
    "simulate": "simulate --trace {T} --cluster testbed-8 --no-progress --json {O}",
    "trace": "trace {T} --json {O}",
    "compare": "compare --scenario testbed-8 --seeds 1 --policies first-fit --no-progress --json {O}",
}
#: Commands that do not yet pass ``check_outputs``' pinned folders to ``write_outputs``.
NOT_PINNED: dict[str, str] = {}  # every command writes into the folders it pinned


def _swap_folder_for_link(out: Path, victim: Path) -> None:
    out.parent.rename(out.parent.with_name("out.orig"))
    out.parent.symlink_to(victim, target_is_directory=True)


def _swap_folder_for_folder(out: Path, victim: Path) -> None:
    out.parent.rename(out.parent.with_name("out.orig"))
    out.parent.mkdir()


def _name_to_link(out: Path, victim: Path) -> None:
    out.symlink_to(victim / "precious.json")


def _name_to_fifo(out: Path, victim: Path) -> None:
    os.mkfifo(out)


def _name_to_folder(out: Path, victim: Path) -> None:
    out.mkdir()


SWAPS: dict[str, Callable[[Path, Path], None]] = {
    "folder-to-link": _swap_folder_for_link,
    "folder-to-new-folder": _swap_folder_for_folder,
    "name-to-link": _name_to_link,
    "name-to-fifo": _name_to_fifo,
    "name-to-folder": _name_to_folder,
}


def _tree(root: Path) -> dict[str, str]:
    """Every entry under ``root``: its kind, and a digest for regular files (links not followed)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_fifo():
            out[rel] = "fifo"
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _cases() -> list[object]:
    cases = []
    for command in COMMANDS:
        for swap in SWAPS:
            marks = []
            if command in NOT_PINNED and swap.startswith("folder"):
                marks.append(pytest.mark.xfail(strict=True, reason=NOT_PINNED[command]))
            cases.append(pytest.param(command, swap, id=f"{command}-{swap}", marks=marks))
    return cases


@pytest.mark.parametrize(("command", "swap"), _cases())
def test_a_swap_after_the_check_is_refused_when_writing(
    command: str,
    swap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(EF) + "\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.json").write_text("keep me\n")
    (victim / "out.json").write_text("keep me too\n")
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "out.json"
    original = crop_gym.io.check_outputs

    def check_then_swap(*args: object, **kwargs: object) -> object:
        pinned = original(*args, **kwargs)  # type: ignore[arg-type]
        SWAPS[swap](out, victim)
        return pinned

    monkeypatch.setattr(crop_gym.io, "check_outputs", check_then_swap)
    before = _tree(victim)
    after_swap_kind = None
    line = COMMANDS[command].format(T=trace, O=out)
    with no_hang(120):
        rc = main(line.split())
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(out) in err, err
    assert _tree(victim) == before  # nothing written through the swap
    if swap.startswith("name"):
        after_swap_kind = "link" if out.is_symlink() else "fifo" if out.is_fifo() else "dir"
        assert after_swap_kind == {"name-to-link": "link", "name-to-fifo": "fifo"}.get(swap, "dir")
    left = [p for p in tmp_path.rglob(".*") if p.name.endswith(".tmp") or "probe" in p.name]
    assert not left


@pytest.mark.parametrize("folder", ["/proc", "/proc/self/fd", "/sys"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_that_takes_no_file_is_refused_before_the_work(
    command: str,
    folder: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not os.path.isdir(folder):
        pytest.skip(f"no {folder}")
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(EF) + "\n")
    target = f"{folder}/crop-gym-out.json"
    import crop_gym.workloads.loader as loader

    def never(*args: object, **kwargs: object) -> object:
        raise AssertionError("the work started")

    monkeypatch.setattr(loader, "load_workload", never)
    import crop_gym.baselines.compare as compare

    monkeypatch.setattr(compare, "run_compare", never)
    rc = main(COMMANDS[command].format(T=trace, O=target).split())
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and target in err and "not writable" in err, err
    assert ".tmp" not in err and "probe" not in err


def test_the_one_writer_refuses_a_pinned_folder_that_was_replaced(tmp_path: Path) -> None:
    from crop_gym.io import atomic_write_text, pin_folder

    folder = tmp_path / "runs"
    folder.mkdir()
    pinned = pin_folder(folder)
    atomic_write_text(folder / "a.json", "1\n", folder=pinned)
    folder.rename(tmp_path / "runs.old")  # kept, so the new folder cannot reuse its inode
    folder.mkdir()
    with pytest.raises(ConfigError, match="was replaced"):
        atomic_write_text(folder / "b.json", "2\n", folder=pinned)
    assert list(folder.iterdir()) == []


def test_the_one_writer_keeps_permissions_and_is_all_or_none(tmp_path: Path) -> None:
    from crop_gym.io import write_outputs

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("old")
    mask = os.umask(0o022)
    try:
        assert write_outputs(
            {str(a): lambda p: p.write_text("new"), str(b): lambda p: p.write_text("b")}
        )
    finally:
        os.umask(mask)
    assert (a.read_text(), b.read_text()) == ("new", "b")
    assert oct(b.stat().st_mode & 0o777) == oct(0o644)

    def fails(p: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_outputs({str(a): lambda p: p.write_text("newer"), str(b): fails})
    assert a.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
