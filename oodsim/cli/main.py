"""The oodsim command: run (any protocol's spec, or a shipped one by name), report, results ls,
cache ls|verify|gc, specs (the shipped specs; copy them to edit), imagenet21k-classes,
imagenet-o (one model or saved logits); severity is an alias of run.

Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal closed) stop a run the same way: finished
work stays in the store, one line says how to resume, and the exit code is 130, 143 or 129.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from oodsim.cli.cache import add_cache_command
from oodsim.cli.imagenet_o import add_command as add_imagenet_o
from oodsim.cli.options import add_trust, path_text
from oodsim.cli.reporting import cmd_report
from oodsim.cli.results import add_results_command
from oodsim.cli.run import add_run_options, cmd_run
from oodsim.cli.specs import add_command as add_specs
from oodsim.environment import check_environment
from oodsim.errors import DEBUG_ENV, OodsimError, one_line_warnings, telling_interrupt

#: exit code of a command stopped by Ctrl-C (SIGINT): 128 + the signal's number, as for SIGTERM
#: (143) and SIGHUP (129)
EXIT_SIGINT = 128 + signal.SIGINT


def _cmd_imagenet21k(args: argparse.Namespace) -> int:
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.data.imagenet_classes import filter_ood_classes, write_class_table
    from oodsim.results import OutputError, check_writable

    if Path(args.out).is_dir():
        raise OutputError(f"cannot write the class table to {args.out}: it is a folder")
    check_writable(args.out, "the class table")
    with telling_interrupt(f"oodsim: interrupted; the class table was not written to {args.out}"):
        result = filter_ood_classes(None, None, wordnet_root=args.wordnet_root)
        write_class_table(result, args.out)
    for reason, count in sorted(result.counts().items()):
        print(f"{reason:24s} {count:6d}")
    print(f"class table written to {args.out}")
    return 0


def version() -> str:
    """The installed oodsim's version (``oodsim.__version__`` when run from a source tree)."""
    # loaded by the one option that needs it, so every other command starts without it
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("oodsim")
    except PackageNotFoundError:
        from oodsim import __version__  # a source tree without installed metadata

        return __version__


class _Version(argparse.Action):
    """``--version``: the version is looked up when asked for, not each time a command starts
    (reading the installed metadata is the slowest part of building the parser)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs=0, help="show the version and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"oodsim {version()}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors suggest what was meant: a misspelled command gets
    ``no command 'rnu'; did you mean 'run'?`` and the list of commands, a misspelled option
    the closest option of its command."""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # argparse checks a command (a choice of the subcommands) here, naming none close
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            commands = list(action.choices)
            close = difflib.get_close_matches(str(value), commands, n=1)
            meant = f"; did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentError(
                None, f"no command {value!r}{meant} (commands: {', '.join(commands)})"
            )
        super()._check_value(action, value)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            message = f"unrecognized arguments: {' '.join(extra)}"
            options = _options(self, parsed)
            for word in extra:
                close = difflib.get_close_matches(word.partition("=")[0], options, n=1)
                if word.startswith("-") and close:
                    message += f"; did you mean {close[0]!r}?"
                    break
            self.error(message)
        return parsed


def _options(command: argparse.ArgumentParser, parsed: argparse.Namespace) -> list[str]:
    """The options of the (sub)command that ``parsed`` chose, e.g. ``oodsim run``'s."""
    for action in command._actions:
        chosen = getattr(parsed, action.dest, None) if action.dest else None
        if isinstance(action, argparse._SubParsersAction) and chosen in action.choices:
            return _options(action.choices[chosen], parsed)
    return [o for action in command._actions for o in action.option_strings]


def parser() -> argparse.ArgumentParser:
    """The ``oodsim`` command's parser; every help text is plain text (no reST markup)."""
    main = _Parser(prog="oodsim", description=__doc__)
    main.add_argument("--version", action=_Version)
    main.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = main.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="the command (oodsim COMMAND --help tells more)",
    )

    for name, text in (
        ("run", "run (or resume) a spec of any protocol: open set, severity, ImageNet-O"),
        ("severity", "alias of `run` (kept for older scripts)"),
    ):
        run = commands.add_parser(name, help=text, description=text)
        run.add_argument(
            "spec",
            help="spec file (TOML; its `protocol` key picks the protocol), or the name of a "
            "shipped spec: digits, fashion_mnist, ... (oodsim specs lists them)",
        )
        add_run_options(run)
        run.set_defaults(func=cmd_run)

    text = "plots and a summary of saved results"
    report = commands.add_parser("report", help=text, description=text)
    report.add_argument("results", help="results written by `oodsim run`")
    report.add_argument(
        "--out",
        type=path_text,
        help="report folder (default: the results' name with .report: results/x.report)",
    )
    report.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a folder that holds other files or the report of other results "
        "(the files of the report there are replaced; nothing else is replaced or deleted)",
    )
    report.add_argument(
        "--no-figures",
        dest="figures",
        action="store_false",
        help="write summary.md alone, every table and no PNG (seconds instead of minutes)",
    )
    report.add_argument(
        "--latex",
        dest="tables",
        action="append_const",
        const="latex",
        default=[],
        help="also write table.tex: mean [interval] per method and metric (booktabs), bold "
        "only where a method is significantly best",
    )
    report.add_argument(
        "--csv",
        dest="tables",
        action="append_const",
        const="csv",
        help="also write table.csv: the same numbers, one row per method and metric",
    )
    add_trust(report)
    report.set_defaults(func=cmd_report)

    add_cache_command(commands)
    add_results_command(commands)
    add_specs(commands)

    text = "filter ImageNet-21k classes with WordNet (CSV)"
    classes = commands.add_parser("imagenet21k-classes", help=text, description=text)
    classes.add_argument(
        "--out",
        default="imagenet21k_classes.csv",
        help="CSV file of the class table (default: imagenet21k_classes.csv)",
    )
    classes.add_argument("--wordnet-root", help="WordNet 3.0 WNDB folder")
    classes.set_defaults(func=_cmd_imagenet21k)

    add_imagenet_o(commands)
    return main


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that a run stops the same way."""

    signum = signal.SIGTERM


class HungUp(Terminated):
    """SIGHUP (the terminal closed, an ssh session dropped), raised like SIGTERM: the run
    releases its locks, removes its half-written files and cancels its batch jobs; before,
    it died at once and left them."""

    signum = signal.SIGHUP


#: the signals a command turns into an interrupt, with the error each one raises
_RAISED: dict[int, type[Terminated]] = {signal.SIGTERM: Terminated, signal.SIGHUP: HungUp}


def _stop(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGTERM and SIGHUP while a command runs; a second one of the same
    signal ends the process at once."""
    signal.signal(signum, signal.SIG_DFL)
    raise _RAISED[signum]


@contextlib.contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM (``kill``, a batch system's cancel) raises
    :class:`Terminated` and SIGHUP :class:`HungUp`; the handlers before are restored after
    (the main thread only). A SIGHUP that is ignored (``nohup oodsim run ...``) stays
    ignored: the run goes on after its terminal closes, as the user asked."""
    before: dict[int, object] = {}
    try:
        for signum in _RAISED:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                before[signum] = signal.signal(signum, _stop)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error is one ``oodsim: error: ...`` line and exit code 2
    (``--debug`` shows the traceback instead). Ctrl-C exits with 130, SIGTERM with 143, SIGHUP
    with 129."""
    try:
        args = parser().parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C as the command starts: one line, not a traceback
        print("oodsim: interrupted as it started; nothing was done", file=sys.stderr)
        return EXIT_SIGINT
    try:
        with _signals_as_interrupt(), _debug_env(args.debug), one_line_warnings():
            check_environment()  # every $OODSIM_* variable, before the command does anything
            return args.func(args)
    except KeyboardInterrupt as error:
        # what the interrupt left, said by the code it stopped (oodsim.errors.tell_interrupt)
        # a run's clock may end the command meanwhile (oodsim.clusters.signals); without a run
        # loaded there is none
        signals = sys.modules.get("oodsim.clusters.signals")
        saying = signals.saying() if signals is not None else contextlib.nullcontext()
        with contextlib.suppress(OSError), saying:  # after SIGHUP the terminal may be gone
            for note in getattr(error, "__notes__", ()):
                print(note, file=sys.stderr)
        return 128 + error.signum if isinstance(error, Terminated) else EXIT_SIGINT
    except BrokenPipeError:  # `oodsim cache ls | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except Exception as error:
        if args.debug:
            raise
        message = str(error) if isinstance(error, OodsimError) else _describe(error)
        print(f"oodsim: error: {message}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def _debug_env(debug: bool) -> Iterator[None]:
    """With ``--debug``, ``$OODSIM_DEBUG`` is set while the command runs: the local workers it
    starts inherit it and keep their own log of failed tasks (see ``oodsim.engine.work``)."""
    if not debug:
        yield
        return
    before = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = before


def _describe(error: Exception) -> str:
    """An unexpected error as one line: its type and message, and where to see more. A
    ``MemoryError`` (often without any message) says what ran out and what to lower."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, MemoryError):
        text = (
            f"out of memory{f' ({text})' if text else ''}: lower the sizes of the spec "
            "(dataset.max_per_class, n_samples of noise sets, batch_size, the model's width) "
            "or give the run more memory; what finished is cached"
        )
    return f"{type(error).__name__}: {text} (run with --debug for the traceback)"
