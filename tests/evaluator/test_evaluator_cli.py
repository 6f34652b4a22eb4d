"""`advisor eval ...` end to end on the tiny random model: one line of JSON with the promised keys."""

from __future__ import annotations

import json

import pytest
from data_helpers import hh_dir
from typer.testing import CliRunner

from deploy.wiring import build_cli
from evaluator.hh_data import SUBSETS


@pytest.fixture(autouse=True)
def keep_torch_threads():
    import torch

    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)  # `--threads` sets the process-wide count; give the next test its own


def test_eval_hh_json_is_one_line_with_every_key(tmp_path, tiny_model_dir):
    result = CliRunner().invoke(build_cli(), ["eval", "hh", "--model", str(tiny_model_dir), "--data", str(hh_dir(tmp_path)),
                                              "--limit", "2", "--json", "--threads", "1"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    out = json.loads(lines[0])
    for key in (*SUBSETS, "helpful", "harmless", "mean"):
        assert key in out and 0.0 <= out[key] <= 1.0
    assert out["counts"]["harmless-base"]["pairs"] == 2
    assert out["scorer"] == "loglik" and out["pairs"] == 8


def test_eval_hh_explains_bad_arguments(tmp_path, tiny_model_dir):
    app = build_cli()
    missing = CliRunner().invoke(app, ["eval", "hh", "--model", str(tiny_model_dir), "--data", str(tmp_path)])
    assert missing.exit_code == 2 and "test.jsonl.gz" in missing.output
    implicit = CliRunner().invoke(app, ["eval", "hh", "--model", str(tiny_model_dir), "--data", str(hh_dir(tmp_path)),
                                        "--scorer", "implicit"])
    assert implicit.exit_code == 2 and "--adapter" in implicit.output


def test_eval_keeps_its_models_under_the_root_data_dir(tmp_path, tiny_model_dir):
    """`helpfulness train` saves the reward model under the root `--data-dir`, and `helpfulness
    score` finds it there and nowhere else."""
    app, data = build_cli(), tmp_path / "data"
    trained = CliRunner().invoke(app, ["--data-dir", str(data), "eval", "helpfulness", "train", "--epochs", "2",
                                       "--json"])
    assert trained.exit_code == 0, trained.output
    saved = json.loads(trained.stdout.strip().splitlines()[-1])["saved"]
    assert saved == str(data.resolve() / "models" / "pl-reward")
    score = ["eval", "helpfulness", "score", "--model", str(tiny_model_dir), "--limit", "2", "--max-new-tokens", "4",
             "--threads", "1", "--json"]
    scored = CliRunner().invoke(app, ["--data-dir", str(data), *score])
    assert scored.exit_code == 0, scored.output
    out = json.loads(scored.stdout.strip().splitlines()[-1])
    assert out["questions"] == 2 and 0.0 <= out["helpfulness"] <= 1.0
    elsewhere = CliRunner().invoke(app, ["--data-dir", str(tmp_path / "other"), *score])
    assert elsewhere.exit_code == 2 and "no reward model at" in elsewhere.output
