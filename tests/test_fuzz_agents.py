"""Fuzzing the agents' inputs: config YAML, ``--hyperparams`` and checkpoint files.

Every case must end in one of two verdicts: a clear one-line error (:class:`ConfigError`, or the
CLI's exit status 2 with one stderr line) or a correct result (the mutated value honoured, or the
original weights loaded), never a traceback and never a hang (each case runs under an alarm).
The cases are generated from fixed tables and seeded generators; each test prints its count of
cases per verdict (``pytest -s``). Needs the rl extra.
"""

from __future__ import annotations

import contextlib
import math
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

th = pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

from helpers import no_hang  # noqa: E402

from crop_gym.agents.checkpoint import default_checkpoint, load_checkpoint  # noqa: E402
from crop_gym.agents.config import config_path, load_config, parse_hyperparams  # noqa: E402
from crop_gym.cli import main  # noqa: E402
from crop_gym.errors import ConfigError  # noqa: E402
from crop_gym.io import read_mapping  # noqa: E402

pytestmark = pytest.mark.rl

ALGO = "maskable_ppo"
TESTBED = "crop_gym/Placement-Testbed8-v0"
#: Seconds one case may take before it counts as a hang.
ALARM_S = 30

#: Values that are wrong for most keys (and right for a few).
BAD_VALUES: list[Any] = [
    "abc",
    -1,
    0,
    10**30,
    1e308,
    -1e308,
    math.nan,
    math.inf,
    [],
    {},
    None,
    True,
    "lin_abc",
    "lin_1e9",
    0.5,
    2**63,
    [1, "step"],
    "",
]


def alarm(seconds: int = ALARM_S) -> contextlib.AbstractContextManager[None]:
    """Fail a case that runs past ``seconds``."""
    return no_hang(seconds)


def verdict_of(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("error", message)`` for a one-line ConfigError, ``("ok", result)`` otherwise.

    Anything else (another exception, a multi-line message, a hang) fails the test.
    """
    with alarm():
        try:
            return "ok", call()
        except ConfigError as e:
            msg = str(e)
            assert msg and "\n" not in msg and "Traceback" not in msg, msg
            return "error", msg


def _base_entry() -> dict[str, Any]:
    return dict(read_mapping(config_path(ALGO))["default"])


def _paths(entry: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every key path of the entry (nested blocks included)."""
    out: list[tuple[str, ...]] = []
    for k, v in entry.items():
        out.append((k,))
        if isinstance(v, dict):
            for k2, v2 in v.items():
                out.append((k, k2))
                if isinstance(v2, dict):
                    out.extend((k, k2, k3) for k3 in v2)
    return out


def _set(entry: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    import copy

    e = copy.deepcopy(entry)
    d = e
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return e


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        d = d[k]
    return d


def _typos(rng: np.random.Generator, keys: list[str], n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = list(str(rng.choice(keys)))
        i = int(rng.integers(len(k)))
        op = int(rng.integers(3))
        if op == 0:
            del k[i]
        elif op == 1:
            k.insert(i, chr(int(rng.integers(97, 123))))
        else:
            k[i] = chr(int(rng.integers(97, 123)))
        out.append("".join(k))
    return [t for t in out if t not in keys]


def _raw_cases(rng: np.random.Generator) -> list[tuple[str, bytes]]:
    """Files that are not sensible YAML configs at all."""
    base = yaml.safe_dump({"default": _base_entry()}).encode()
    laughs = b'a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: [*c,*c]\n'
    return [
        ("empty file", b""),
        ("only a comment", b"# nothing\n"),
        ("null", b"null\n"),
        ("top-level list", b"- 1\n- 2\n"),
        ("top-level number", b"3\n"),
        ("non-UTF-8", b"default:\n  policy: \xff\xfe\n"),
        ("binary junk", bytes(rng.integers(0, 256, 300, dtype=np.uint8))),
        ("nul bytes", b"\x00" * 64),
        ("alias bomb", laughs),
        ("merge key", b"base: &b {n_steps: 64}\ndefault:\n  <<: *b\n"),
        ("duplicate entry", b"default: {}\ndefault: {}\n"),
        ("duplicate key", b"default:\n  gamma: 1.0\n  gamma: 0.9\n"),
        ("integer entry name", b"1: {}\ndefault: {}\n"),
        ("entry is a list", b"default: [1, 2]\n"),
        ("deep nesting", b"default: " + b"[" * 5000 + b"]" * 5000 + b"\n"),
        ("over 1 MiB", b"# " + b"x" * (1 << 20) + b"\n"),
        ("truncated", base[: len(base) // 2]),
        ("tabs", b"default:\n\tgamma: 1.0\n"),
        ("python tag", b"default: !!python/object/apply:os.system ['true']\n"),
        ("no default, other entry", b"crop_gym/Other-v0: {}\n"),
        ("valid base", base),
    ]


def _entry_cases(rng: np.random.Generator) -> list[tuple[str, tuple[str, ...] | None, Any, bytes]]:
    """(name, key path, value, file) for every key x bad value, and typos of every key."""
    base = _base_entry()
    cases: list[tuple[str, tuple[str, ...] | None, Any, bytes]] = []
    for path in _paths(base):
        for value in BAD_VALUES:
            text = yaml.safe_dump({"default": _set(base, path, value)}).encode()
            cases.append((f"{'.'.join(path)}={value!r}", path, value, text))
    keys = [p[-1] for p in _paths(base)]
    for typo in _typos(rng, keys, 40):
        text = yaml.safe_dump({"default": {**base, typo: 1}}).encode()
        cases.append((f"unknown key {typo!r}", None, None, text))
    return cases


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_fuzz_config_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(20240613)
    verdicts: Counter[str] = Counter()
    path = tmp_path / "c.yml"
    for name, raw in _raw_cases(rng):
        path.write_bytes(raw)
        v, _ = verdict_of(lambda: load_config(ALGO, TESTBED, path))
        verdicts[v] += 1
        if name in ("valid base", "only a comment", "empty file", "null") or name.startswith(
            "no default"
        ):
            assert v == ("ok" if name == "valid base" else "error"), name
        elif name not in ("integer entry name", "truncated"):
            assert v == "error", name
    for name, key_path, value, raw in _entry_cases(rng):
        path.write_bytes(raw)
        v, res = verdict_of(lambda: load_config(ALGO, TESTBED, path))
        verdicts[v] += 1
        if v == "ok":
            assert key_path is not None, f"{name}: an unknown key was accepted"
            assert _same(_get(res.to_dict(), key_path), value), f"{name}: value not honoured"
            verdict_of(lambda res=res: res.algo_arguments(finetune=True))
        else:
            assert str(path) in res, name
    print(f"\nfuzz config files: {sum(verdicts.values())} cases, {dict(verdicts)}")
    assert verdicts["ok"] and verdicts["error"]


def test_fuzz_hyperparams() -> None:
    rng = np.random.default_rng(7)
    base = load_config(ALGO, TESTBED)
    keys = list(base.to_dict())
    texts = [
        "abc",
        "-1",
        "0",
        "1e999",
        "10**30",
        "[1",
        "{a: 1}",
        "&a 1",
        "*a",
        "!!python/none",
        "1.5",
        "lin_3e-4",
        "lin_",
        "null",
        "true",
        "'quoted'",
        "[1, step]",
        "1\n2",
    ]
    items = [f"{k}={t}" for k in keys for t in texts]
    items += [f"{t}=1" for t in _typos(rng, keys, 30)] + ["=1", "novalue", "a=b=c", " =3"]
    verdicts: Counter[str] = Counter()

    def run(item: str) -> Any:
        over = parse_hyperparams([item])
        return over, base.with_overrides(over, "--hyperparams")

    for item in items:
        v, res = verdict_of(lambda item=item: run(item))
        verdicts[v] += 1
        if v == "ok":
            over, cfg = res
            ((k, val),) = over.items()
            assert _same(cfg.to_dict()[k], val), item
        else:
            assert res.startswith("--hyperparams"), res
    print(f"\nfuzz --hyperparams: {sum(verdicts.values())} cases, {dict(verdicts)}")
    assert verdicts["ok"] and verdicts["error"]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    with alarm():
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def _cli_verdict(rc: int, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln]
    assert "Traceback" not in err, err
    if rc == 0:
        return "ok"
    assert rc == 2 and len(lines) == 1, (rc, err)
    return "error"


def test_fuzz_train_cli_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sample of the config cases through ``crop-gym train --dry-run`` in-process."""
    rng = np.random.default_rng(11)
    raw = [r for _, r in _raw_cases(rng) if len(r) < 4096]
    entries = _entry_cases(rng)
    sample = [entries[int(i)][3] for i in rng.choice(len(entries), 40, replace=False)]
    verdicts: Counter[str] = Counter()
    path, out = tmp_path / "c.yml", tmp_path / "run"
    for text in raw + sample:
        path.write_bytes(text)
        argv = ["train", "--env", TESTBED, "--config", str(path), "--out", str(out), "--dry-run"]
        rc, _, err = _cli(argv, capsys)
        verdicts[_cli_verdict(rc, err)] += 1
        assert not out.exists()
    print(f"\nfuzz train --dry-run: {sum(verdicts.values())} cases, {dict(verdicts)}")
    assert verdicts["error"]


def _checkpoint_cases(rng: np.random.Generator, raw: bytes) -> list[tuple[str, bytes]]:
    n = len(raw)
    cases = [(f"truncated at {k}", raw[:k]) for k in (0, 1, 4, 22, n // 2, n - 22, n - 1)]
    cases += [(f"truncated at {k}", raw[:k]) for k in rng.integers(1, n, 25)]
    cases += [
        (f"random bytes {i}", bytes(rng.integers(0, 256, 512, dtype=np.uint8))) for i in range(5)
    ]
    for k in rng.integers(0, n, 25):
        b = bytearray(raw)
        b[int(k)] ^= 0xFF
        cases.append((f"byte {k} flipped", bytes(b)))
    # The metadata's fields set to wrong values.
    import io
    import json

    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    for field in ("algo", "policy", "env_id", "env_kwargs", "hyperparameters"):
        for value in ("x", 3, None, [], {"bogus": 1}):
            meta = json.loads(members["crop_gym_agent.json"])
            meta[field] = value
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                for n, b in members.items():
                    z.writestr(n, json.dumps(meta) if n == "crop_gym_agent.json" else b)
            cases.append((f"metadata {field}={value!r}", buf.getvalue()))
    # A structurally valid zip whose members are junk.

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("crop_gym_agent.json", b'{"algo": "maskable_ppo", "env_id": "x"}')
        z.writestr("data", b"{not json")
        z.writestr("policy.pth", b"junk")
    cases.append(("junk members", buf.getvalue()))
    return cases


def test_fuzz_checkpoint_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    raw = default_checkpoint().read_bytes()
    ref, _ = load_checkpoint("default")
    ref_state = ref.policy.state_dict()
    verdicts: Counter[str] = Counter()
    cases = _checkpoint_cases(rng, raw)
    for i, (name, data) in enumerate(cases):
        path = tmp_path / f"c{i}.zip"
        path.write_bytes(data)
        v, res = verdict_of(lambda path=path: load_checkpoint(path))
        verdicts[v] += 1
        if v == "ok":
            state = res[0].policy.state_dict()
            assert all(th.equal(state[k], ref_state[k]) for k in ref_state), name
        else:
            assert str(path) in res, (name, res)
    for i in rng.choice(len(cases), 8, replace=False):
        path = tmp_path / f"c{int(i)}.zip"
        argv = ["eval", "--model", str(path), "--episodes", "1", "--baselines", "none"]
        rc, _, err = _cli([*argv, "--no-progress"], capsys)
        verdicts["cli " + _cli_verdict(rc, err)] += 1
    print(f"\nfuzz checkpoints: {sum(verdicts.values())} cases, {dict(verdicts)}")
    assert verdicts["error"]
