"""Issue 30, class 2: a checkpoint is bounded in CPU and memory before anything is built.

A table of checkpoints made from the shipped default by changing one thing: its JSON asks for a
huge network or buffer, a field the loader does not know or of the wrong type, members that
together hold too much, a member that is not a torch file. Each is refused with one line naming
the file and the field, within seconds (a hang turns into a failure), or, for fields the loader
rebuilds itself, loaded with that field never read.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import no_hang

th = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import crop_gym.agents.checkpoint as checkpoint  # noqa: E402
from crop_gym.agents.checkpoint import default_checkpoint, load_checkpoint  # noqa: E402
from crop_gym.cli import main  # noqa: E402
from crop_gym.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.rl


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    th.set_num_threads(1)


def _members() -> dict[str, bytes]:
    with zipfile.ZipFile(default_checkpoint()) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write(dest: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    return dest


def _data(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], Path]:
    """A checkpoint whose ``data`` JSON is the default's with ``change`` applied."""

    def make(dest: Path) -> Path:
        members = _members()
        data = json.loads(members["data"])
        change(data)
        members["data"] = json.dumps(data).encode()
        return _write(dest, members)

    return make


def _scorer(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["policy_kwargs"]["scorer"].update(fields)

    return change


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.update(fields)


def _member(name: str, raw: bytes) -> Callable[[Path], Path]:
    def make(dest: Path) -> Path:
        return _write(dest, {**_members(), name: raw})

    return make


def _legacy_torch_file() -> bytes:
    buf = io.BytesIO()
    th.save({"w": th.zeros(2)}, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def _many_members(dest: Path) -> Path:
    """Members each under its own limit that together exceed the (test's lowered) total."""
    return _write(dest, {**_members(), **{f"pad{i}.bin": bytes(200_000) for i in range(8)}})


#: (id, make, words the one-line refusal must hold).
REFUSED: list[tuple[str, Callable[[Path], Path], tuple[str, ...]]] = [
    ("scorer-12000-wide", _data(_scorer(hidden=12_000)), ("policy_kwargs", "hidden")),
    ("scorer-4096-wide", _data(_scorer(hidden=4096)), ("policy_kwargs", "policy.pth")),
    ("scorer-100000-wide", _data(_scorer(hidden=100_000)), ("policy_kwargs",)),
    ("scorer-embed-4096", _data(_scorer(embed=4096)), ("policy_kwargs", "policy.pth")),
    ("scorer-unknown-option", _data(_scorer(width=3)), ("policy_kwargs.scorer", "width")),
    ("scorer-hidden-text", _data(_scorer(hidden="wide")), ("hidden",)),
    (
        "policy-kwargs-unknown",
        _data(lambda d: d["policy_kwargs"].update(bogus=1)),
        ("policy_kwargs",),
    ),
    ("policy-kwargs-list", _data(_set(policy_kwargs=[1, 2])), ("policy_kwargs",)),
    ("n-steps-out-of-range", _data(_set(n_steps=10**9)), ("n_steps",)),
    ("rollout-buffer-too-large", _data(_set(n_steps=2**16, n_envs=64)), ("n_steps", "GiB")),
    ("n-envs-huge", _data(_set(n_envs=10**9)), ("n_envs",)),
    ("gamma-text", _data(_set(gamma="high")), ("gamma",)),
    ("counter-text", _data(_set(num_timesteps="many")), ("num_timesteps",)),
    ("counter-list", _data(_set(_n_updates=[1])), ("_n_updates",)),
    ("unknown-key", _data(_set(evil=1)), ("'evil'", "does not know")),
    ("key-shadowing-a-method", _data(_set(predict=1)), ("'predict'",)),
    ("protected-key", _data(_set(policy="x")), ("'policy'",)),
    ("dunder-key", _data(_set(__class__="x")), ("'__class__'",)),
    (
        "weights-not-torch",
        _member("policy.pth", b'{"w": [1, 2]}'),
        ("policy.pth", "not a torch weights file"),
    ),
    (
        "weights-legacy-pickle",
        _member("policy.pth", _legacy_torch_file()),
        ("policy.pth", "not a torch weights file"),
    ),
    ("weights-empty", _member("policy.pth", b""), ("policy.pth", "not a torch weights file")),
    (
        "variables-not-torch",
        _member("pytorch_variables.pth", b"\x80\x04K\x01."),
        ("pytorch_variables.pth", "not a torch"),
    ),
]


@pytest.mark.parametrize(("make", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_before_anything_is_built(
    make: Callable[[Path], Path], words: tuple[str, ...], tmp_path: Path
) -> None:
    path = make(tmp_path / "bad.zip")
    with no_hang(30), pytest.raises(ConfigError) as exc:  # a hang fails here, not a slow machine
        load_checkpoint(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message, message
    for word in words:
        assert word in message, message
    assert "trust-checkpoint" not in message  # not a matter of trust: the file is wrong


def test_the_total_of_all_members_is_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "MAX_CHECKPOINT_BYTES", 1_000_000)
    path = _many_members(tmp_path / "big.zip")
    assert all(len(b) < checkpoint.MAX_DATA_BYTES for b in _members().values())
    with pytest.raises(ConfigError, match=r"members hold \d+ bytes uncompressed") as exc:
        load_checkpoint(path)
    assert str(path) in str(exc.value)
    with pytest.raises(ConfigError, match="uncompressed"):
        checkpoint.read_metadata(path)


@pytest.mark.parametrize("field", ["policy_class", "observation_space", "lr_schedule", "_last_obs"])
def test_plain_values_of_fields_the_loader_rebuilds_are_never_read(
    field: str, tmp_path: Path
) -> None:
    path = _data(_set(**{field: "not what SB3 wrote"}))(tmp_path / "m.zip")
    model, _ = load_checkpoint(path)
    reference, _ = load_checkpoint("default")
    assert type(model.policy) is type(reference.policy)
    a, b = model.policy.state_dict(), reference.policy.state_dict()
    assert all(th.equal(a[k], b[k]) for k in a)


def test_eval_refuses_a_wide_scorer_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _data(_scorer(hidden=12_000))(tmp_path / "wide.zip")
    with no_hang(60):
        rc = main(["eval", "--model", str(path), "--episodes", "1", "--no-progress"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln]
    assert rc == 2 and len(lines) == 1 and "policy_kwargs" in lines[0], err
