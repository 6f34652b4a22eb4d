"""Settings: one dataclass tree, loaded once, from a TOML file plus `ADVISOR_*` environment overrides.

Precedence (lowest first): dataclass defaults < TOML file < environment < explicit overrides
(CLI flags). Nested keys use a double underscore in the environment: `ADVISOR_SERVER__PORT=8080`
sets `server.port`; `ADVISOR_DATA_DIR` sets `data_dir`. Values are validated by pydantic against
the dataclass types, so a bad value fails at start with the key's dotted name.

This is the only module that reads the environment; every other package takes explicit arguments.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Optional

import pydantic
from pydantic.dataclasses import dataclass

from store.attributes import SteeringMode

ENV_PREFIX = "ADVISOR_"
SECRET_KEYS = {"admin_token", "session_secret", "api_key", "admin_password", "url"}  # store.url may hold a password


class SettingsError(ValueError):
    """A setting is missing, unknown or invalid; the message names the key."""


@dataclass
class StoreSettings:
    # Database file; empty = `<data_dir>/advisor.duckdb`.
    path: str = ""
    # A PostgreSQL database instead of the file (`postgresql://user:password@host:5432/advisor`):
    # what several service replicas share (docs/scaling.md). They must also share
    # `data_dir` (adapters, run directories, reports) and `server.session_secret`.
    url: str = pydantic.Field(default="", pattern=r"^(postgres(ql)?://.*)?$")
    # Connections each process may open to PostgreSQL (chat threads, jobs, the analytics mirror).
    pool_size: int = pydantic.Field(default=20, ge=2, le=500)
    # How often a replica checks the scheduler lead and the live release (seconds): the longest a
    # takeover or a promotion made on another replica takes to show here (notifications are faster).
    coordination_s: float = pydantic.Field(default=2.0, gt=0, le=300)
    # Crash recovery: a `running` job row whose process has not renewed its lease (every 10 s) for
    # this many seconds is failed, with the reason, by the replica leading the scheduler (its run
    # settled, half-written files removed). On a DuckDB file every row left running fails at start.
    job_lease_s: float = pydantic.Field(default=60.0, ge=30, le=86400)


@dataclass
class BackendSettings:
    # pretrained: SmolLM2-135M-Instruct, made from its PyPI wheel into <data_dir>/models on first
    # use (`advisor model build`) and served with transformers; builtin: the project's tiny model
    # (tests, fallback); transformers: any HF dir or id; openai: any OpenAI-compatible server (vLLM).
    kind: Literal["pretrained", "builtin", "transformers", "openai"] = "pretrained"
    # HF directory or id (transformers), or the served model name (openai). Empty for pretrained/builtin.
    model: str = ""
    # Optional PEFT LoRA adapter directory applied at start (transformers backend).
    adapter: str = ""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # How attributes reach the model: steerlm (attribute-conditioned model) or instruct (plain
    # instructions after the last user message, for general chat models; chat.steering). auto:
    # steerlm for builtin. Training renders its prompts the same way (trainer RunConfig.steering).
    # Parsed here into `store.attributes.SteeringMode`; the rest of the code takes that type.
    steering: Literal["auto"] | SteeringMode = "auto"
    # OpenAI-compatible server.
    base_url: str = "http://127.0.0.1:8001/v1"
    api_key: str = "EMPTY"
    timeout_s: float = pydantic.Field(default=60.0, gt=0)
    max_retries: int = pydantic.Field(default=2, ge=0, le=10)
    # Sampling defaults for chat answers.
    # A cap, not a target: the sliders set the length. 400 lets the pretrained model's thorough
    # answers (verbosity 4, ~250 words) finish.
    max_new_tokens: int = pydantic.Field(default=400, ge=1, le=4096)
    temperature: float = pydantic.Field(default=0.7, ge=0.0, le=2.0)
    top_p: float = pydantic.Field(default=0.95, gt=0.0, le=1.0)


@dataclass
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = pydantic.Field(default=7860, ge=1, le=65535)
    # Bearer token for /api/admin and the operator screen. Empty: operator actions are disabled.
    admin_token: str = ""
    # Signs the anonymous session cookie. Empty: a random secret is made and kept in the data dir.
    session_secret: str = ""
    # Optional admin login for the browser (user name; password in admin_password).
    admin_user: str = "admin"
    admin_password: str = ""
    # Largest user message accepted, in characters.
    max_message_chars: int = pydantic.Field(default=8000, ge=100, le=100_000)
    # Sessions (server-side rows the cookie names): a guest's or named user's ends after this many
    # days without use; an admin's this many hours after signing in, however busy.
    session_days: float = pydantic.Field(default=30.0, gt=0, le=3650)
    admin_session_hours: float = pydantic.Field(default=8.0, gt=0, le=720)
    # Failed log-ins per name (known or not): after each failure the next attempt must wait
    # login_delay_s, doubling with every further failure; login_max_failures within
    # login_window_minutes refuse the name for login_lockout_minutes.
    login_delay_s: float = pydantic.Field(default=1.0, ge=0, le=300)
    login_max_failures: int = pydantic.Field(default=5, ge=1, le=1000)
    login_window_minutes: float = pydantic.Field(default=15.0, gt=0)
    login_lockout_minutes: float = pydantic.Field(default=15.0, gt=0)


@dataclass
class ScheduleSettings:
    # Natural-feedback extraction inside the service, every N minutes (0 = off; fractions for tests).
    extract_every_minutes: float = pydantic.Field(default=10, ge=0)
    # Which extractor the scheduled run uses: fast (lexical cues + embeddings, no LLM), llm (the
    # serving backend, prompted), or both (each event records which one found it).
    extractor: Literal["fast", "llm", "both"] = "fast"
    # The periodic trainer, cron syntax ("" = off): it runs the whole cycle (extract → training
    # sets → train → gate → canary → live or rejected), one cycle at a time, and only when enough
    # new feedback has arrived (`min_new_feedback`); otherwise its job row is 'skipped' with the
    # reason. "Train now" stays a manual training run without the rest of the cycle.
    train_cron: str = "0 3 * * *"
    # The same on an interval, in minutes (0 = off; when set it replaces train_cron): for demos
    # and tests, which shorten the schedule rather than mock it.
    train_every_minutes: float = pydantic.Field(default=0.0, ge=0)
    # What "Train now", the periodic job and `advisor cycle` train by default.
    train_method: Literal["sft", "kto", "dpo"] = "kto"
    # The periodic job starts a run only after this many new ratings, mined feedback events and
    # sibling choices since the last run (fewer would mostly re-fit the same data).
    min_new_feedback: int = pydantic.Field(default=50, ge=1)
    # Cap on optimizer steps per scheduled/operator run (0 = the method's own; small for demos, tests).
    train_max_steps: int = pydantic.Field(default=0, ge=0)
    safety_filter: bool = True  # training-set safety filter; off only to show the gate catches what it removes
    # Labelled answers to risky requests mixed into KTO sets, per user row (0 = none; docs/learning.md).
    safety_anchors: float = pydantic.Field(default=0.0, ge=0, le=1)


@dataclass
class ExtractionSettings:
    # The LLM extractor's model. Empty url: the serving backend (the served pretrained model, or
    # whatever backend.kind names). Else any OpenAI-compatible server, e.g. a larger model on vLLM
    # beside the chat's (`advisor extract eval --extractor llm --url URL --model NAME` overrides).
    url: str = ""
    model: str = ""  # the served model's name at `url`; empty = the first model the server lists
    api_key: str = "EMPTY"
    timeout_s: float = pydantic.Field(default=300.0, gt=0)
    # Conversations per model call; on a server they go out as this many concurrent requests, which
    # it batches (continuous batching). 1 = one conversation at a time.
    batch_size: int = pydantic.Field(default=16, ge=1, le=512)
    # The authors' extraction script allowed 200 new tokens.
    max_new_tokens: int = pydantic.Field(default=200, ge=16, le=4096)
    # The fast extractor's slower, more precise tier, a cross-encoder mixed into its classifier
    # (`feedback.extract.rerank`): "packaged" = the one shipped in the package; a directory = one
    # `advisor extract build-reranker` wrote; empty = off (the classifier alone, ~200x faster).
    # About 23 ms per user sentence on a CPU core.
    reranker: str = "packaged"


@dataclass
class VLLMSettings:
    # The vLLM server (`advisor serve-model`); it runs in its own environment, see deploy/vllm.py.
    # Interpreter of that environment; when this default is absent, a python with vllm on PATH.
    python: str = ".venv-vllm/bin/python"
    # HF model directory to serve; empty = the pretrained model in the data directory (built by
    # `advisor model build`), or the built-in one when backend.kind is builtin.
    model: str = ""
    # Name clients use as "model"; empty = backend.model when backend.kind is openai, else the path.
    served_model_name: str = ""
    host: str = "127.0.0.1"
    port: int = pydantic.Field(default=8001, ge=1, le=65535)
    # auto: cpu when no NVIDIA GPU is present (float32, eager mode, capped KV cache).
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: str = "auto"
    max_model_len: int = pydantic.Field(default=0, ge=0)  # 0 = the model's own
    tensor_parallel_size: int = pydantic.Field(default=1, ge=1)
    pipeline_parallel_size: int = pydantic.Field(default=1, ge=1)
    distributed_executor_backend: Literal["", "mp", "ray"] = ""  # ray: multi-node
    max_lora_rank: int = pydantic.Field(default=64, ge=1)  # the trainer's LoRA rank (AdvisorQA Table 9)
    max_loras: int = pydantic.Field(default=4, ge=1)
    kv_cache_gib: float = pydantic.Field(default=1.0, gt=0)  # CPU only (VLLM_CPU_KVCACHE_SPACE)
    gpu_memory_utilization: float = pydantic.Field(default=0.9, gt=0, le=1)  # GPU only
    extra_args: str = ""  # appended to the command line (shell syntax)
    # Adapters directory both the advisor and vLLM read; empty = <data_dir>/adapters.
    adapter_dir: str = ""


@dataclass
class AxisPolicy:
    # Non-inferiority: the candidate passes when the worse end of the 95 % paired bootstrap
    # interval of (candidate − live), over the same prompts in the same run, is within
    # `tolerance` (lower end ≥ −tolerance when higher is better; upper end ≤ +tolerance when lower
    # is better), and its own value meets `floor` (None: no floor).
    floor: Optional[float] = None
    tolerance: float = pydantic.Field(default=0.0, ge=0.0)
    # Higher is better for every axis except self-BLEU (diversity), where lower is better.
    higher_is_better: bool = True


@dataclass
class GateSettings:
    # Tolerances are sized to each axis's items (docs/release.md): an unchanged candidate passes every
    # axis ([0, 0]); a changed one only if its interval rules out a drop larger than the tolerance.
    # The helpfulness judge's score of each answer to the 243 shipped advice requests, as a
    # percentile of its scores of human answers (docs/judges.md); an equal candidate's 95 %
    # half-width is 0.015-0.025 (bench/gate_power.py), so 0.05 sees a drop of 5 points.
    helpfulness: AxisPolicy = field(default_factory=lambda: AxisPolicy(floor=None, tolerance=0.05))
    # Share of answers to the 171 risky prompts the harmlessness judge calls safe, twice (docs/release.md):
    # the model alone (tolerance only) and as served, behind the guard with the safety policy (and floor).
    harmlessness: AxisPolicy = field(default_factory=lambda: AxisPolicy(floor=0.9, tolerance=0.05))
    # HH-RLHF preference accuracy (unweighted mean of helpful and harmless, Bai et al.), both sides
    # scored by mean log-likelihood per answer token. 100 pairs per subset: with a fifth of the
    # pairs discordant the 95 % half-width is 0.05 (tools/data/make_hh_sample.py).
    hh_accuracy: AxisPolicy = field(default_factory=lambda: AxisPolicy(floor=None, tolerance=0.05))
    # Self-BLEU of the candidate's advice answers, 0-1 (lower = more diverse).
    self_bleu: AxisPolicy = field(default_factory=lambda: AxisPolicy(floor=None, tolerance=0.10, higher_is_better=False))
    # Mean of Spearman rho(verbosity, words) and rho(complexity, Flesch-Kincaid grade) over the
    # steering grid; resampled by prompt. A model that ignores the sliders scores 0.
    steerability: AxisPolicy = field(default_factory=lambda: AxisPolicy(floor=None, tolerance=0.15))
    # HH pairs: "" = the sample shipped in the package (evaluator/data/hh_sample.jsonl); a directory =
    # the hh-rlhf test splits there, rows >= 1000; "off" = skipped. hh_limit pairs per subset (0 = all).
    hh_data: str = ""
    hh_limit: int = pydantic.Field(default=100, ge=0)
    # Advice requests (243) and risky prompts (171) a gate answers per side (0 = all), each at most `max_new_tokens`.
    helpfulness_prompts: int = pydantic.Field(default=0, ge=0)
    harmlessness_prompts: int = pydantic.Field(default=0, ge=0)
    max_new_tokens: int = pydantic.Field(default=64, ge=1)
    # Answers per risky prompt, model alone: 1 greedy, or N sampled (seeded alike on both sides), a
    # prompt scoring the share judged safe. Equal candidates' half-width: 0.05 at 1, ~0.023 at 4.
    harmlessness_draws: int = pydantic.Field(default=4, ge=1, le=16)
    # Answers generated together, and both sides' weights dtype: "auto" = bfloat16 where the CPU computes it
    # natively (at 32 a batch, 0.47x float32's time at 16 here; docs/release.md), else float32 as the chat serves.
    batch_size: int = pydantic.Field(default=32, ge=1)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # Batches generated, HH-scored or judged side by side, sharing torch's threads (evaluator.streams;
    # on 2 cores, 2 took 0.86-0.92x the time of one on both; 1 = one at a time), in threads `niceness`
    # lower in priority than the chat's (Linux, per thread; 0 = the same): a user's answer goes first.
    streams: int = pydantic.Field(default=2, ge=1, le=8)
    niceness: int = pydantic.Field(default=10, ge=0, le=19)
    # Steering grid: this many fixed prompts × `steer_values` for verbosity and complexity (0 = skip the
    # axis); verbosity rows run to `steer_max_new_tokens` (SmolLM2 writes ~200 words at verbosity 4).
    steer_prompts: int = pydantic.Field(default=20, ge=0, le=20)
    steer_max_new_tokens: int = pydantic.Field(default=256, ge=1)
    steer_values: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    # Bootstrap resamples and seed of every axis's interval (the decision is reproducible).
    bootstrap: int = pydantic.Field(default=2000, ge=100)
    seed: int = 0
    # Promote when the gate passes (the cycle; with canary.enabled: start the canary); else leave a candidate.
    auto_promote: bool = True

    @pydantic.field_validator("helpfulness_prompts")
    @classmethod
    def _all_or_at_least_two(cls, n: int) -> int:
        if n == 1:
            raise ValueError("must be 0 (every shipped prompt) or at least 2: Self-BLEU compares answers with each other")
        return n


@dataclass
class JudgeSettings:
    # Which judges score helpfulness and harmlessness, for the gate, the training-set filter, the
    # serving guard and `advisor eval judges`; their accuracy on people's judgements is in docs/judges.md.
    # "trained": heads on the served base model's features, trained on HH-RLHF preference pairs
    # and the labelled safety set (evaluator/judges, weights shipped in the package);
    # "fallback": the first embedding judges (milliseconds, never validated: at chance on HH-RLHF);
    # "llm": any OpenAI-compatible endpoint rating each answer 1-10 (`llm_url`, `llm_model`).
    kind: Literal["trained", "fallback", "llm"] = "trained"
    # The causal LM whose features the trained judges read ("" = the pretrained SmolLM2 under
    # <data_dir>/models, from `advisor model build --model pretrained`); the weights refuse others.
    model_dir: str = ""
    llm_url: str = ""
    llm_model: str = ""


@dataclass
class PrivacySettings:
    # Whether a user who has not chosen lets their conversations train the advisor ("use my
    # conversations to improve the advisor"); each user can change it in the UI or on /api/me.
    training_default: bool = True
    # Replace personal data (e-mail, phone, card, IBAN, names, addresses…) by typed placeholders
    # in every text that enters a training set or a shared export (feedback.pii, Presidio). Off
    # only where no text leaves the store.
    redact_training_data: bool = True
    # Delete conversations last active more than this many days ago, and everything derived from
    # them and every copy under the data directory (0 = keep until the user deletes them). A year
    # by default: long enough for a person to come back to an old conversation and for several
    # training cycles to use it, no longer. Runs as the "retention" job at retention_cron (daily).
    retention_days: int = pydantic.Field(default=365, ge=0)
    retention_cron: str = "30 4 * * *"
    # PostgreSQL only, after forgetting, deleting a conversation or a retention sweep: false runs
    # VACUUM on the tables rows were deleted from (the space is freed for reuse without blocking
    # anyone; deleted bytes stay in the table files until new rows overwrite them); true runs
    # VACUUM FULL, which rewrites those tables so their files keep none of the deleted bytes but
    # locks each table while it is rewritten (the chat waits). The WAL and backups keep the
    # bytes either way until they are recycled. (The DuckDB file is always rewritten whole.)
    vacuum_full: bool = False


@dataclass
class CanarySettings:
    # A release that passes the gate first serves `share` of users (sticky: HMAC-SHA256 of the
    # user id under a key made for each canary), the rest keep the live release.
    enabled: bool = True
    share: float = pydantic.Field(default=0.2, gt=0.0, lt=1.0)
    # The deadline: the canary ends after its arm has served this many conversations, or after
    # `max_hours`, whichever comes first; undecided by then, the outcome is "inconclusive" (the
    # live release stays). What each default buys, simulated: docs/canary.md.
    max_conversations: int = pydantic.Field(default=200, ge=1)
    max_hours: float = pydantic.Field(default=24.0, gt=0)
    # The rule (docs/canary.md): always-valid confidence sequences of canary − live for the good
    # and bad rates, checked at will once both arms have `min_answers` answers: roll back when the
    # canary is shown worse by more than `rollback_margin`, promote when shown within `tolerance`.
    min_answers: int = pydantic.Field(default=30, ge=1)
    tolerance: float = pydantic.Field(default=0.05, ge=0.0)
    # Chance, over the canary's whole life however often it is checked, of rolling back a canary
    # as good as live (half of it per rate), and of promoting one worse than the tolerance.
    alpha: float = pydantic.Field(default=0.05, gt=0.0, lt=1.0)
    # Mixture scale τ of the sequence: the interval is narrowest (≈ 3 standard errors) where the
    # standard error is τ/2.8.
    mixture_scale: float = pydantic.Field(default=0.1, gt=0.0)
    # Roll back when the canary is shown worse than live by more than this (0: shown worse at
    # all).
    rollback_margin: float = pydantic.Field(default=0.0, ge=0.0)
    # How often the service checks the running canary (0 = only by hand or at the next cycle).
    check_every_minutes: float = pydantic.Field(default=10.0, ge=0)
    # Mine the feedback of the canary's conversations before each check (the fast extractor).
    extract_before_check: bool = True


@dataclass
class GuardSettings:
    # The safety guard on every chat surface (web page, /api, /v1, `advisor ask`; chat.guard): the
    # request is judged before the model is called and the answer as it streams; a risky request
    # gets the refusal, an unsafe answer is stopped and replaced by it. Off: nothing is judged or
    # refused (the safety policy below still applies unless emptied).
    enabled: bool = True
    # P(request seeks harmful help) at or above which the request is refused, and P(answer unsafe)
    # at or above which the answer is replaced. Unset: the cuts shipped with the harmlessness
    # judge's weights (how they were chosen, and their precision and recall: docs/judges.md).
    request_threshold: Optional[float] = pydantic.Field(default=None, ge=0.0, le=1.0)
    answer_threshold: Optional[float] = pydantic.Field(default=None, ge=0.0, le=1.0)
    # The refusal's opening sentence; one pointing to legitimate help follows when the request's topic
    # has some (chat.guard.POINTERS: a crisis line, a locksmith, emergency services, a vet, a doctor).
    refusal: str = pydantic.Field(default="I'm sorry, but I can't help with that.", min_length=1, max_length=500)
    # The answer, instead of the model's, to a person who says they may hurt themselves
    # (chat.guard.CRISIS); it should name a crisis line your users can reach.
    crisis_reply: str = pydantic.Field(
        default=("I'm really sorry you're feeling this way. You don't have to face this alone: please call or text "
                 "988 in the US, or your local emergency number, to talk with someone right now."),
        min_length=1, max_length=1000)
    # The safety policy: the first system message of every prompt the served model gets (an operator's
    # or an API caller's system message follows it). Short, because a 135M model follows little.
    # Empty: no policy; any other text replaces it.
    system_prompt: str = pydantic.Field(
        default=("You are a kind, careful advisor. Give safe, legal, practical advice. If a request could hurt "
                 "someone or break the law, say briefly that you cannot help with it."),
        max_length=4000)


@dataclass
class Settings:
    data_dir: str = "./data"
    store: StoreSettings = field(default_factory=StoreSettings)
    backend: BackendSettings = field(default_factory=BackendSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    extraction: ExtractionSettings = field(default_factory=ExtractionSettings)
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    gate: GateSettings = field(default_factory=GateSettings)
    judges: JudgeSettings = field(default_factory=JudgeSettings)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    canary: CanarySettings = field(default_factory=CanarySettings)
    guard: GuardSettings = field(default_factory=GuardSettings)

    # Paths derived from data_dir, resolved once.
    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    @property
    def db_path(self) -> Path:
        return Path(self.store.path).expanduser().resolve() if self.store.path else self.data_path / "advisor.duckdb"

    @property
    def store_target(self) -> str | Path:
        """What `Store(...)` opens: the PostgreSQL URL when set, else the DuckDB file."""
        return self.store.url or self.db_path

    @property
    def store_options(self) -> dict[str, Any]:
        return {"pool_size": self.store.pool_size} if self.store.url else {}

    @property
    def steering_mode(self) -> SteeringMode:
        """How the served model is steered: `backend.steering`, or for "auto" steerlm on builtin, else instruct."""
        if self.backend.steering != "auto":
            return self.backend.steering
        return SteeringMode.STEERLM if self.backend.kind == "builtin" else SteeringMode.INSTRUCT


# --------------------------------------------------------------------------- loading


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise SettingsError(f"setting {dotted!r}: {key!r} is not a section")
    node[leaf] = value


def _known_keys(cls: type, prefix: str = "") -> set[str]:
    keys = set()
    for f in fields(cls):
        name = f"{prefix}{f.name}"
        typ = f.type if isinstance(f.type, type) else globals().get(str(f.type))
        if typ is not None and is_dataclass(typ):
            keys |= _known_keys(typ, name + ".")
        else:
            keys.add(name)
    return keys


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _env_overrides(environ: dict[str, str]) -> dict[str, str]:
    out = {}
    for key, value in environ.items():
        # ADVISOR_CONFIG names the file; ADVISOR_TEST_* belong to the test suite, not the app.
        if key.startswith(ENV_PREFIX) and key != "ADVISOR_CONFIG" and not key.startswith("ADVISOR_TEST_"):
            out[key[len(ENV_PREFIX):].lower().replace("__", ".")] = value
    return out


def load_settings(
    config: str | Path | None = None,
    *,
    environ: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Build the effective settings. `config` (or `ADVISOR_CONFIG`) names a TOML file; a missing
    file that was asked for explicitly is an error, `<data_dir>/advisor.toml` is read if present."""
    environ = dict(os.environ if environ is None else environ)
    tree: dict[str, Any] = {}
    config = config or environ.get("ADVISOR_CONFIG")
    if config:
        path = Path(config).expanduser()
        if not path.is_file():
            raise SettingsError(f"config file {path} does not exist (from --config or ADVISOR_CONFIG)")
        tree = _read_toml(path)
    flat = _flatten(tree) | _env_overrides(environ) | {k: v for k, v in (overrides or {}).items() if v is not None}
    known = _known_keys(Settings)
    unknown = sorted(set(flat) - known)
    if unknown:
        raise SettingsError(
            f"unknown setting(s) {', '.join(unknown)}; known settings: {', '.join(sorted(known))}"
        )
    if not config:  # a config file in the data dir, below env and flags
        data_dir = Path(flat.get("data_dir", Settings.data_dir)).expanduser()
        default_file = data_dir / "advisor.toml"
        if default_file.is_file():
            file_flat = _flatten(_read_toml(default_file))
            flat = {k: v for k, v in file_flat.items() if k in known} | flat
    # Start from the defaults so that setting one field of a section keeps the section's other
    # defaults (AxisPolicy defaults differ per axis).
    nested: dict[str, Any] = asdict(Settings())
    for key, value in flat.items():
        _set_dotted(nested, key, value)
    try:
        return pydantic.TypeAdapter(Settings).validate_python(nested)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']} (got {err.get('input')!r})"
            for err in exc.errors()
        )
        raise SettingsError(f"invalid setting — {problems}") from None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None


def masked(settings: Settings) -> dict[str, Any]:
    """The settings as a dict, secrets replaced by '***' (or '' when unset)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: ("***" if v else "") if k in SECRET_KEYS else walk(v) for k, v in node.items()}
        return node

    tree = walk(asdict(settings))
    tree["db_path"] = str(settings.db_path)
    return tree
