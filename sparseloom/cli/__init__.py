"""The ``sparseloom`` command line.

Each sub-module of :mod:`sparseloom.cli` adds its commands to :data:`main` by listing them in
a module-level ``COMMANDS`` tuple; heavy libraries are imported inside the commands only.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from typing import Any, NoReturn

import click

from sparseloom.cli.parsing import CheckedGroup
from sparseloom.core import __version__
from sparseloom.core.errors import DEBUG_ENV, PluginCallError, SparseloomError
from sparseloom.runtime.interrupts import pressed, redeliver_lost_interrupts, remember_interrupts

#: Modules whose ``COMMANDS`` join the top-level group, in help order.
COMMAND_MODULES: tuple[str, ...] = (
    "sparseloom.cli.plugins",
    "sparseloom.cli.devices",
    "sparseloom.cli.bench",
    "sparseloom.cli.workloads",
    "sparseloom.cli.zoo",
    "sparseloom.cli.profile",
    "sparseloom.cli.plan",
    "sparseloom.cli.run",
    "sparseloom.cli.evaluate",
    "sparseloom.cli.demo",
    "sparseloom.cli.cache",
)


class _Group(CheckedGroup):
    """A group that turns :class:`SparseloomError` into one clear line and exit status 1.

    Every ``OSError`` a user can cause is converted where it happens, naming the path and the
    fix. As a last resort an ``OSError`` about a named file that slipped through is one line
    too (a path problem is the user's to fix, whatever the code that met it); ``$SPARSELOOM_DEBUG``
    shows its traceback, and that of a third-party plugin's failure (a :class:`PluginCallError`).
    Any other exception is a bug and keeps its traceback. Repeated options are refused as in
    every group (:class:`~sparseloom.cli.parsing.CheckedGroup`).
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            _interrupted()
        except Exception as error:
            if pressed():  # Ctrl-C became another error on its way (an import it cut short)
                _interrupted()
            if isinstance(error, SparseloomError):
                _close_progress_bars()
                if isinstance(error, PluginCallError) and os.environ.get(DEBUG_ENV):
                    traceback.print_exception(error)
                raise click.ClickException(str(error)) from error
            if not isinstance(error, OSError) or error.filename is None \
                    or os.environ.get(DEBUG_ENV):
                raise
            raise click.ClickException(
                f"cannot use {error.filename}: {error.strerror or error}; check the path and its "
                f"permissions (set {DEBUG_ENV}=1 to see where it happened)"
            ) from error

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # Ctrl-C while the arguments are parsed: the same one line and status as in a command.
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            _interrupted()


def _interrupted() -> NoReturn:
    """Ctrl-C, wherever a command was: one line, no traceback, and the shell's status for
    SIGINT (130) rather than click's "Aborted!" and 1. Commands that measure (``run``,
    ``bench serve``) print what they measured first, marked as cut short."""
    _close_progress_bars()
    click.echo("Interrupted (Ctrl-C).", err=True)
    raise click.exceptions.Exit(130) from None


def _close_progress_bars() -> None:
    """Close the progress bars a failed step left open, so that the error starts its own line
    (``Error:`` is otherwise printed after a half-drawn bar)."""
    tqdm_module = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm_module, "tqdm", None), "_instances", ()) or ()):
        with contextlib.suppress(Exception):  # a bar that cannot redraw must not hide the error
            bar.close()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sparseloom")
def cli() -> None:
    """Run several DNNs at once on a heterogeneous edge SoC under accuracy and latency SLOs.

    sparseloom partitions each task's model into layer-aligned subgraphs, compresses them into
    pruned and quantized variants, stitches new variants from them without retraining, and
    places them on the processors (CPU, GPU, NPU) so that every task meets its SLO.

    Start with `sparseloom devices` and `sparseloom workloads list`; `sparseloom demo` runs
    the whole job on the bundled default workload.
    """


for _module_name in COMMAND_MODULES:
    for _command in importlib.import_module(_module_name).COMMANDS:
        cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit status instead of raising SystemExit.

    The process freezes the survivors of its full collections (:mod:`sparseloom.runtime.heap`):
    long commands otherwise spend up to half their time walking the ML libraries' objects.
    Ctrl-C ends any command with status 130 and one line, also when its exception was lost
    on the way (:mod:`sparseloom.runtime.interrupts`); with ``argv`` ``None`` (the process's
    own command line) the process then exits within :data:`EXIT_GRACE_S` whatever threads
    are left.
    """
    from sparseloom.runtime.heap import SURVIVOR_FREEZE

    SURVIVOR_FREEZE.install()
    redeliver_lost_interrupts()
    with remember_interrupts():
        try:
            status = _run(argv)
            swallowed = pressed() and status != 130  # Ctrl-C whose exception was lost
        except KeyboardInterrupt:  # one delivered again after the command had ended
            swallowed, status = True, 0
        if swallowed:
            click.echo("Interrupted (Ctrl-C).", err=True)
            status = 130
    if status == 130 and argv is None:
        _exit_soon(status)
    return status


def _run(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="sparseloom", standalone_mode=True)
    except SystemExit as stop:
        code = stop.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        click.echo(code, err=True)
        return 1
    return 0


#: Seconds the process may take to shut down after Ctrl-C before it exits regardless.
EXIT_GRACE_S = 3.0


def _exit_soon(status: int) -> None:
    """After Ctrl-C, make sure the process ends: a thread that Ctrl-C cut off while it was
    being set up (a thread pool's worker started but not yet registered for shut-down) would
    otherwise keep the interpreter waiting for it forever. Only for the process's own command
    line (``argv`` None), never for a caller of :func:`main`."""
    import threading
    import time

    def exit_now() -> None:
        time.sleep(EXIT_GRACE_S)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

    threading.Thread(target=exit_now, name="sparseloom-exit", daemon=True).start()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
