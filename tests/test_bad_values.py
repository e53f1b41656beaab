"""Issue 45, item 5: one clear line, before compute, for every bad value (a cluster memory
too small for a worker, a weights file that is no checkpoint, a server that is not a Dask
scheduler whatever it sends, an ``OODSIM_*`` variable outside its range), and no folder made
for a run that fails its checks."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import oodsim
from oodsim import zoo
from oodsim.cli import main as cli_main
from oodsim.environment import VARIABLES, check_environment
from oodsim.errors import ClusterError, SpecError
from oodsim.specs.cluster import ClusterSpec, cluster_choice
from tests.conftest import digits_toml, small_digits


@pytest.mark.parametrize(
    ("table", "share"),
    [
        ({"kind": "local-jobs", "memory": "1MB"}, "1 a job here, so at least 512 MiB a job"),
        ({"kind": "slurm", "memory": "200MB"}, "1 a job here"),
        ({"kind": "pbs", "memory": "1GB", "cores": 4}, "4 a job here, so at least 2048 MiB"),
    ],
)
def test_a_job_memory_too_small_for_a_worker_is_refused(table: dict, share: str) -> None:
    """The probe: local jobs of `memory = "1MB"` failed after 139 s with a stray
    `distributed.scheduler - ERROR` line and nothing about memory."""
    with pytest.raises(SpecError) as caught:
        cluster_choice(table, None)
    message = str(caught.value)
    assert message.startswith(
        f"cluster.memory: {table['memory']!r} is not allowed; expected at least 512 MiB a "
        "worker process ("
    ), message
    assert share in message and "torch and distributed" in message
    assert ClusterSpec(kind="local-jobs", memory="512MiB").memory == "512MiB"  # the floor
    assert ClusterSpec(kind="local", memory="1MB").memory == "1MB"  # a local cluster: unused


def test_a_too_small_job_memory_fails_the_run_in_one_line_before_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = digits_toml(tmp_path / "digits.toml", 1)
    spec.write_text(spec.read_text() + '\n[cluster]\nkind = "local-jobs"\nmemory = "1MB"\n')
    cache = tmp_path / "c"
    started = time.monotonic()
    code = cli_main(["run", str(spec), "--cache", str(cache), "--out", str(tmp_path / "r.zarr")])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < 30, err
    assert err.splitlines() == [err.strip()] and "cluster.memory: '1MB' is not allowed" in err
    assert not cache.exists()


@pytest.mark.parametrize("content", ["text", "a pickled list", "empty"])
@pytest.mark.parametrize("name", ["timm:test_resnet", "torchvision:resnet18"])
def test_a_weights_file_that_is_no_checkpoint_is_refused_when_the_spec_is_built(
    tmp_path: Path, name: str, content: str
) -> None:
    """The probe: a timm model with `/etc/passwd` as its checkpoint failed after 20 s as a bare
    `IndexError: list index out of range`; now the spec itself is refused, before compute."""
    # torch loads only for this test's checkpoint files
    import torch

    path = tmp_path / "weights.pth"
    if content == "text":
        path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    elif content == "empty":
        path.write_bytes(b"")
    else:
        torch.save([1, 2, 3], path)
    with pytest.raises(SpecError) as caught:
        zoo.ModelRef(name=name, weights=str(path))
    assert str(caught.value).startswith(
        f"weights: {str(path)!r} is not allowed; expected a checkpoint of {name} (a .pth, .pt "
        "or .safetensors state dict)"
    ), caught.value
    good = tmp_path / "good.pth"
    torch.save({"state_dict": {"layer.weight": torch.zeros(2)}}, good)
    assert zoo.ModelRef(name=name, weights=str(good)).weights == str(good)


def _drip_nul_bytes(server: socket.socket) -> None:
    """Answer every connection with NUL bytes, one every 10 ms, whatever it is sent."""
    while True:
        try:
            connection, _ = server.accept()
        except OSError:  # the test closed the server
            return

        def drip(connection: socket.socket = connection) -> None:
            with connection, contextlib.suppress(OSError):
                for _ in range(3000):
                    connection.sendall(b"\0")
                    time.sleep(0.01)

        threading.Thread(target=drip, daemon=True).start()


@contextlib.contextmanager
def _nul_server() -> Iterator[str]:
    """A server on 127.0.0.1 that drips NUL bytes; yields its tcp:// address."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        threading.Thread(target=_drip_nul_bytes, args=(server,), daemon=True).start()
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"


def test_a_server_that_drips_nul_bytes_is_not_a_dask_scheduler(tmp_path: Path) -> None:
    """The probe: `error: unpack_from requires a buffer of at least 8 bytes ...`; and the
    cache folder was made before the run failed."""
    with _nul_server() as address, pytest.raises(ClusterError) as caught:
        oodsim.run(small_digits(1), address=address, cache=tmp_path / "c", progress=False)
    assert str(caught.value).startswith(
        f"what answers at '{address}' is not a Dask scheduler: its reply is not Dask's protocol"
    ), caught.value
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("option", ["--cluster", "--address"])
def test_a_bad_scheduler_address_makes_no_cache_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    spec = digits_toml(tmp_path / "digits.toml", 2)
    cache = tmp_path / "c"
    with _nul_server() as address:
        code = cli_main(["run", str(spec), option, address, "--cache", str(cache), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"oodsim: error: what answers at '{address}' is not a"), err
    assert len(err.strip().splitlines()) == 1, err
    assert not cache.exists()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    code = cli_main(["run", str(spec), option, f"tcp://127.0.0.1:{port}", "--cache", str(cache)])
    assert code == 2 and "no Dask scheduler answered" in capsys.readouterr().err
    assert not cache.exists()


#: a value outside its range for each variable of oodsim.environment
BAD_VALUES = {
    "OODSIM_CACHE": "/etc/passwd/cache",
    "OODSIM_RESULTS": "/etc/passwd",
    "OODSIM_DATA": "/no/such/folder",
    "OODSIM_WORDNET": "/no/such/wordnet",
    "OODSIM_LIMITS": "grid_points=lots",
    "OODSIM_SCHEDULER_TIMEOUT": "1e-9",
    "OODSIM_DEBUG": "maybe",
    "OODSIM_RECORD_LANDINGS": "/no/such/folder/landings.json",
}


def test_every_variable_has_a_bad_value_here() -> None:
    assert set(BAD_VALUES) == set(VARIABLES)


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_environment_variable_stops_a_command_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    """The probe: `OODSIM_SCHEDULER_TIMEOUT=1e-9` was accepted, and a healthy run then failed
    after computing. Every variable is checked as any command starts."""
    built = small_digits(1)  # built first: OODSIM_LIMITS is read as a spec is built too
    value = BAD_VALUES[name]
    monkeypatch.setenv(name, value)
    allowed = VARIABLES[name].allowed
    line = f"oodsim: error: {name}: {value!r} is not allowed; expected {allowed}"
    assert cli_main(["specs"]) == 2
    assert capsys.readouterr().err == line + "\n"
    spec = digits_toml(tmp_path / "digits.toml", 1)
    cache = tmp_path / "c"
    code = cli_main(["run", str(spec), "--cache", str(cache), "--out", str(tmp_path / "r.zarr")])
    assert code == 2 and capsys.readouterr().err == line + "\n"
    assert not cache.exists()
    with pytest.raises(SpecError, match=f"^{name}: "):
        oodsim.run(built, cache=cache, progress=False)


def test_the_scheduler_timeout_floor_and_good_values_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("4.9", "nan", "inf", "604801"):
        with pytest.raises(SpecError, match="a number of seconds from 5 to 604800"):
            check_environment({"OODSIM_SCHEDULER_TIMEOUT": value})
    good = {
        "OODSIM_SCHEDULER_TIMEOUT": " 5 ",
        "OODSIM_DEBUG": "0",
        "OODSIM_LIMITS": "grid_points=20000, n_levels=5",
        "OODSIM_CACHE": "/tmp/not/yet/made",
        "OODSIM_DATA": "",  # empty: unset
    }
    check_environment(good)
