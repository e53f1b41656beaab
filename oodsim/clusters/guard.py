"""A script that starts oodsim's local cluster must guard its entry point.

Dask's local workers are spawned processes: each one re-imports the script that started it (as
``__mp_main__``). A script that calls ``oodsim.run`` at its top level, outside
``if __name__ == "__main__":``, would make every worker run the experiment again and die with
pages of multiprocessing tracebacks. :func:`check_main_guard` finds that case in the driver,
before any process starts, and says how to fix it in one message.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import FrameType

from oodsim.errors import OodsimError


class UnguardedScript(OodsimError):
    """A script calls oodsim at its top level without an ``if __name__ == "__main__":`` guard."""


class UnreadableScript(OodsimError):
    """The main script is not a file (``python - <<EOF``): workers could not re-import it."""


def _is_main_test(node: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either order), alone or in an ``and``."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return any(_is_main_test(value) for value in node.values)
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return False
    if not isinstance(node.ops[0], ast.Eq):
        return False
    sides = [node.left, node.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


def guarded_lines(source: str) -> list[tuple[int, int]]:
    """Line ranges of the bodies of every ``if __name__ == "__main__":`` block in ``source``."""
    ranges = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            ranges.append((node.body[0].lineno, node.body[-1].end_lineno or node.lineno))
    return ranges


def _module_frame(globals_: dict) -> FrameType | None:
    """The frame running the top-level code of the module whose globals are ``globals_``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is globals_ and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def unguarded_call() -> tuple[str, int] | None:
    """``(script, line)`` when the current call comes from the top level of the ``__main__``
    script outside a ``__main__`` guard; None otherwise (guarded, a notebook, ``python -c``,
    a source that cannot be read)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not str(path).endswith(".py"):
        return None
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name == "__main__" or spec.name.endswith(".__main__")):
        return None  # `python -m package`: spawned workers do not re-run a package's __main__
    frame = _module_frame(vars(main))
    if frame is None:
        return None
    try:
        ranges = guarded_lines(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    line = frame.f_lineno
    if any(start <= line <= end for start, end in ranges):
        return None
    return str(path), line


def unreadable_main() -> str | None:
    """The ``__file__`` of a ``__main__`` module that a spawned or forked worker would try, and
    fail, to run again: a script read from standard input (``<stdin>``) has a ``__file__`` that
    names no file. None otherwise (a file, ``python -c``, ``python -m``, a notebook)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or getattr(main, "__spec__", None) is not None:
        return None
    return None if Path(path).is_file() else str(path)


def check_main_guard() -> None:
    """Raise :class:`UnguardedScript` before a local cluster starts from an unguarded script,
    and :class:`UnreadableScript` from a script that is not a file."""
    unreadable = unreadable_main()
    if unreadable is not None:
        raise UnreadableScript(
            f"this script ({unreadable}) starts oodsim's local cluster, whose worker processes "
            "re-import the main script, and it is not a file they can read. Save it to a file "
            '(with its oodsim calls under `if __name__ == "__main__":`) and run that, or run in '
            'this process: n_workers=1 or cluster="in-process".'
        )
    found = unguarded_call()
    if found is None:
        return
    path, line = found
    raise UnguardedScript(
        f"{path}, line {line}, starts oodsim's local cluster from the top level of the script. "
        "Its worker processes re-import the script and would run that line again; put the "
        'code under `if __name__ == "__main__":` (as the README examples do), or pass '
        "address= to use a Dask cluster started elsewhere."
    )
