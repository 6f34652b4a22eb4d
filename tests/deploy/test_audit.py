"""The operator audit log: every operator action (promote, rollback, job run, forget, export…) is
recorded with actor, target and outcome — through the admin API, the command line (with `--url`
and on the database directly) and the operator screen — and can be read back and exported."""

from __future__ import annotations

import json

import pytest
from service_helpers import ADMIN_PASSWORD, ADMIN_TOKEN, start_service, tiny_settings
from typer.testing import CliRunner
from vllm_fixtures import make_random_lora

from deploy.audit import cli_actor
from deploy.release.registry import register_candidate
from deploy.wiring import build_cli


@pytest.fixture(scope="module")
def svc(tiny_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(tmp_path_factory.mktemp("audit"), tiny_model_dir))
    yield service
    service.stop()


def _candidate(svc, tiny_model_dir, tmp_path, seed: int):
    adapter = make_random_lora(tiny_model_dir, tmp_path / f"lora-{seed}", seed=seed)
    return register_candidate(svc.store, run_id=f"run-{seed}", adapter_path=adapter,
                              base_model=svc.services.backend.model, data_dir=svc.services.settings.data_path)


def _latest(store, action: str):
    return store.audit.list(limit=1, action=action)[0]


def test_admin_api_actions_are_audited_with_actor_target_and_outcome(svc, tiny_model_dir, tmp_path):
    live_before = svc.services.release_id
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=21)
    svc.store.releases.set_status(cand.id, "rejected", decision={"summary": "REJECT: worse"})
    with svc.admin() as admin:
        assert admin.post(f"/api/admin/releases/{cand.id}/promote").status_code == 409
        refused = _latest(svc.store, "promote")
        assert (refused.actor, refused.target, refused.details["outcome"]) == ("admin-token", cand.id, "refused")
        assert "REJECT: worse" in refused.details["error"] and refused.details["force"] is False
        assert admin.post(f"/api/admin/releases/{cand.id}/promote", json={"force": True}).status_code == 200
        forced = _latest(svc.store, "promote")
        assert forced.details == {"surface": "api", "force": True, "outcome": "ok"}
        assert admin.post("/api/admin/releases/rollback").status_code == 200
        back = _latest(svc.store, "rollback")
        assert back.target == live_before and back.details["rolled_back_from"] == cand.id

    registry = svc.app.state.jobs
    if "test-echo" not in {s.kind for s in registry.specs()}:
        registry.add("test-echo", lambda ctx: {"ok": True}, button="Echo")
    with svc.client() as op:  # an admin signed in with the password: the actor is the admin user
        op.post("/api/login", json={"name": "admin", "password": ADMIN_PASSWORD})
        job_id = op.post("/api/admin/jobs/test-echo/run", json={"params": {"n": 1}}).json()["job_id"]
        assert op.post("/api/admin/jobs/no-such-kind/run").status_code == 404
    ran = svc.store.audit.list(limit=2, action="job")
    assert (ran[1].actor, ran[1].target, ran[1].details["job_id"], ran[1].details["params"]) == (
        "admin", "test-echo", job_id, {"n": 1})
    assert (ran[0].target, ran[0].details["outcome"]) == ("no-such-kind", "refused")


def test_forget_through_the_api_is_audited_and_ends_the_users_sessions(svc):
    with svc.client() as user:
        user.post("/api/signup", json={"name": "gil", "password": "a long password"})
        uid = user.get("/api/me").json()["user_id"]
        assert user.post("/api/messages", json={"content": "Please forget this later"}).status_code == 200
        with svc.admin() as admin:
            assert admin.post("/api/admin/users/gil/forget").status_code == 400  # needs confirm
            r = admin.post("/api/admin/users/gil/forget", params={"confirm": "true"})
            assert r.status_code == 200 and r.json()["deleted"]["messages"] == 2
        assert user.get("/api/me").json()["user_id"] != uid  # their session ended with them
    entry = _latest(svc.store, "forget")
    assert (entry.actor, entry.target, entry.details["deleted"]["sessions"]) == ("admin-token", uid, 1)
    assert svc.store.users.is_forgotten(uid)


def test_the_log_is_admin_only_and_exports_as_json_and_jsonl(svc):
    svc.store.audit.record("cli:someone", "export", "jsonl", {"surface": "cli", "rows": 3, "outcome": "ok"})
    with svc.client() as anon:
        assert anon.get("/api/admin/audit").status_code == 401
    with svc.admin() as admin:
        doc = admin.get("/api/admin/audit").json()["entries"]
        assert doc[0]["action"] == "export" and doc[0]["time"] and doc[0]["details"]["rows"] == 3
        r = admin.get("/api/admin/audit", params={"format": "jsonl", "action": "export", "limit": 5})
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert lines and {e["action"] for e in lines} == {"export"} and lines[0]["actor"] == "cli:someone"


def test_cli_through_the_service_and_on_the_database(svc, tiny_model_dir, tmp_path):
    app, runner = build_cli(), CliRunner()
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=22)
    out = runner.invoke(app, ["release", "promote", cand.id, "--url", svc.url, "--token", ADMIN_TOKEN])
    assert out.exit_code == 0, out.output
    assert (_latest(svc.store, "promote").actor, _latest(svc.store, "promote").target) == ("admin-token", cand.id)
    out = runner.invoke(app, ["audit", "--json", "--action", "promote", "--url", svc.url, "--token", ADMIN_TOKEN])
    assert out.exit_code == 0 and json.loads(out.stdout.splitlines()[0])["target"] == cand.id
    runner.invoke(app, ["release", "rollback", "--url", svc.url, "--token", ADMIN_TOKEN])

    # No service: the commands open the database themselves and the OS user is the actor.
    from store import Store

    data = tmp_path / "direct"
    with Store(data / "advisor.duckdb") as store:
        conv, _ = store.conversations.start("hana", "How do I say no to overtime?")
        base = store.releases.create(base_model="m", adapter_path=None, status="live", release_id="base-m")
        store.releases.create(base_model="m", adapter_path=None, status="candidate", release_id="r-2")
    cli = ["--data-dir", str(data)]
    assert runner.invoke(app, [*cli, "export", "--out", str(tmp_path / "all.jsonl")]).exit_code == 0
    assert runner.invoke(app, [*cli, "release", "promote", "r-2"]).exit_code == 0
    assert runner.invoke(app, [*cli, "release", "rollback"]).exit_code == 0
    assert runner.invoke(app, [*cli, "forget", "hana", "--yes"]).exit_code == 0
    out = runner.invoke(app, [*cli, "audit", "--json"])
    entries = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(e["action"], e["target"]) for e in entries] == [
        ("forget", "hana"), ("rollback", base.id), ("promote", "r-2"), ("export", "jsonl")]
    assert {e["actor"] for e in entries} == {cli_actor()} and {e["details"]["surface"] for e in entries} == {"cli"}
    assert entries[0]["details"]["deleted"]["messages"] == 1 and entries[3]["details"]["rows"] == 1
    table = runner.invoke(app, [*cli, "audit"])
    assert table.exit_code == 0 and "forget" in table.stdout


def test_operator_screen_actions_are_audited_and_the_panel_shows_them(svc, tiny_model_dir, tmp_path):
    import gradio as gr

    from deploy.operator.audit import build_audit_panel
    from deploy.operator.releases import ReleasesPanel
    from deploy.operator.screen import PanelContext
    from deploy.service.auth import Identity
    from deploy.wiring import operator_panels

    panels = operator_panels(svc.services)
    releases, = [b for b in panels if isinstance(b, ReleasesPanel)]
    admin, nobody = Identity("admin", "admin", True, "cookie"), Identity("u1", None, False, "cookie")
    ctx = PanelContext(store=lambda: svc.store, identify=lambda request: request, denied="operators only",
                       refresh_triggers=[])
    live_before = svc.services.release_id
    cand = _candidate(svc, tiny_model_dir, tmp_path, seed=23)
    before = len(svc.store.audit.list(action="promote"))
    assert releases.promote(ctx, cand.id, False, nobody)[0] == "operators only"
    assert len(svc.store.audit.list(action="promote")) == before  # refused before anything was tried
    assert releases.promote(ctx, cand.id, False, admin)[0].startswith("✅")
    releases.rollback(ctx, admin)
    promote, rollback = _latest(svc.store, "promote"), _latest(svc.store, "rollback")
    assert (promote.actor, promote.target, promote.details["surface"]) == ("admin", cand.id, "operator")
    assert (rollback.target, rollback.details["outcome"]) == (live_before, "ok")

    loads = []
    ctx = PanelContext(store=lambda: svc.store, identify=lambda request: request, denied="operators only",
                       refresh_triggers=[lambda fn, inputs, outputs, **kw: loads.append(fn)])
    with gr.Blocks():
        build_audit_panel(lambda action: svc.store.audit.list(limit=50, action=action))(ctx)
    frame = loads[0]("rollback", admin)
    assert list(frame["action"]) and set(frame["action"]) == {"rollback"} and "operator" in set(frame["via"])
    assert loads[0]("all actions", nobody).empty
