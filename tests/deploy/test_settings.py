"""Settings: defaults, TOML, environment precedence, validation naming the key, masking."""

from __future__ import annotations

import pytest

from deploy.settings import SettingsError, load_settings, masked


def test_precedence_toml_then_env_then_overrides(tmp_path):
    cfg = tmp_path / "advisor.toml"
    cfg.write_text('data_dir = "/srv/a"\n[server]\nport = 9000\nadmin_token = "s3cret"\n')
    s = load_settings(cfg, environ={})
    assert (s.server.port, s.data_dir) == (9000, "/srv/a")
    s = load_settings(cfg, environ={"ADVISOR_SERVER__PORT": "9100"})
    assert s.server.port == 9100
    s = load_settings(cfg, environ={"ADVISOR_SERVER__PORT": "9100"}, overrides={"server.port": 9200})
    assert s.server.port == 9200


def test_data_dir_config_file_is_read(tmp_path):
    (tmp_path / "advisor.toml").write_text('[backend]\nkind = "openai"\n')
    s = load_settings(environ={"ADVISOR_DATA_DIR": str(tmp_path)})
    assert s.backend.kind == "openai" and s.db_path == tmp_path.resolve() / "advisor.duckdb"


@pytest.mark.parametrize(
    "env, key",
    [
        ({"ADVISOR_SERVER__PORT": "70000"}, "server.port"),
        ({"ADVISOR_SERVER__PORT": "abc"}, "server.port"),
        ({"ADVISOR_BACKEND__KIND": "gpt"}, "backend.kind"),
        ({"ADVISOR_BACKEND__TEMPERATURE": "-1"}, "backend.temperature"),
        ({"ADVISOR_SERVR__PORT": "1"}, "servr.port"),
        ({"ADVISOR_STORE__URL": "mysql://db/advisor"}, "store.url"),
    ],
)
def test_invalid_values_name_the_key(env, key):
    with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
        load_settings(environ=env)


def test_a_postgresql_url_replaces_the_file_and_is_masked(tmp_path):
    url = "postgresql://advisor:pw@db:5432/advisor"
    s = load_settings(environ={"ADVISOR_DATA_DIR": str(tmp_path), "ADVISOR_STORE__URL": url,
                               "ADVISOR_SCHEDULE__EXTRACT_EVERY_MINUTES": "0.05"})
    assert s.store_target == url and s.store_options == {"pool_size": 20}
    assert s.schedule.extract_every_minutes == 0.05  # fractions of a minute, for tests
    assert masked(s)["store"]["url"] == "***"
    assert load_settings(environ={"ADVISOR_DATA_DIR": str(tmp_path)}).store_target == tmp_path.resolve() / "advisor.duckdb"


def test_missing_explicit_config_is_an_error(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", environ={})


def test_secrets_are_masked():
    tree = masked(load_settings(environ={"ADVISOR_SERVER__ADMIN_TOKEN": "zq-secret-zq"}))
    assert tree["server"]["admin_token"] == "***"
    assert tree["server"]["session_secret"] == ""
    assert "zq-secret-zq" not in str(tree)


def test_test_suite_variables_are_not_settings():
    s = load_settings(environ={"ADVISOR_TEST_CACHE": "/tmp/x", "ADVISOR_SERVER__PORT": "9001"})
    assert s.server.port == 9001


def test_training_knobs_are_declared_once_and_checked():
    """One dataclass (trainer.config.TrainingKnobs) gives the CLI flags and validates job params."""
    from typer.testing import CliRunner

    from deploy.wiring import build_cli
    from trainer.config import ConfigError, TrainingKnobs

    knobs = TrainingKnobs.from_mapping({"max_steps": 5, "learning_rate": 1e-3})
    assert knobs.as_overrides() == {"max_steps": 5, "learning_rate": 1e-3}
    for bad in ({"base_model": "x"}, {"max_steps": "many"}, {"max_steps": 2.5}, {"learning_rate": True}):
        with pytest.raises(ConfigError):
            TrainingKnobs.from_mapping(bad)
    for command in ("train", "cycle"):
        help_text = CliRunner().invoke(build_cli(), [command, "--help"], terminal_width=200).output
        for name in ("--max-steps", "--epochs", "--learning-rate", "--lr", "--batch-size", "--lora-alpha"):
            assert name in help_text, (command, name)
