"""The end of a child forked from one of the tests' servers (:mod:`tests.script_server`,
:mod:`tests.command_server`), as a fresh interpreter ends, less the teardown of what the server
imported.

A forked child shares the server's heap page by page until it writes to a page. An interpreter's
normal finalization frees every module and object one by one, writing to each page it touches:
in a child of a server that imported torch, distributed and oodsim, 1.2 s of CPU after the
script's last line; 0.5 s in one that imported oodsim's command line. :func:`run_as_main` ends
the child as the interpreter ends everything the child itself made (non-daemon threads joined,
atexit handlers run, its own objects collected so their finalizers run and files they hold are
closed, the standard streams flushed, the same exit status) and leaves the server's imports to
the kernel. :func:`preload` imports a server's modules and keeps the cyclic garbage collector off
them (it would write to them too): call it in the server before the first fork.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import NoReturn


def preload(names: Iterable[str]) -> None:
    """Import the modules ``names``, then leave everything this process holds out of every
    later garbage collection (the forked children's included)."""
    for name in names:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()


def run_as_main(main: Callable[..., object], *args: object) -> NoReturn:
    """Run ``main(*args)`` as the interpreter runs a script, then exit as it would: 0, a
    ``SystemExit``'s code (its text to stderr and 1 when it is not a number), 1 after an
    uncaught exception's traceback, killed by SIGINT after an uncaught ``KeyboardInterrupt``."""
    interrupted = False
    try:
        main(*args)
        code = 0
    except SystemExit as stop:
        code = _exit_status(stop.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        code, interrupted = 1, True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # joins the non-daemon threads, as the interpreter does first
    atexit._run_exitfuncs()
    gc.collect()  # the child's own objects: finalizers run, files left open are closed
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # what the interpreter returns when it cannot flush stdout
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` ends an interpreter with."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
