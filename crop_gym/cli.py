"""The ``crop-gym`` command, and what every sub-command shares.

Sub-commands are plug-ins, found through the package entry-point group :data:`COMMAND_GROUP`: each
entry point loads to a ``register(subparsers)`` function, which adds one or more argparse
sub-parsers whose ``func`` default takes the parsed namespace and returns an exit code. The core's
own commands (``calibrate``, ``trace``, ``simulate``, ``study``) are declared there too, beside
those of the packages above the core, so this module names none of them. ``--help`` lists them in
the order of their entry-point names. A command module is cheap to import: heavy dependencies are
imported inside each command's ``func``. An entry point that cannot be loaded (a missing module, a
dependency that fails on import) costs its commands only: one warning line on stderr, and the other
commands work.

Errors. Every error caused by the user's input ends the command with **one line** on stderr,
``crop-gym COMMAND: error: ...``, and exit status 2: argparse errors (an unknown flag, a number out of
range), :class:`~crop_gym.errors.CropGymError` and other :class:`ValueError` s (a bad trace, scenario
or name), and :class:`OSError` s on the user's paths (a missing file). Other ``OSError`` s (a full
disk) exit 1. Ctrl-C prints ``crop-gym COMMAND: interrupted`` and exits 130, leaving no output
written (see :func:`crop_gym.io.write_outputs`). Any other exception is a bug and keeps its traceback; so does
every error when the environment variable ``CROP_GYM_TRACEBACK`` is set to a non-empty value.

Outputs. Commands check their output paths with :func:`crop_gym.io.check_outputs` *before* running
(an output may not be an input, another output, a directory, a symlink, a FIFO or a device, and its
folder must exist and take a file) and write them together with :func:`crop_gym.io.write_outputs` at
the end.
``-`` as a text output (``--json -``, ``--csv -``) writes it to stdout; the human-readable report
then goes to stderr (:func:`report_stream`).
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import io
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import NoReturn, TextIO, cast

from crop_gym import __version__
from crop_gym.errors import ConfigError, CropGymError
from crop_gym.io import write_outputs  # the one writer; here for the commands that import it

__all__ = [
    "COMMAND_GROUP",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "PLOT_FORMATS",
    "CliParser",
    "check_input_file",
    "check_plot_path",
    "main",
    "report_stream",
    "run_cli",
    "write_outputs",
]

#: The entry-point group in which packages declare ``crop-gym`` sub-commands: each entry point
#: loads to a ``register(subparsers)`` function.
COMMAND_GROUP = "crop_gym.commands"

#: Exit status of a usage or input error.
EXIT_INPUT = 2
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: Figure formats ``--plot`` accepts (from the file suffix; no suffix means png).
PLOT_FORMATS: tuple[str, ...] = ("png", "pdf", "svg", "eps", "ps")

#: ``OSError`` s that mean the user named a bad path (exit 2); others (a full disk) exit 1.
_USER_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def _one_line(text: str) -> str:
    parts = [line.strip() for line in str(text).splitlines() if line.strip()]
    return "; ".join(parts) or "failed"


class CliParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are one line on stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with status 2."""
        self.exit(
            EXIT_INPUT, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n"
        )


def command_entry_points() -> list[EntryPoint]:
    """The installed entry points of :data:`COMMAND_GROUP`, sorted by name (one per name)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=COMMAND_GROUP):
        found.setdefault(ep.name, ep)  # the same distribution seen twice on the path: once
    return [found[name] for name in sorted(found)]


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every installed sub-command (:func:`command_entry_points`).

    An entry point that fails to load or to register prints one warning line on stderr and is
    skipped (with ``CROP_GYM_TRACEBACK`` set, its error propagates). With no entry point at all
    (package metadata missing) the parser's error says how to reinstall.
    """
    parser = CliParser(
        prog="crop-gym",
        description="GPU-cluster job placement: CROP, baselines, simulator and RL environments.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    eps = command_entry_points()
    if not eps:
        parser.error(
            f"no commands are installed (no entry points in the group {COMMAND_GROUP}); "
            "reinstall the package, e.g. pip install -e ."
        )
    for ep in eps:
        try:
            register = ep.load()
            register(sub)
        except Exception as exc:
            if os.environ.get("CROP_GYM_TRACEBACK"):
                raise
            print(
                f"crop-gym: warning: commands of the entry point {ep.name!r} ({ep.value}) are "
                f"unavailable: {type(exc).__name__}: {_one_line(str(exc))}",
                file=sys.stderr,
            )
    for command in sub.choices.values():
        _add_quiet(command)
    return parser


def _add_quiet(command: argparse.ArgumentParser) -> None:
    """Give a sub-command ``-q``/``--quiet`` (see :func:`report_stream`)."""
    command.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print nothing but errors and warnings (no report, no progress bar); files named by "
        "the options, and '-' outputs, are still written",
    )


def _os_message(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


@contextlib.contextmanager
def _warnings_as_lines(prog: str) -> Iterator[None]:
    """Show each warning as one line on stderr, ``PROG: warning: MESSAGE`` (not file and line)."""

    def show(message: Warning | str, *args: object, **kwargs: object) -> None:
        print(f"{prog}: warning: {_one_line(str(message))}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def run_cli(func: Callable[[], int | None], prog: str) -> int:
    """Run a command body, turning user errors into one line on stderr and an exit status.

    Args:
        func: The command; returns its exit status (``None`` means 0).
        prog: What to prefix messages with (``"crop-gym simulate"``).

    Returns:
        ``func``'s status; 2 after a :class:`CropGymError`, :class:`ValueError` or an ``OSError``
        naming a bad path; 1 after another ``OSError``, a :class:`MemoryError` or an
        :class:`OverflowError`; 130 after Ctrl-C. Other exceptions propagate (they are bugs), as
        does everything when ``CROP_GYM_TRACEBACK`` is set. Warnings the command raises are one
        line each, ``PROG: warning: ...``, on stderr.
    """
    try:
        with _warnings_as_lines(prog):
            return int(func() or 0)
    except BrokenPipeError:
        # The reader of our stdout went away (``| head``): stop quietly, as other tools do.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        if os.environ.get("CROP_GYM_TRACEBACK"):
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (MemoryError, OverflowError) as exc:
        # An input that asks for more than the machine holds or a number can be (a count no
        # option capped): one line, not a traceback. Options that size the work should refuse
        # such values first, naming themselves.
        if os.environ.get("CROP_GYM_TRACEBACK"):
            raise
        what = "out of memory" if isinstance(exc, MemoryError) else f"a number is too large ({exc})"
        print(
            f"{prog}: error: {what}: the input asks for more than this machine holds",
            file=sys.stderr,
        )
        return 1
    except (CropGymError, ValueError) as exc:
        if os.environ.get("CROP_GYM_TRACEBACK"):
            raise
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        if os.environ.get("CROP_GYM_TRACEBACK"):
            raise
        print(f"{prog}: error: {_one_line(_os_message(exc))}", file=sys.stderr)
        return EXIT_INPUT if isinstance(exc, _USER_PATH_ERRORS) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crop-gym`` console script.

    Argument errors raise :class:`SystemExit` (status 2) after one line on stderr, as argparse does;
    errors while the command runs are returned as the status (see :func:`run_cli`). Ctrl-C from the
    first line on is ``crop-gym: interrupted`` and status 130; only the import of the ``crop_gym``
    package itself (Gymnasium's registry, before this function runs) is outside its reach.
    """
    try:
        # Building the parser imports every command's module (a second or so): Ctrl-C then, or
        # while the arguments are read, is one line too, not a traceback.
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        if os.environ.get("CROP_GYM_TRACEBACK"):
            raise
        print("crop-gym: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not getattr(args, "func", None):
        parser.error("give a command")
    if not args.quiet:
        return run_cli(lambda: args.func(args), f"crop-gym {args.command}")
    if hasattr(args, "no_progress"):
        args.no_progress = True
    token = _QUIET.set(True)
    try:
        return run_cli(lambda: args.func(args), f"crop-gym {args.command}")
    finally:
        _QUIET.reset(token)


# --------------------------------------------------------------------------- shared by commands
def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer ``>= low``, else one line naming the value."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {low}, got {text!r}"
            ) from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {v}")
        return v

    return parse


def number_at_least(low: float, *, inclusive: bool = True) -> Callable[[str], float]:
    """An argparse ``type``: a finite number ``>= low`` (``> low`` if not ``inclusive``), else one
    line naming the value."""
    bound = f"{'>=' if inclusive else '>'} {low:g}"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}") from None
        if not math.isfinite(v) or v < low or (v == low and not inclusive):
            raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text!r}")
        return v

    return parse


def check_input_file(path: str | os.PathLike[str] | None, *, what: str) -> None:
    """Refuse ``path`` unless it is a regular file, when something exists at that path.

    A path where nothing exists is left to the command (it may be a bundled name); a directory, a
    FIFO (which would block) or a device such as ``/dev/zero`` (which would never end) is refused.

    Raises:
        ConfigError: One line naming the path.
    """
    from crop_gym.io import check_regular_input

    if path is not None and os.path.lexists(path):
        check_regular_input(path, what=what)


def check_plot_path(flag: str, path: str | None) -> None:
    """Refuse a ``--plot`` path to stdout or with a suffix that is not a figure format.

    Raises:
        ConfigError: One line naming the option, the path and :data:`PLOT_FORMATS`.
    """
    if path is None:
        return
    if path == "-":
        raise ConfigError(f"{flag} -: a figure cannot be written to stdout; give a file name")
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    if fmt not in PLOT_FORMATS:
        raise ConfigError(
            f"{flag} {path}: unknown figure format {fmt!r} (use .{', .'.join(PLOT_FORMATS)})"
        )


#: Whether the command running now was given ``--quiet`` (set by :func:`main` for its duration).
_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("crop_gym_cli_quiet", default=False)


def report_stream(*outputs: str | None) -> TextIO:
    """Where the human-readable report goes: stderr when one of ``outputs`` is ``-``, else stdout;
    nowhere under ``--quiet`` (a stream that discards what it is given)."""
    if _QUIET.get():
        return cast(TextIO, _Discard())
    return sys.stderr if "-" in outputs else sys.stdout


class _Discard(io.TextIOBase):
    """A text stream that keeps nothing (the report under ``--quiet``)."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
