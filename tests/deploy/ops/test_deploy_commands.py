"""The deployment files' `advisor` command lines run as written: compose's model-init for real
(it makes and links the model the settings serve, which loads), and every `advisor ...` line in
compose.yaml, the Dockerfile and the systemd units parses with the project's own CLI, so a flag
renamed or removed in the code fails here rather than on a deployment."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
OPS = REPO / "deploy" / "ops"


def compose() -> dict:
    return yaml.safe_load((OPS / "compose.yaml").read_text())


def as_shell(compose_text: str) -> str:
    """What compose hands the shell: `$$` becomes `$`; the tests' lines use no compose variables."""
    assert not re.search(r"(?<!\$)\$(?!\$)", compose_text.replace("$$", "")), compose_text
    return compose_text.replace("$$", "$")


# --------------------------------------------------------------------------- model-init, for real


def test_model_init_makes_and_links_the_model_the_settings_serve(tmp_path, pretrained_model_dir):
    from transformers import AutoConfig, AutoTokenizer

    from chat.pretrained import pretrained_model_path
    from deploy.settings import load_settings

    init = compose()["services"]["model-init"]
    assert init["entrypoint"] == ["sh", "-c"] and len(init["command"]) == 1
    data = tmp_path / "data"
    # The built model, where the build looks for it: `model build` finds it made and prints it
    # (a link to the test cache's build, so no download).
    (data / "models").mkdir(parents=True)
    pretrained_model_path(data).symlink_to(pretrained_model_dir)
    env = {**os.environ, **{k: str(v) for k, v in init["environment"].items()}, "ADVISOR_DATA_DIR": str(data),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    done = subprocess.run(["sh", "-c", as_shell(init["command"][0])], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr

    served = data / "models" / "served"
    assert served.is_symlink() and not Path(os.readlink(served)).is_absolute()  # resolves in the vllm container too
    settings = load_settings(environ={"ADVISOR_DATA_DIR": str(data)})
    assert settings.backend.kind == "pretrained"  # what the settings serve by default
    assert served.resolve() == pretrained_model_path(data).resolve()
    assert done.stdout.strip() == f"serving {pretrained_model_path(data)}"
    config = AutoConfig.from_pretrained(served)
    tokenizer = AutoTokenizer.from_pretrained(served)
    assert config.model_type == "llama" and tokenizer("Hello").input_ids


# --------------------------------------------------------------------------- no flag drift


def parse(args: list[str]):
    """Parse an `advisor` argument list down to its leaf command with the project's CLI, without
    running any callback; raises on an unknown command or flag, or a bad value."""
    import typer

    from deploy.wiring import build_cli

    cmd = typer.main.get_command(build_cli())
    ctx = cmd.make_context("advisor", list(args))
    while hasattr(cmd, "resolve_command"):  # a group: hand the rest to its subcommand
        name, cmd, rest = cmd.resolve_command(ctx, [*getattr(ctx, "_protected_args", []), *ctx.args])
        ctx = cmd.make_context(name, rest, parent=ctx)
    return ctx


def advisor_lines() -> list[tuple[str, list[str]]]:
    """(where, arguments) of every `advisor` invocation in the deployment files."""
    found = []
    dockerfile = (OPS / "Dockerfile").read_text()
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert entry and yaml.safe_load(entry.group(1)) == ["advisor"]
    if cmd:
        found.append(("Dockerfile CMD", yaml.safe_load(cmd.group(1))))
    for name, svc in compose()["services"].items():
        command = svc.get("command")
        if svc.get("image", "").startswith("advisor:") and svc.get("entrypoint") is None and command:
            found.append((f"compose {name}", [str(a) for a in command]))  # after the image's ENTRYPOINT advisor
        elif svc.get("entrypoint") == ["sh", "-c"]:
            for args in re.findall(r"\badvisor((?:\s+[^\s&|;)\"']+)*)", as_shell(command[0])):
                found.append((f"compose {name}", shlex.split(args)))
    for unit in sorted(OPS.glob("*.service")):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.read_string(unit.read_text())
        exec_start = shlex.split(parser["Service"]["ExecStart"])
        if exec_start[0].endswith("/advisor"):
            found.append((unit.name, exec_start[1:]))
    return found


def test_the_deployment_files_call_advisor_where_expected():
    where = [w for w, _ in advisor_lines()]
    assert {"Dockerfile CMD", "compose advisor", "compose model-init", "advisor.service", "vllm.service"} <= set(where)


@pytest.mark.parametrize(("where", "args"), advisor_lines(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_advisor_command_line_parses(where, args):
    ctx = parse(args)  # raises on a flag, command or value the CLI does not have
    assert ctx.command.name in args, (where, args, ctx.command_path)  # down to the command named


@pytest.mark.parametrize("args", [["serve", "--no-such-flag"], ["model", "build", "--model", "no-such-model"],
                                  ["--no-such-root-flag", "serve"], ["no-such-command"]])
def test_a_flag_or_command_that_does_not_exist_fails_to_parse(args):
    with pytest.raises(Exception, match="No such|is not one of"):
        parse(args)
