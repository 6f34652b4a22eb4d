"""Release registry on a real backend: promote switches answers, rollback restores, a rejected
or broken release never goes live."""

from __future__ import annotations

import pytest
from vllm_fixtures import make_random_lora

from chat.backends import SamplingParams
from chat.backends.transformers_backend import TransformersBackend
from deploy.release.registry import ReleaseError, ensure_base_release, promote, register_candidate, rollback
from deploy.serving.factory import use_live_release

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)
QUESTION = [{"role": "user", "content": "How do I sleep better?"}]


def _answer(backend) -> str:
    return backend.stream(QUESTION, attributes=None, steering="steerlm", params=GREEDY).read()


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    b = TransformersBackend(str(tiny_model_dir), device="cpu")
    yield b
    b.close()


def test_promote_then_rollback(store, backend, tiny_model_dir, tmp_path):
    base = ensure_base_release(store, backend.model)
    assert store.releases.live().id == base.id and base.adapter_path is None
    base_answer = _answer(backend)

    adapter = make_random_lora(tiny_model_dir, tmp_path / "run" / "adapter")
    cand = register_candidate(store, run_id="run1", adapter_path=adapter, base_model=backend.model,
                              data_dir=tmp_path / "data")
    assert cand.status == "candidate" and (tmp_path / "data" / "adapters" / cand.id / "adapter_config.json").is_file()

    promote(store, backend, cand.id)
    assert store.releases.live().id == cand.id
    assert store.releases.get(base.id).status == "retired"
    assert backend.active_adapter == cand.id
    assert _answer(backend) != base_answer

    restored = rollback(store, backend)
    assert restored.id == base.id and store.releases.live().id == base.id
    assert store.releases.get(cand.id).decision["rolled_back_to"] == base.id
    assert _answer(backend) == base_answer


def test_rejected_release_needs_force_and_broken_adapter_changes_nothing(store, backend, tiny_model_dir, tmp_path):
    base = ensure_base_release(store, backend.model)
    adapter = make_random_lora(tiny_model_dir, tmp_path / "adapter", seed=3)
    cand = register_candidate(store, run_id="r", adapter_path=adapter, base_model=backend.model,
                              data_dir=tmp_path / "data")
    store.releases.set_status(cand.id, "rejected", decision={"summary": "REJECT: harmlessness 0.5 misses the floor"})
    with pytest.raises(ReleaseError, match="rejected by the gate"):
        promote(store, backend, cand.id)
    assert store.releases.live().id == base.id

    broken = store.releases.create(base_model=backend.model, adapter_path=str(tmp_path / "missing"))
    with pytest.raises(Exception):
        promote(store, backend, broken.id)
    assert store.releases.live().id == base.id
    assert store.releases.get(broken.id).status == "candidate"


def test_rollback_without_history_is_a_clear_error(store, backend):
    ensure_base_release(store, backend.model)
    with pytest.raises(ReleaseError, match="no earlier live release"):
        rollback(store, backend)


def test_adapters_older_than_the_rollback_target_are_unloaded(store, backend, tiny_model_dir, tmp_path):
    ensure_base_release(store, backend.model)
    releases = []
    for seed in (1, 2, 3):
        adapter = make_random_lora(tiny_model_dir, tmp_path / f"run{seed}" / "adapter", seed=seed)
        releases.append(register_candidate(store, run_id=f"run{seed}", adapter_path=adapter,
                                           base_model=backend.model, data_dir=tmp_path / "data"))
    a, b, c = (r.id for r in releases)
    promote(store, backend, a)
    promote(store, backend, b)
    assert {a, b} <= set(backend.adapters)  # live and the rollback target stay loaded
    promote(store, backend, c)
    assert a not in backend.adapters and {b, c} <= set(backend.adapters)
    assert rollback(store, backend).id == b and backend.active_adapter == b
    assert _answer(backend)  # the kept adapter still answers


class _ServedUnderAnotherName:
    """A model server that serves the weights at `base_model_path` under the name "advisor"."""

    kind, model, base_model_path, active_adapter = "openai", "advisor", "/models/builtin", None
    adapters: dict = {}

    def set_adapter(self, name, path=None):
        self.active_adapter = name


def test_release_trained_on_the_served_weights_path_can_be_promoted(store, tmp_path, tiny_model_dir):
    server = _ServedUnderAnotherName()
    adapter = make_random_lora(tiny_model_dir, tmp_path / "run" / "adapter")
    ok = register_candidate(store, run_id="r1", adapter_path=adapter, base_model="/models/builtin", data_dir=tmp_path)
    other = register_candidate(store, run_id="r2", adapter_path=adapter, base_model="/models/other", data_dir=tmp_path)
    assert promote(store, server, ok.id).status == "live" and server.active_adapter == ok.id
    with pytest.raises(ReleaseError, match="trained on '/models/other'"):
        promote(store, server, other.id)
    restarted = _ServedUnderAnotherName()  # a service started later, or a replica re-reading the live release
    assert use_live_release(store, restarted) == (ok.id, None) and restarted.active_adapter == ok.id
