"""Safe file handling, used by every command, loader and result writer.

Writes are atomic: a file is written to a temporary file in its destination folder and moved over
the destination with ``os.replace``, so readers see the old file or the new one, never half of one.
Reads refuse what would hang or explode (non-regular files, oversized files, YAML aliases) and
duplicate keys; outputs are checked before a command runs (:func:`check_outputs`).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]

from crop_gym.errors import ConfigError

__all__ = [
    "MAX_CONFIG_BYTES",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_with",
    "check_outputs",
    "check_regular_input",
    "parse_mapping",
    "read_mapping",
]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Write a file atomically through a writer that takes a path (``savefig``, ``model.save``...).

    Args:
        path: The destination; missing parent folders are created.
        write: Writes the whole content to the temporary path it is given.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    dest = Path(path)
    if str(dest.parent):
        dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent or Path("."))
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp_path, dest)
    finally:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
    return dest


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""

    def write(p: Path) -> None:
        p.write_bytes(data)

    return atomic_write_with(path, write)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically."""
    return atomic_write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)


# --------------------------------------------------------------------------- safe reading
#: Largest configuration or scenario file read (bytes); larger ones are refused, not parsed.
MAX_CONFIG_BYTES = 1 << 20


def check_regular_input(path: str | os.PathLike[str], *, what: str = "input") -> Path:
    """``path`` if it names an existing regular file, else a one-line :class:`ConfigError`.

    Refuses directories, FIFOs, sockets and device nodes (``/dev/zero`` would never end, a FIFO
    without a writer would block forever) before anything opens them.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ConfigError(f"{p}: {what} file not found") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read {what} file ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ConfigError(f"{p}: {what} is {kind}")
    return p


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses duplicate keys and anchors/aliases (alias bombs)."""


def _compose_no_alias(self: Any) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, "YAML aliases and anchors are not allowed", self.peek_event().start_mark
    )


def _construct_unique_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_ORIG_COMPOSE_NODE = yaml.composer.Composer.compose_node
_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _yaml_compose_node(self: Any, parent: Any, index: Any) -> Any:
    if self.check_event(yaml.events.AliasEvent):
        _compose_no_alias(self)
    event = self.peek_event()
    if getattr(event, "anchor", None) is not None:
        raise yaml.constructor.ConstructorError(
            None, None, "YAML aliases and anchors are not allowed", event.start_mark
        )
    return _ORIG_COMPOSE_NODE(self, parent, index)


_UniqueKeyLoader.compose_node = _yaml_compose_node


def _json_unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_mapping(text: str, fmt: str, source: str) -> dict[str, Any]:
    """Parse a JSON, YAML or TOML document whose top level is a table.

    Args:
        text: The document.
        fmt: ``"json"``, ``"yaml"`` or ``"toml"``.
        source: What to call the document in errors (its path).

    Returns:
        The top-level table (an empty YAML document is ``{}``).

    Raises:
        ConfigError: One line naming ``source`` (and the line where the parser knows it) on a syntax
            error, a duplicate key, a YAML alias or anchor, or a top level that is not a table.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        if fmt == "json":
            data = json.loads(text, object_pairs_hook=_json_unique, parse_constant=_json_constant)
        elif fmt == "yaml":
            data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
        elif fmt == "toml":
            data = tomllib.loads(text)  # TOML itself refuses duplicate keys
        else:
            raise ConfigError(f"{source}: unknown format {fmt!r} (json, yaml or toml)")
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source}:{e.lineno}: invalid JSON ({e.msg})") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{line}: invalid YAML ({e.problem or e.context})") from None
    except yaml.YAMLError as e:
        text_e = " ".join(str(e).split())  # PyYAML's reader errors span lines
        raise ConfigError(f"{source}: invalid YAML ({text_e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: invalid TOML ({e})") from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{source}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a table, got {type(data).__name__}")
    return data


def read_mapping(path: str | os.PathLike[str], *, what: str = "configuration") -> dict[str, Any]:
    """Read a JSON (``.json``), YAML (``.yaml``/``.yml``) or TOML (``.toml``) file of one table.

    Refuses non-regular files, files over :data:`MAX_CONFIG_BYTES`, text that is not UTF-8,
    duplicate keys and YAML aliases, each with one line naming the file.
    """
    p = check_regular_input(path, what=what)
    fmt = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}.get(p.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{p}: {what} file must end in .json, .yaml, .yml or .toml")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror})") from None
    return parse_mapping(text, fmt, str(p))


# --------------------------------------------------------------------------- safe outputs
def check_outputs(
    outputs: Mapping[str, str | os.PathLike[str] | None],
    inputs: Iterable[str | os.PathLike[str] | None] = (),
) -> None:
    """Check every output path of a command before it runs.

    Each output must not be an input or another output (compared after resolving symlinks), nor an
    existing directory, symlink, FIFO, device or other non-regular file, and its folder must exist
    and be writable. ``"-"`` (stdout) is allowed once.

    Args:
        outputs: Option name (e.g. ``"--json"``) → path, or ``None`` when not given.
        inputs: Paths the command reads.

    Raises:
        ConfigError: One line naming the option and the user's path.
    """
    seen: dict[str, str] = {}
    ins: dict[str, str] = {}
    for i in inputs:
        if i is not None and str(i) != "-":
            ins[os.path.realpath(i)] = str(i)
    stdout_used = None
    for flag, path in outputs.items():
        if path is None:
            continue
        shown = str(path)
        if shown == "-":
            if stdout_used is not None:
                raise ConfigError(f"{flag} -: stdout is already used by {stdout_used}")
            stdout_used = flag
            continue
        if shown == "":
            raise ConfigError(f"{flag}: empty path")
        real = os.path.realpath(path)
        if real in ins:
            raise ConfigError(f"{flag} {shown}: is an input of this command ({ins[real]})")
        if real in seen:
            raise ConfigError(f"{flag} {shown}: is also the output of {seen[real]}")
        seen[real] = flag
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise ConfigError(f"{flag} {shown}: cannot be checked ({e.strerror})") from None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise ConfigError(f"{flag} {shown}: is a directory")
            if stat.S_ISLNK(st.st_mode):
                raise ConfigError(f"{flag} {shown}: is a symbolic link (refusing to replace it)")
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"{flag} {shown}: is not a regular file (refusing to replace it)")
        parent = os.path.dirname(os.path.abspath(path)) or "."
        if not os.path.isdir(parent):
            raise ConfigError(
                f"{flag} {shown}: folder {os.path.dirname(shown) or '.'} does not exist"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(
                f"{flag} {shown}: folder {os.path.dirname(shown) or '.'} is not writable"
            )
