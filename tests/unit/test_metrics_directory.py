"""Where the workers of one `serve` keep their metric files: one fresh directory per `serve` run, found by
every worker of that run, and the directories of runs that ended removed."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from events_api.metrics import MULTIPROC_VARIABLE, prepare_worker_directory


def _in_a_worker(base: str) -> tuple[str | None, str | None]:
    os.environ.pop(MULTIPROC_VARIABLE, None)
    chosen = prepare_worker_directory(Path(base))
    return chosen, os.environ.get(MULTIPROC_VARIABLE)


def test_workers_of_one_run_share_a_fresh_directory_and_old_ones_go(tmp_path: Path) -> None:
    ended = tmp_path / "999999999-12345"  # a `serve` that is gone
    ended.mkdir()
    (ended / "counter_1.db").write_bytes(b"old")
    spawn = multiprocessing.get_context("spawn")  # as uvicorn starts its workers
    with spawn.Pool(2) as pool:
        chosen = pool.map(_in_a_worker, [str(tmp_path)] * 2)
    first, second = chosen
    assert first == second  # both workers found the same directory ...
    assert first[0] is not None
    assert first[0] == first[1]  # ... and prometheus_client will find it too
    name = Path(first[0]).name
    assert name.startswith(f"{os.getpid()}-")  # ... named after their supervisor (here: the test)
    assert not ended.exists()


def test_a_process_serving_alone_keeps_its_metrics_in_memory(tmp_path: Path) -> None:
    os.environ.pop(MULTIPROC_VARIABLE, None)
    assert prepare_worker_directory(tmp_path) is None
    assert MULTIPROC_VARIABLE not in os.environ
    assert list(tmp_path.iterdir()) == []
