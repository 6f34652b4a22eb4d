"""Release registry on a real backend: promote switches answers, rollback restores, a rejected
or broken release never goes live."""

from __future__ import annotations

import pytest

from chat.backends import SamplingParams, TransformersBackend
from deploy.registry import ReleaseError, ensure_base_release, promote, register_candidate, rollback
from vllm_fixtures import make_random_lora

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
    assert store.live_release().id == base.id and base.adapter_path is None
    base_answer = _answer(backend)

    adapter = make_random_lora(tiny_model_dir, tmp_path / "run" / "adapter")
    cand = register_candidate(store, run_id="run1", adapter_path=adapter, base_model=backend.model,
                              data_dir=tmp_path / "data")
    assert cand.status == "candidate" and (tmp_path / "data" / "adapters" / cand.id / "adapter_config.json").is_file()

    promote(store, backend, cand.id)
    assert store.live_release().id == cand.id
    assert store.get_release(base.id).status == "retired"
    assert backend.active_adapter == cand.id
    assert _answer(backend) != base_answer

    restored = rollback(store, backend)
    assert restored.id == base.id and store.live_release().id == base.id
    assert store.get_release(cand.id).decision["rolled_back_to"] == base.id
    assert _answer(backend) == base_answer


def test_rejected_release_needs_force_and_broken_adapter_changes_nothing(store, backend, tiny_model_dir, tmp_path):
    base = ensure_base_release(store, backend.model)
    adapter = make_random_lora(tiny_model_dir, tmp_path / "adapter", seed=3)
    cand = register_candidate(store, run_id="r", adapter_path=adapter, base_model=backend.model,
                              data_dir=tmp_path / "data")
    store.set_release_status(cand.id, "rejected", decision={"summary": "REJECT: harmlessness 0.5 misses the floor"})
    with pytest.raises(ReleaseError, match="rejected by the gate"):
        promote(store, backend, cand.id)
    assert store.live_release().id == base.id

    broken = store.create_release(base_model=backend.model, adapter_path=str(tmp_path / "missing"))
    with pytest.raises(Exception):
        promote(store, backend, broken.id)
    assert store.live_release().id == base.id
    assert store.get_release(broken.id).status == "candidate"


def test_rollback_without_history_is_a_clear_error(store, backend):
    ensure_base_release(store, backend.model)
    with pytest.raises(ReleaseError, match="no earlier live release"):
        rollback(store, backend)
