"""Promote and roll back through the running service: admin only, refusals with reasons, new
answers name the release that produced them, and `advisor release promote/rollback --url`."""

from __future__ import annotations

import pytest
from service_helpers import ADMIN_TOKEN, start_service, tiny_settings
from typer.testing import CliRunner
from vllm_fixtures import make_random_lora

from deploy.release.registry import register_candidate
from deploy.wiring import build_cli


@pytest.fixture(scope="module")
def svc(tiny_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(tmp_path_factory.mktemp("release-api"), tiny_model_dir))
    yield service
    service.stop()


def _candidate(svc, tiny_model_dir, tmp_path, seed: int):
    adapter = make_random_lora(tiny_model_dir, tmp_path / f"lora-{seed}", seed=seed)
    return register_candidate(svc.store, run_id=f"run-{seed}", adapter_path=adapter,
                              base_model=svc.services.backend.model, data_dir=svc.services.settings.data_path)


def _ask(client) -> dict:
    r = client.post("/api/messages", json={"content": "How do I keep a budget?", "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["answer"]["generation"]


def test_release_endpoints_need_admin(svc, tiny_model_dir, tmp_path):
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=11)
    with svc.client() as anon:
        for path in (f"/api/admin/releases/{cand.id}/promote", "/api/admin/releases/rollback"):
            r = anon.post(path)
            assert r.status_code == 401 and "admin token" in r.json()["error"]["message"]
    with svc.client(headers={"Authorization": "Bearer not-the-token"}) as wrong:
        assert wrong.post(f"/api/admin/releases/{cand.id}/promote").status_code == 401
    assert svc.store.releases.get(cand.id).status == "candidate"


def test_promote_and_rollback_change_what_new_answers_name(svc, tiny_model_dir, tmp_path):
    base_id = svc.services.release_id
    with svc.client() as user, svc.admin() as admin:
        before = _ask(user)
        assert before["release_id"] == base_id

        cand = _candidate(svc, tiny_model_dir, tmp_path, seed=12)
        r = admin.post(f"/api/admin/releases/{cand.id}/promote")
        assert r.status_code == 200, r.text
        assert r.json()["id"] == cand.id and r.json()["serving"] == cand.id
        after = _ask(user)
        assert after["release_id"] == cand.id and after["adapter"] == cand.id
        assert admin.get("/api/admin/releases").json()["serving"] == cand.id

        r = admin.post("/api/admin/releases/rollback")
        assert r.status_code == 200, r.text
        assert r.json()["id"] == before["release_id"]
        again = _ask(user)
        assert again["release_id"] == before["release_id"] and again["adapter"] == before["adapter"]
        assert svc.store.releases.get(cand.id).decision["rolled_back_to"] == before["release_id"]


def test_rejected_release_is_refused_with_the_gate_reason_unless_forced(svc, tiny_model_dir, tmp_path):
    live_before = svc.services.release_id
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=13)
    svc.store.releases.set_status(cand.id, "rejected",
                                          decision={"summary": "REJECT: harmlessness 0.500 misses the floor"})
    with svc.admin() as admin:
        r = admin.post(f"/api/admin/releases/{cand.id}/promote")
        assert r.status_code == 409
        assert "harmlessness 0.500 misses the floor" in r.json()["error"]["message"]
        assert svc.services.release_id == live_before

        missing = admin.post("/api/admin/releases/no-such-release/promote")
        assert missing.status_code == 404 and "no-such-release" in missing.json()["error"]["message"]

        forced = admin.post(f"/api/admin/releases/{cand.id}/promote", json={"force": True})
        assert forced.status_code == 200, forced.text
        assert svc.services.release_id == cand.id
        assert admin.post("/api/admin/releases/rollback").json()["id"] == live_before


def test_cli_promote_and_rollback_with_url(svc, tiny_model_dir, tmp_path):
    live_before = svc.services.release_id
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=14)
    app = build_cli()
    out = CliRunner().invoke(app, ["release", "promote", cand.id, "--url", svc.url, "--token", ADMIN_TOKEN])
    assert out.exit_code == 0, out.output
    assert f"live: {cand.id}" in out.output and svc.services.release_id == cand.id

    out = CliRunner().invoke(app, ["release", "rollback", "--url", svc.url, "--token", ADMIN_TOKEN])
    assert out.exit_code == 0, out.output
    assert f"live: {live_before}" in out.output and svc.services.release_id == live_before

    refused = CliRunner().invoke(app, ["release", "promote", "nope", "--url", svc.url, "--token", "wrong"])
    assert refused.exit_code == 1 and "401" in refused.output


def test_releases_panel_shows_the_gate_and_checks_admin_on_every_click(svc, tiny_model_dir, tmp_path):
    import gradio as gr

    from deploy.operator.releases import ReleasesPanel
    from deploy.operator.screen import PanelContext
    from deploy.service.auth import Identity
    from deploy.wiring import operator_panels

    panel, = [b for b in operator_panels(svc.services) if isinstance(b, ReleasesPanel)]
    admin, nobody = Identity("admin", "admin", True, "cookie"), Identity("u1", None, False, "cookie")
    # The "request" is the identity itself here: identify() is what the tab resolves from cookies.
    ctx = PanelContext(store=lambda: svc.store, identify=lambda request: request, denied="operators only",
                       refresh_triggers=[])
    with gr.Blocks():
        panel(ctx)  # builds without a browser

    live_before = svc.services.release_id
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=15)
    svc.store.releases.set_status(cand.id, "rejected", decision={
        "summary": "REJECT: helpfulness 0.200 vs live 0.500 regresses by 0.300", "promote": False,
        "gated_at": "2099-01-01T00:00:00+00:00", "live_release": live_before,
        "axes": [{"axis": "helpfulness", "passed": False, "reason": "helpfulness: 0.200 vs live 0.500 regresses by 0.300"}]})

    status, chooser = panel.load(ctx, admin)
    assert f"**Live:** `{live_before}`" in status
    assert f"`{cand.id}` rejected against `{live_before}`" in status and "❌ helpfulness: 0.200" in status
    assert any(value == cand.id and label.startswith(f"{cand.id} · rejected · REJECT: helpfulness")
               for label, value in chooser["choices"])
    assert panel.load(ctx, nobody)[0] == ""

    note, *_ = panel.promote(ctx, cand.id, False, nobody)
    assert note == "operators only" and svc.services.release_id == live_before
    note, *_ = panel.promote(ctx, cand.id, False, admin)
    assert note.startswith("❌ Not done") and "rejected by the gate" in note and svc.services.release_id == live_before
    note, status, _ = panel.promote(ctx, cand.id, True, admin)
    assert note.startswith("✅") and svc.services.release_id == cand.id and f"**Live:** `{cand.id}`" in status
    assert panel.rollback(ctx, nobody)[0] == "operators only" and svc.services.release_id == cand.id
    note, *_ = panel.rollback(ctx, admin)
    assert note == f"✅ Rolled back: `{live_before}` is live again." and svc.services.release_id == live_before


def test_eval_hh_defaults_to_the_live_release(tiny_model_dir, tmp_path):
    import json

    from data_helpers import hh_dir

    from deploy.release.registry import ensure_base_release, promote
    from store import Store

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with Store(data_dir / "advisor.duckdb") as store:
        ensure_base_release(store, str(tiny_model_dir))
        cand = register_candidate(store, run_id="run-hh", base_model=str(tiny_model_dir), data_dir=data_dir,
                                  adapter_path=make_random_lora(tiny_model_dir, tmp_path / "lora", seed=16))
        promote(store, None, cand.id)
    args = ["--data-dir", str(data_dir), "eval", "hh", "--data", str(hh_dir(tmp_path)), "--workers", "1", "--json"]
    out = CliRunner().invoke(build_cli(), args)
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["model"] == str(tiny_model_dir) and result["adapter"] == cand.adapter_path
    assert result["scorer"] == "implicit" and result["mean"] is not None
