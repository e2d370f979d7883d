"""Hardening of the agents: checkpoints that run no code, one-line errors, safe outputs, Ctrl-C.

Needs the rl extra (torch, stable-baselines3, sb3-contrib).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

th = pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")
import cloudpickle  # noqa: E402

from crop_gym.agents.checkpoint import default_checkpoint, load_checkpoint  # noqa: E402
from crop_gym.agents.config import load_config  # noqa: E402
from crop_gym.cli import main  # noqa: E402
from crop_gym.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.rl

TESTBED = "crop_gym/Placement-Testbed8-v0"
TINY = ["n_steps=64", "batch_size=32", "eval_episodes=1"]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    th.set_num_threads(1)


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``crop-gym ARGV`` in-process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ checkpoints run no code
class Payload:
    """Unpickling this writes ``marker`` (what a crafted checkpoint would do, but harmless)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def _rewrite(src: Path, dest: Path, replace: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dest, "w") as out:
        for name in z.namelist():
            out.writestr(name, replace.get(name, z.read(name)))
    return dest


def _serialized(obj: Any) -> dict[str, str]:
    return {
        ":type:": "<class 'object'>",
        ":serialized:": base64.b64encode(cloudpickle.dumps(obj)).decode(),
    }


def _with_data_field(dest: Path, field: str, marker: Path) -> Path:
    src = default_checkpoint()
    with zipfile.ZipFile(src) as z:
        data = json.loads(z.read("data"))
    data[field] = _serialized(Payload(marker))
    return _rewrite(src, dest, {"data": json.dumps(data).encode()})


def _with_tensor_member(dest: Path, member: str, marker: Path) -> Path:
    src = default_checkpoint()
    with zipfile.ZipFile(src) as z:
        state = th.load(io.BytesIO(z.read(member)), weights_only=True)
    state = dict(state)
    state["evil"] = Payload(marker)
    buf = io.BytesIO()
    th.save(state, buf)
    return _rewrite(src, dest, {member: buf.getvalue()})


@pytest.mark.parametrize("field", ["policy_kwargs", "evil_field", "_n_updates"])
def test_pickled_data_fields_are_refused_not_run(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "marker"
    path = _with_data_field(tmp_path / "bad.zip", field, marker)
    with pytest.raises(ConfigError) as exc:
        load_checkpoint(path)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)
    assert "--trust-checkpoint" in str(exc.value)
    rc, _, err = cli(["eval", "--model", str(path), "--episodes", "1", "--no-progress"], capsys)
    assert rc == 2 and str(path) in one_line(err)
    assert not marker.exists()
    # The payload is live: SB3's own loader (what --trust-checkpoint uses) runs it.
    with contextlib.suppress(ConfigError):  # whatever SB3 makes of the field, it unpickled it
        load_checkpoint(path, trust=True)
    assert marker.exists()


def _is_the_shipped_model(model: object) -> bool:
    """The model holds the shipped default's weights and its stored step count (state read from
    the file, not a fresh model's)."""
    with zipfile.ZipFile(default_checkpoint()) as z:
        stored = json.loads(z.read("data"))["num_timesteps"]
    ref, _ = load_checkpoint("default")
    a, b = model.policy.state_dict(), ref.policy.state_dict()  # type: ignore[attr-defined]
    same = a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)
    return same and model.num_timesteps == stored  # type: ignore[attr-defined]


@pytest.mark.parametrize("field", ["policy_class", "observation_space", "lr_schedule", "_last_obs"])
def test_pickled_fields_the_loader_rebuilds_are_never_read(field: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = _with_data_field(tmp_path / "bad.zip", field, marker)
    model, meta = load_checkpoint(path)
    assert meta["env_id"] and _is_the_shipped_model(model)
    assert not marker.exists()


@pytest.mark.parametrize("member", ["policy.pth", "pytorch_variables.pth", "policy.optimizer.pth"])
def test_pickled_objects_in_tensor_files_are_refused(
    member: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "marker"
    path = _with_tensor_member(tmp_path / "bad.zip", member, marker)
    with pytest.raises(ConfigError, match="objects other than tensors") as exc:
        load_checkpoint(path)
    assert "\n" not in str(exc.value)
    rc, _, err = cli(["eval", "--model", str(path), "--episodes", "1"], capsys)
    assert rc == 2 and member in one_line(err)
    assert not marker.exists()


def test_shipped_checkpoint_loads_without_trust_and_matches_sb3_loader() -> None:
    safe, meta = load_checkpoint("default")
    trusted, _ = load_checkpoint("default", trust=True)
    assert meta["hyperparameters"]["clip_range"] == 0.2
    a, b = safe.policy.state_dict(), trusted.policy.state_dict()
    assert a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)
    assert safe.clip_range(1.0) == trusted.clip_range(1.0)
    assert safe.learning_rate == trusted.learning_rate and safe.n_steps == trusted.n_steps


def test_plain_sb3_zip_needs_trust(tmp_path: Path) -> None:
    src = default_checkpoint()
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(tmp_path / "plain.zip", "w") as out:
        for name in z.namelist():
            if name != "crop_gym_agent.json":
                out.writestr(name, z.read(name))
    with pytest.raises(ConfigError, match="trust-checkpoint"):
        load_checkpoint(tmp_path / "plain.zip", algo="maskable_ppo")
    model, _ = load_checkpoint(tmp_path / "plain.zip", algo="maskable_ppo", trust=True)
    assert _is_the_shipped_model(model)


# ------------------------------------------------------------------------- bad checkpoints
def _truncated(tmp: Path) -> Path:
    raw = default_checkpoint().read_bytes()
    (tmp / "t.zip").write_bytes(raw[: len(raw) // 2])
    return tmp / "t.zip"


def _not_zip(tmp: Path) -> Path:
    (tmp / "n.zip").write_text("hello\n")
    return tmp / "n.zip"


def _no_members(tmp: Path) -> Path:
    with zipfile.ZipFile(tmp / "e.zip", "w") as z:
        z.writestr("crop_gym_agent.json", json.dumps({"algo": "ppo", "env_id": TESTBED}))
    return tmp / "e.zip"


@pytest.mark.parametrize("make", [_truncated, _not_zip, _no_members])
def test_bad_checkpoint_files_get_one_line(
    make: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path)
    rc, out, err = cli(["eval", "--model", str(path), "--episodes", "1"], capsys)
    assert rc == 2 and str(path) in one_line(err) and not out


def test_unknown_env_ids_get_one_line_listing_the_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = cli(["eval", "--env", "crop_gym/Nope-v0", "--episodes", "1"], capsys)
    line = one_line(err)
    assert rc == 2 and "crop_gym/Nope-v0" in line and "crop_gym/Placement-v0" in line
    rc, _, err = cli(["train", "--env", "Nope-v1", "--out", str(tmp_path / "r")], capsys)
    assert rc == 2 and "Nope-v1" in one_line(err) and not (tmp_path / "r").exists()


def test_eval_outputs_are_checked_before_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = cli(["eval", "--json", str(tmp_path), "--episodes", "1"], capsys)
    assert rc == 2 and "is a directory" in one_line(err)
    model = tmp_path / "m.zip"
    model.write_bytes(default_checkpoint().read_bytes())
    rc, _, err = cli(["eval", "--model", str(model), "--json", str(model)], capsys)
    assert rc == 2 and "input" in one_line(err)
    rc, _, err = cli(["eval", "--json", str(tmp_path / "no" / "x.json")], capsys)
    assert rc == 2 and "does not exist" in one_line(err)


def test_eval_json_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--episodes", "1", "--baselines", "crop", "--json", "-", "--no-progress"]
    rc, out, err = cli(argv, capsys)
    assert rc == 0
    rep = json.loads(out)
    assert rep["episodes"] == 1 and "ratio_to_crop" in rep and "trained on" in err


# ------------------------------------------------------------------------------ configs
def test_bundled_configs_have_no_aliases_and_resolve() -> None:
    from crop_gym.agents.algorithms import ALGOS
    from crop_gym.agents.config import config_path

    for algo in ALGOS:
        text = config_path(algo).read_text()
        assert "&default" not in text and "<<:" not in text
    cfg = load_config("maskable_ppo", "crop_gym/OnlinePlacement-v0")
    assert cfg.run["env_kwargs"] == {"reward": "jct"} and cfg.algo_kwargs["n_steps"] == 1024
    assert cfg.algo_kwargs["ent_coef"] == 0.01  # from the default entry


def _yaml(tmp: Path, text: str) -> Path:
    (tmp / "c.yml").write_text(text)
    return tmp / "c.yml"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("default:\n  lerning_rate: 0.1\n", "unknown key 'lerning_rate'"),
        ("default:\n  bc:\n    epoch: 3\n", "bc: unknown key 'epoch'"),
        ("default:\n  n_steps: many\n", "n_steps must be an integer"),
        ("default:\n  n_envs: 100000000\n", "n_envs=100000000 is outside"),
        ("default: &d\n  n_steps: 64\nx: *d\n", "aliases"),
        ("default:\n  n_steps: 64\n  n_steps: 65\n", "duplicate key"),
        ("default: 3\n", "must be a mapping"),
        ("default:\n  policy_kwargs:\n    scorer: {hiden: 3}\n", "scorer: unknown key 'hiden'"),
    ],
)
def test_bad_config_files_get_one_line_and_no_run_files(
    text: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _yaml(tmp_path, text)
    out = tmp_path / "run"
    rc, _, err = cli(["train", "--env", TESTBED, "--config", str(path), "--out", str(out)], capsys)
    line = one_line(err)
    assert rc == 2 and str(path) in line and expect in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("items", "expect"),
    [
        (["lerning_rate=0.1"], "unknown key 'lerning_rate'"),
        (["n_steps"], "expected KEY=VALUE"),
        (["n_steps=[1"], "invalid YAML"),
        (["gamma=&a 1"], "aliases"),
        (["n_steps=1e999"], "n_steps must be an integer"),
        (["learning_rate=lin_x"], "learning_rate"),
    ],
)
def test_bad_hyperparams_get_one_line_and_no_run_json(
    items: list[str], expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    argv = ["train", "--env", TESTBED, "--out", str(out), "--hyperparams", *items]
    rc, _, err = cli(argv, capsys)
    line = one_line(err)
    assert rc == 2 and "--hyperparams" in line and expect in line
    assert not (out / "run.json").exists()


def test_train_refuses_outputs_over_inputs_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    cfg = out / "config.yml"
    cfg.write_text("default:\n  n_steps: 64\n")
    rc, _, err = cli(["train", "--env", TESTBED, "--config", str(cfg), "--out", str(out)], capsys)
    assert rc == 2 and "input" in one_line(err)
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = cli(["train", "--env", TESTBED, "--out", str(f)], capsys)
    assert rc == 2 and "not a directory" in one_line(err)


def test_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["train", "--env", TESTBED, "--out", str(out), "--dry-run", "--hyperparams", *TINY]
    rc, stdout, _ = cli(argv, capsys)
    assert rc == 0 and "n_steps: 64" in stdout and not out.exists()


# ----------------------------------------------------------------- steps, failures, Ctrl-C
def test_steps_rounding_is_reported_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["train", "--env", TESTBED, "--steps", "100", "--out", str(out), "--no-progress"]
    rc, _, err = cli([*argv, "--eval-freq", "100000", "--hyperparams", *TINY], capsys)
    assert rc == 0
    assert "note: --steps 100 runs 128 steps" in err
    run = json.loads((out / "run.json").read_text())
    assert run["steps_requested"] == 100 and run["steps"] == 128
    model, meta = load_checkpoint(out / "final_model.zip")
    assert int(model.num_timesteps) == meta["num_timesteps"] == 128
    assert meta["hyperparameters"]["n_steps"] == 64


def test_final_validation_reaches_tensorboard_and_the_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run ends with a validation point at its last step: in run.json, as TensorBoard's last
    eval/* point, and on the progress bar, whose total is the steps that ran (not --steps)."""
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = tmp_path / "run"
    argv = ["train", "--env", TESTBED, "--steps", "100", "--out", str(out)]
    rc, _, err = cli([*argv, "--eval-freq", "100000", "--hyperparams", *TINY], capsys)
    assert rc == 0
    run = json.loads((out / "run.json").read_text())
    fin = run["final_validation"]
    assert fin["steps"] == run["steps"] == 128
    (events,) = {p.parent for p in (out / "tb").rglob("events.out.tfevents*")}
    acc = ea_mod.EventAccumulator(str(events))
    acc.Reload()
    points = acc.Scalars("eval/ratio_to_crop")
    assert [p.step for p in points] == [0, 128]
    assert points[-1].value == pytest.approx(fin["ratio_to_crop"], rel=1e-6)
    assert "train/value_loss" in acc.Tags()["scalars"]  # the last update's losses were dumped
    bar = [s for s in err.replace("\n", "\r").split("\r") if "step/s" in s or "step]" in s]
    assert bar and all("/128 " in s for s in bar), bar[-3:]
    assert "128/128" in bar[-1] and f"ratio_to_crop={fin['ratio_to_crop']:.4f}" in bar[-1]


def test_other_gymnasium_ids_and_unknown_entries_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    rc, _, err = cli(["train", "--env", "CartPole-v1", "--out", str(out), "--dry-run"], capsys)
    assert rc == 2 and "unknown environment 'CartPole-v1'" in one_line(err)
    rc, _, err = cli(["eval", "--env", "CartPole-v1", "--episodes", "1"], capsys)
    assert rc == 2 and "unknown environment 'CartPole-v1'" in one_line(err)
    cfg = tmp_path / "c.yml"
    cfg.write_text("default:\n  n_steps: 64\ncrop_gym/Placement-Testbed8-V0:\n  n_steps: 32\n")
    rc, _, err = cli(["train", "--env", TESTBED, "--config", str(cfg), "--out", str(out)], capsys)
    line = one_line(err)
    assert rc == 2 and str(cfg) in line and "'crop_gym/Placement-Testbed8-V0'" in line
    assert not out.exists()


@pytest.mark.parametrize(("exc", "rc_want", "status"), [(KeyboardInterrupt, 130, "interrupted")])
def test_interrupted_training_marks_run_json(
    exc: type[BaseException],
    rc_want: int,
    status: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sb3_contrib import MaskablePPO

    def learn(self: Any, *a: Any, **k: Any) -> None:
        raise exc()

    monkeypatch.setattr(MaskablePPO, "learn", learn)
    out = tmp_path / "run"
    argv = ["train", "--env", TESTBED, "--steps", "64", "--out", str(out), "--no-progress"]
    rc, _, err = cli([*argv, "--hyperparams", *TINY], capsys)
    assert rc == rc_want and "interrupted" in one_line(err)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == status
    assert not (out / "final_model.zip").exists()
    assert not list(out.glob(".*.tmp"))


def test_failed_training_marks_run_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sb3_contrib import MaskablePPO

    from crop_gym.agents.training import train

    def learn(self: Any, *a: Any, **k: Any) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(MaskablePPO, "learn", learn)
    with pytest.raises(RuntimeError):
        train(env_id=TESTBED, steps=64, out=tmp_path, hyperparams=TINY, progress=False)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "failed" and run["error"] == "boom"


def test_resume_refuses_another_env(tmp_path: Path) -> None:
    from crop_gym.agents.training import train

    common: dict[str, Any] = dict(out=tmp_path, hyperparams=TINY, progress=False, eval_freq=10**6)
    train(env_id=TESTBED, steps=64, **common)
    with pytest.raises(ConfigError, match="was trained on"):
        train(env_id="crop_gym/PlacementGPU-Testbed8-v0", steps=128, resume=True, **common)


def test_interrupted_eval_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import crop_gym.agents.evaluation

    def evaluate(*a: Any, **k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(crop_gym.agents.evaluation, "evaluate", evaluate)
    out = tmp_path / "e.json"
    rc, _, err = cli(["eval", "--episodes", "1", "--json", str(out)], capsys)
    assert rc == 130 and "interrupted" in one_line(err)
    assert not out.exists() and not list(tmp_path.iterdir())
