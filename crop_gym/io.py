"""Safe file handling, used by every command, loader and result writer.

Reads refuse what would hang or explode (non-regular files, oversized files, YAML aliases) and
duplicate keys (:func:`read_mapping`, :func:`parse_mapping`).

Writes go through one writer, :func:`write_outputs` (:func:`atomic_write_with` and its text and
bytes forms are the one-file case). It never writes where a path happens to point when the work
ends, only where the user pointed when it began:

1. :func:`check_outputs`, before the work, refuses an output that is an input or another output, an
   existing directory, symbolic link, FIFO or device, and a folder that is missing or that a file
   cannot be created in (a ``/proc`` path, a read-only mount; probed by creating and removing a
   file, since root passes every permission test), each with the user's path. It returns each
   output's folder pinned by identity (:class:`OutputFolder`: device and inode).
2. Each writer writes its whole content to a private staging folder. Only when every writer has
   succeeded is each file copied into a temporary file created through a handle on its destination
   folder, the handle's identity compared with the pinned one (a folder swapped for a link during
   the run is refused, not followed), and the destination's name checked once more through that
   handle: nothing, or a regular file.
3. Then, with Ctrl-C held, every temporary file is renamed over its destination through the same
   handle, so a reader sees the old file or the new one, never half of one, and a failure or
   Ctrl-C before this step leaves every destination as it was and no temporary file behind.

The handles are POSIX directory file descriptors (``dir_fd``); crop_gym runs on Linux and macOS.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
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
    "OutputFolder",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_with",
    "check_outputs",
    "check_regular_input",
    "parse_mapping",
    "pin_folder",
    "read_mapping",
    "write_outputs",
]


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


#: YAML constructs that a quote or bracket opens: an error inside one names the line it opened on
#: (an unterminated quote otherwise shows up at the end of the file).
_YAML_OPENED = ("while scanning a quoted scalar", "while parsing a flow")
_TOML_AT = re.compile(r"\(at line (\d+), column \d+\)$")


def _yaml_message(e: yaml.MarkedYAMLError, source: str) -> str:
    problem = e.problem or e.context or "syntax error"
    if e.context and e.context_mark is not None and e.context.startswith(_YAML_OPENED):
        opened = e.context_mark.line + 1
        at = f" on line {e.problem_mark.line + 1}" if e.problem_mark is not None else ""
        what = e.context.removeprefix("while scanning ").removeprefix("while parsing ")
        return f"{source}:{opened}: invalid YAML ({what} that opens on this line: {problem}{at})"
    mark = e.problem_mark or e.context_mark
    line = f":{mark.line + 1}" if mark is not None else ""
    return f"{source}{line}: invalid YAML ({problem})"


def _toml_message(e: tomllib.TOMLDecodeError, text: str, source: str) -> str:
    message = str(e)
    at = _TOML_AT.search(message)
    if at is not None:
        problem = message[: at.start()].strip()
        if problem == "Illegal character '\\n'":  # a one-line string runs into the line's end
            problem += ": a quote opened on this line is not closed"
        return f"{source}:{at.group(1)}: invalid TOML ({problem})"
    if message.startswith("Unterminated string"):
        # Only a multi-line string can run to the end of the document: name where it opened.
        opened, quote = None, None
        for n, line in enumerate(text.splitlines(), start=1):
            for q in re.findall(r'"""|\'\'\'', line):
                if quote is None:
                    opened, quote = n, q
                elif q == quote:
                    opened, quote = None, None
        if opened is not None:
            return (
                f"{source}:{opened}: invalid TOML (a multi-line string opens on this line and is "
                "never closed)"
            )
    return f"{source}: invalid TOML ({message})"


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
        raise ConfigError(_yaml_message(e, source)) from None
    except yaml.YAMLError as e:
        text_e = " ".join(str(e).split())  # PyYAML's reader errors span lines
        raise ConfigError(f"{source}: invalid YAML ({text_e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(_toml_message(e, text, source)) from None
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
@dataclass(frozen=True)
class OutputFolder:
    """A folder outputs go to, pinned by identity when a command starts (:func:`pin_folder`).

    Attributes:
        path: The folder's absolute path, symbolic links not resolved (as the user gave it).
        device: ``st_dev`` of the folder when pinned.
        inode: ``st_ino`` of the folder when pinned.
    """

    path: str
    device: int
    inode: int


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _folder_of(path: str | os.PathLike[str]) -> str:
    return os.path.dirname(os.path.abspath(path)) or os.sep


def _open_folder(folder: str, shown: str) -> int:
    try:
        return os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        raise ConfigError(f"{shown}: folder {folder} does not exist") from None
    except NotADirectoryError:
        raise ConfigError(f"{shown}: {folder} is not a folder") from None
    except OSError as e:
        raise ConfigError(f"{shown}: cannot open folder {folder} ({e.strerror})") from None


def _probe_writable(dfd: int, folder: str, shown: str) -> None:
    """Create and remove a file in the folder: the only test that holds for root and odd mounts."""
    probe = f".crop-gym-probe-{secrets.token_hex(6)}"
    try:
        fd = os.open(probe, _NEW_FILE_FLAGS, 0o600, dir_fd=dfd)
    except OSError as e:
        raise ConfigError(
            f"{shown}: folder {folder} is not writable (creating a file there: {e.strerror})"
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe, dir_fd=dfd)


def pin_folder(folder: str | os.PathLike[str], *, shown: str | None = None) -> OutputFolder:
    """Pin ``folder`` for later writes: it must exist and take a new file.

    Args:
        folder: The folder.
        shown: What to call it in errors (the option and the user's path); default the folder.

    Raises:
        ConfigError: One line naming ``shown`` if the folder is missing, not a folder or not
            writable.
    """
    path = os.path.abspath(folder)
    label = shown if shown is not None else str(folder)
    dfd = _open_folder(path, label)
    try:
        _probe_writable(dfd, path, label)
        st = os.fstat(dfd)
    finally:
        os.close(dfd)
    return OutputFolder(path, st.st_dev, st.st_ino)


def _refuse_special(st: os.stat_result | None, shown: str, when: str = "") -> None:
    """Refuse an existing entry that is not a regular file (``when`` says it changed meanwhile)."""
    if st is None or stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        what = "a directory"
    elif stat.S_ISLNK(st.st_mode):
        what = "a symbolic link (refusing to replace it)"
    else:
        what = "not a regular file (refusing to replace it)"
    raise ConfigError(f"{shown}: {'became ' if when else 'is '}{what}{when}")


def check_outputs(
    outputs: Mapping[str, str | os.PathLike[str] | None],
    inputs: Iterable[str | os.PathLike[str] | None] = (),
) -> dict[str, OutputFolder]:
    """Check every output path of a command before it runs, and pin each output's folder.

    Each output must not be an input or another output (compared after resolving symlinks), nor an
    existing directory, symlink, FIFO, device or other non-regular file, and its folder must exist
    and take a new file. ``"-"`` (stdout) is allowed once.

    Args:
        outputs: Option name (e.g. ``"--json"``) → path, or ``None`` when not given.
        inputs: Paths the command reads.

    Returns:
        ``str(path)`` → its pinned folder, for every output but ``-``: pass it to
        :func:`write_outputs`, which then refuses a folder that was swapped during the work.

    Raises:
        ConfigError: One line naming the option and the user's path.
    """
    seen: dict[str, str] = {}
    ins: dict[str, str] = {}
    pinned: dict[str, OutputFolder] = {}
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
        _refuse_special(st, f"{flag} {shown}")
        folder = _folder_of(path)
        if not os.path.isdir(folder):
            raise ConfigError(
                f"{flag} {shown}: folder {os.path.dirname(shown) or '.'} does not exist"
            )
        pinned[shown] = pin_folder(folder, shown=f"{flag} {shown}")
    return pinned


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ignore SIGINT until the block ends (main thread only): the work is done, let it land."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class _Placed:
    """One output copied into a temporary file of its destination folder, not yet renamed."""

    dest: str
    dir_fd: int
    name: str
    tmp_name: str | None = None


def _entry(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _place(dest: str, staged: Path, folder: OutputFolder | None, placed: list[_Placed]) -> None:
    """Copy ``staged`` into a temporary file beside ``dest``, through a handle on its folder."""
    path = folder.path if folder is not None else _folder_of(dest)
    dir_fd = _open_folder(path, dest)
    item = _Placed(dest, dir_fd, os.path.basename(dest))
    placed.append(item)
    if folder is not None:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) != (folder.device, folder.inode):
            raise ConfigError(
                f"{dest}: folder {folder.path} was replaced while the command ran "
                "(refusing to write into what is there now)"
            )
    _refuse_special(_entry(dir_fd, item.name), dest, " while the command ran")
    tmp_name = f".{item.name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp_name, _NEW_FILE_FLAGS, 0o666, dir_fd=dir_fd)  # 0o666 & ~umask, as open()
    except OSError as e:
        raise ConfigError(f"{dest}: cannot create a file in {path} ({e.strerror})") from None
    item.tmp_name = tmp_name
    with os.fdopen(fd, "wb") as out, open(staged, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def write_outputs(
    outputs: Mapping[str, Callable[[Path], object]],
    folders: Mapping[str, OutputFolder] | None = None,
) -> list[str]:
    """Write a command's outputs all or none, each atomically: the one writer of the package.

    Args:
        outputs: Destination path (``-`` for stdout) → a writer that writes the whole content to
            the path it is given (a file named as the destination, in a private folder, so figure
            writers read the format from its suffix).
        folders: What :func:`check_outputs` returned: a destination listed here is written only
            into the folder pinned then. Others are written into the folder their path names now.

    Returns:
        The destinations written, except ``-``, in order.

    Raises:
        ConfigError: One line naming the destination if its folder is gone, was replaced, or
            cannot take a file, or if the destination became something other than a regular file;
            nothing is written then. Whatever a writer raises propagates, nothing written either.
    """
    folders = folders or {}
    staging = Path(tempfile.mkdtemp(prefix="crop-gym-out-"))
    placed: list[_Placed] = []
    try:
        staged: list[tuple[str, Path]] = []
        for i, (dest, write) in enumerate(outputs.items()):
            own = staging / str(i)
            own.mkdir()
            tmp = own / ("stdout" if dest == "-" else os.path.basename(dest))
            write(tmp)
            if not tmp.is_file():
                raise RuntimeError(f"the writer of {dest} wrote no file")  # a bug, not bad input
            staged.append((dest, tmp))
        for dest, tmp in staged:
            if dest != "-":
                _place(dest, tmp, folders.get(dest), placed)
        with _interrupts_held():
            for item in placed:
                assert item.tmp_name is not None
                _refuse_special(_entry(item.dir_fd, item.name), item.dest, " while the command ran")
                os.replace(item.tmp_name, item.name, src_dir_fd=item.dir_fd, dst_dir_fd=item.dir_fd)
                item.tmp_name = None
            for dest, tmp in staged:
                if dest == "-":
                    sys.stdout.write(tmp.read_text(encoding="utf-8"))
                    sys.stdout.flush()
    finally:
        for item in placed:
            if item.tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(item.tmp_name, dir_fd=item.dir_fd)
            os.close(item.dir_fd)
        shutil.rmtree(staging, ignore_errors=True)
    return [dest for dest in outputs if dest != "-"]


def atomic_write_with(
    path: str | os.PathLike[str],
    write: Callable[[Path], object],
    *,
    folder: OutputFolder | None = None,
) -> Path:
    """Write one file atomically through a writer that takes a path (``savefig``, ``model.save``).

    The one-file case of :func:`write_outputs`.

    Args:
        path: The destination; missing parent folders are created (unless ``folder`` is given).
        write: Writes the whole content to the path it is given.
        folder: The destination's folder as pinned before the work (:func:`pin_folder`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    dest = Path(path)
    if folder is None:
        dest.parent.mkdir(parents=True, exist_ok=True)
    write_outputs({str(dest): write}, {str(dest): folder} if folder is not None else None)
    return dest


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, *, folder: OutputFolder | None = None
) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write_with`)."""
    return atomic_write_with(path, lambda p: p.write_bytes(data), folder=folder)


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, folder: OutputFolder | None = None
) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"), folder=folder)


def atomic_write(
    path: str | os.PathLike[str], data: bytes | str, *, folder: OutputFolder | None = None
) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return atomic_write_bytes(path, raw, folder=folder)
