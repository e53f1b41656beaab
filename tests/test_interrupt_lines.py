"""An interrupt says once what it left, whenever it comes. The probe: Ctrl-C in the first
second of ``oodsim run`` (imports, the spec, the first seed's checks) and Ctrl-C of a
``--quiet`` run exited 130 without a word. Real SIGINTs to this process, from a registered
dataset whose loading is interrupted (the first seed's checks load it)."""

from __future__ import annotations

import io
import signal
from pathlib import Path

import attrs
import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.data import load_dataset, register_dataset
from oodsim.errors import tell_interrupt, telling_interrupt
from tests.conftest import digits_toml, small_digits

BEFORE = "oodsim: interrupted before any of its simulations started; nothing was computed"


#: Python's own Ctrl-C handler for every test here (conftest's ``python_handlers``)
pytestmark = pytest.mark.usefixtures("python_handlers")


DATASET = "test_ctrl_c_while_loading"


@register_dataset(
    DATASET,
    n_classes=10,
    hflip=False,
    description="digits, whose loading is interrupted by a real SIGINT",
    replace=True,
)
def _interrupted_loading(root=None, download=False, image_size=None):
    signal.raise_signal(signal.SIGINT)  # Ctrl-C while the data loads
    return load_dataset("digits")


def _spec_file(tmp_path: Path) -> Path:
    return digits_toml(tmp_path / "spec.toml", 2, name=f'"{DATASET}"')


def test_the_innermost_note_tells_an_interrupt() -> None:
    with (
        pytest.raises(KeyboardInterrupt) as caught,
        telling_interrupt("outer"),
        telling_interrupt("inner"),
    ):
        signal.raise_signal(signal.SIGINT)
    assert caught.value.__notes__ == ["inner"]
    error = KeyboardInterrupt()
    tell_interrupt(error, "first")
    tell_interrupt(error, "second")
    assert error.__notes__ == ["first"]


@pytest.mark.parametrize("quiet", [True, False], ids=["quiet", "status-line"])
def test_ctrl_c_before_the_first_simulation_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quiet: bool
) -> None:
    """The status line says it; a ``--quiet`` run says it too (the interrupt's note)."""
    cache = tmp_path / "cache"
    options = ["--cache", str(cache), "--out", str(tmp_path / "r.zarr"), "--workers", "1"]
    code = cli_main(["run", str(_spec_file(tmp_path)), *options] + (["--quiet"] if quiet else []))
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 130
    if quiet:
        assert lines == [BEFORE]
    else:  # after the opening line, which says what the run was to do
        opening, told = lines
        assert opening.startswith(f"oodsim: {DATASET} (open_set; 2 simulations: 0 in the cache")
        assert told == BEFORE
    assert not list(cache.glob("*/*/*/meta.json"))
    assert not (tmp_path / "r.zarr").exists()


def test_an_interrupted_run_tells_its_caller_once(tmp_path: Path) -> None:
    """Through the API: on the status line when there is one, else as the interrupt's note
    (which a traceback shows), never both."""
    spec = small_digits(2)
    spec = attrs.evolve(spec, dataset=attrs.evolve(spec.dataset, name=DATASET))
    with pytest.raises(KeyboardInterrupt) as silent:
        oodsim.run(spec, cache=tmp_path / "c", n_workers=1, progress=False)
    assert silent.value.__notes__ == [BEFORE]
    stream = io.StringIO()
    with pytest.raises(KeyboardInterrupt) as shown:
        oodsim.run(spec, cache=tmp_path / "c", n_workers=1, progress=stream)
    assert stream.getvalue().strip().splitlines()[1:] == [BEFORE]  # after the opening line
    assert not getattr(shown.value, "__notes__", None)
    assert not list((tmp_path / "c").glob("*/*/*/meta.json"))


class _InterruptedArgs(list):
    """A command line whose reading is interrupted by a real SIGINT: Ctrl-C as the command
    starts, before anything of the command runs."""

    def __iter__(self):
        signal.raise_signal(signal.SIGINT)
        return super().__iter__()


def test_ctrl_c_while_the_command_line_is_read_is_one_line(capsys) -> None:
    # a traceback before: the parser was built (the version read) outside the handler
    assert cli_main(_InterruptedArgs(["cache", "ls"])) == 130
    captured = capsys.readouterr()
    assert captured.err == "oodsim: interrupted as it started; nothing was done\n"
    assert captured.out == ""
