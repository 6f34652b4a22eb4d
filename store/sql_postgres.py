"""The PostgreSQL dialect of each schema migration (`migrations.py` numbers them and explains the
PostgreSQL specifics: the commit-safe `messages.seq` and the change counters of the analytics
mirror). Same tables, columns and meanings as `sql_duckdb.py`."""

from __future__ import annotations


def change_counter(table: str) -> str:
    """The sequence that counts a table's changing statements (PostgreSQL)."""
    return f"changes_{table}"


def track_changes(*tables: str, inserts: bool = True) -> str:
    """PostgreSQL DDL: a change counter per table, bumped once per changing statement."""
    events = "INSERT OR UPDATE OR DELETE OR TRUNCATE" if inserts else "UPDATE OR DELETE OR TRUNCATE"
    return "\n".join(
        f"CREATE SEQUENCE {change_counter(t)};\n"
        f"CREATE TRIGGER {t}_changed AFTER {events} ON {t} FOR EACH STATEMENT "
        f"EXECUTE FUNCTION bump_change_counter('{change_counter(t)}');"
        for t in tables
    )



V1 = """
CREATE SEQUENCE message_seq START 1;

-- The transaction id first, then the value: see the module docstring.
CREATE FUNCTION next_message_seq() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN nextval('message_seq');
END $$;

CREATE FUNCTION bump_change_counter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval(TG_ARGV[0]);
    RETURN NULL;
END $$;

CREATE TABLE users (
    id            text PRIMARY KEY,
    name          text UNIQUE,
    password_hash text,
    is_admin      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE forgotten_users (
    user_id       text PRIMARY KEY,
    forgotten_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE conversations (
    id          text PRIMARY KEY,
    user_id     text NOT NULL,
    title       text NOT NULL DEFAULT '',
    source      text NOT NULL DEFAULT 'ui',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversations_user ON conversations(user_id);

CREATE TABLE messages (
    id               text PRIMARY KEY,
    conversation_id  text NOT NULL,
    parent_id        text,
    role             text NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content          text NOT NULL,
    status           text NOT NULL DEFAULT 'complete' CHECK (status IN ('complete', 'interrupted', 'error')),
    seq              bigint NOT NULL DEFAULT next_message_seq(),
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_conversation ON messages(conversation_id);
CREATE INDEX messages_seq ON messages(seq);

CREATE TABLE generations (
    message_id        text PRIMARY KEY,
    conversation_id   text NOT NULL,
    release_id        text,
    backend           text NOT NULL,
    model             text NOT NULL,
    adapter           text,
    steering          text NOT NULL,
    helpfulness       smallint NOT NULL,
    correctness       smallint NOT NULL,
    coherence         smallint NOT NULL,
    complexity        smallint NOT NULL,
    verbosity         smallint NOT NULL,
    temperature       double precision,
    top_p             double precision,
    max_new_tokens    integer,
    seed              bigint,
    latency_ms        double precision,
    first_token_ms    double precision,
    prompt_tokens     integer,
    completion_tokens integer,
    finish_reason     text,
    error             text
);
CREATE INDEX generations_release ON generations(release_id);
CREATE INDEX generations_conversation ON generations(conversation_id);

CREATE TABLE ratings (
    id          text PRIMARY KEY,
    message_id  text NOT NULL,
    user_id     text NOT NULL,
    value       smallint NOT NULL CHECK (value IN (-1, 1)),
    reasons     text[] NOT NULL DEFAULT '{}',
    comment     text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ratings_message ON ratings(message_id);

CREATE TABLE sibling_choices (
    id          text PRIMARY KEY,
    conversation_id text NOT NULL,
    parent_id   text,
    message_id  text NOT NULL,
    user_id     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sibling_choices_conversation ON sibling_choices(conversation_id);

CREATE TABLE feedback_events (
    id                 text PRIMARY KEY,
    conversation_id    text NOT NULL,
    message_id         text NOT NULL,
    target_message_id  text NOT NULL,
    category           text NOT NULL,
    span               text NOT NULL,
    span_start         integer NOT NULL,
    span_end           integer NOT NULL,
    extractor          text NOT NULL,
    extractor_version  text NOT NULL,
    job_id             text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (message_id, category, span_start, span_end, extractor)
);
CREATE INDEX feedback_events_conversation ON feedback_events(conversation_id);

CREATE TABLE jobs (
    id           text PRIMARY KEY,
    kind         text NOT NULL,
    trigger      text NOT NULL,
    status       text NOT NULL CHECK (status IN
                 ('queued', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    params       jsonb,
    result       jsonb,
    error        text,
    parent_id    text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
);
CREATE INDEX jobs_queued ON jobs(created_at) WHERE status = 'queued';

CREATE TABLE watermarks (
    name        text PRIMARY KEY,
    value       bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE training_runs (
    id                 text PRIMARY KEY,
    job_id             text,
    method             text NOT NULL,
    status             text NOT NULL,
    run_dir            text NOT NULL,
    base_model         text NOT NULL,
    parent_release_id  text,
    data_hash          text,
    config             jsonb,
    metrics            jsonb,
    error              text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz
);

CREATE TABLE eval_results (
    id          text PRIMARY KEY,
    job_id      text,
    subject     text NOT NULL,
    suite       text NOT NULL,
    metric      text NOT NULL,
    value       double precision,
    details     jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE releases (
    id            text PRIMARY KEY,
    run_id        text,
    adapter_path  text,
    base_model    text NOT NULL,
    status        text NOT NULL CHECK (status IN ('candidate', 'live', 'rejected', 'retired')),
    decision      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    promoted_at   timestamptz,
    retired_at    timestamptz
);
""" + track_changes("users", "forgotten_users", "conversations", "generations", "ratings", "sibling_choices",
                    "feedback_events", "jobs", "watermarks", "training_runs", "eval_results", "releases") + "\n" \
    + track_changes("messages", inserts=False)

_GENERATION_TYPED = (("helpfulness", "smallint"), ("correctness", "smallint"), ("coherence", "smallint"),
                     ("complexity", "smallint"), ("verbosity", "smallint"), ("temperature", "double precision"),
                     ("top_p", "double precision"), ("max_new_tokens", "integer"), ("seed", "bigint"),
                     ("latency_ms", "double precision"), ("first_token_ms", "double precision"),
                     ("prompt_tokens", "integer"), ("completion_tokens", "integer"))
_GENERATION_COLUMNS = ("release_id", "backend", "model", "adapter", "steering", "helpfulness", "correctness",
                       "coherence", "complexity", "verbosity", "temperature", "top_p", "max_new_tokens", "seed",
                       "latency_ms", "first_token_ms", "prompt_tokens", "completion_tokens", "finish_reason", "error")


def _pg_generation_column(name: str) -> str:
    types = dict(_GENERATION_TYPED)
    if name in types:
        return f"(generation->>'{name}')::{types[name]} AS {name}"
    return f"generation->>'{name}' AS {name}"


V2 = f"""
ALTER TABLE messages ADD COLUMN generation jsonb;  -- NULL for questions

UPDATE messages SET generation = jsonb_build_object({", ".join(f"'{c}', g.{c}" for c in _GENERATION_COLUMNS)})
FROM generations g WHERE messages.id = g.message_id;

DROP TABLE generations;
DROP SEQUENCE {change_counter("generations")};

-- v1's table, as a view: one row per answer, typed columns (jsonb operators).
CREATE VIEW generations AS
SELECT id AS message_id, conversation_id,
       {(","+chr(10)+"       ").join(_pg_generation_column(c) for c in _GENERATION_COLUMNS)}
FROM messages WHERE generation IS NOT NULL;
"""


# v3: people's data and chat UX (see sql_duckdb.V3). PostgreSQL alters CHECK constraints in place,
# where DuckDB rebuilds the tables: the inline CHECKs of v1 are named <table>_<column>_check.
V3 = """
ALTER TABLE users ADD COLUMN training_consent boolean;

CREATE TABLE sessions (
    id            text PRIMARY KEY,
    user_id       text NOT NULL,
    is_admin      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    user_agent    text NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user ON sessions(user_id);

CREATE TABLE login_attempts (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    ok          boolean NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_attempts_name ON login_attempts(name);

CREATE TABLE audit_log (
    id          text PRIMARY KEY,
    actor       text NOT NULL,
    action      text NOT NULL,
    target      text NOT NULL DEFAULT '',
    details     jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE run_users (
    run_id   text NOT NULL,
    user_id  text NOT NULL,
    PRIMARY KEY (run_id, user_id)
);

ALTER TABLE ratings DROP CONSTRAINT ratings_value_check;
ALTER TABLE ratings ADD CONSTRAINT ratings_value_check CHECK (value IN (-1, 0, 1));
ALTER TABLE releases DROP CONSTRAINT releases_status_check;
ALTER TABLE releases ADD CONSTRAINT releases_status_check
    CHECK (status IN ('candidate', 'canary', 'live', 'rejected', 'retired'));
""" + track_changes("sessions", "login_attempts", "audit_log", "run_users")

# Event reviews (the DuckDB script's comment says what they are).
V4 = """
CREATE TABLE event_reviews (
    id                  text PRIMARY KEY,
    event_id            text NOT NULL,
    reviewer            text NOT NULL,
    verdict             text NOT NULL CHECK (verdict IN ('correct', 'wrong_category', 'not_feedback')),
    corrected_category  text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CHECK ((verdict = 'wrong_category' AND corrected_category IS NOT NULL)
           OR (verdict <> 'wrong_category' AND corrected_category IS NULL))
);
CREATE INDEX event_reviews_event ON event_reviews(event_id);
""" + track_changes("event_reviews")

# Crash recovery: the lease of a running job (its owner and last heartbeat).
V5 = """
ALTER TABLE jobs ADD COLUMN owner text;
ALTER TABLE jobs ADD COLUMN heartbeat_at timestamptz;
"""

# v6: consent history and export records (see sql_duckdb.V6).
V6 = """
CREATE TABLE consent_changes (
    id          text PRIMARY KEY,
    user_id     text NOT NULL,
    old_value   boolean,
    new_value   boolean,
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX consent_changes_user ON consent_changes(user_id);

CREATE TABLE exports (
    id          text PRIMARY KEY,
    actor       text NOT NULL,
    what        text NOT NULL,
    path        text NOT NULL,
    row_count   bigint NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);
""" + track_changes("consent_changes", "exports")

# v7: safety marks (see sql_duckdb.V7).
V7 = """
CREATE TABLE safety_marks (
    id          text PRIMARY KEY,
    message_id  text NOT NULL,
    operator    text NOT NULL,
    label       text NOT NULL CHECK (label IN ('wrong', 'right')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX safety_marks_message ON safety_marks(message_id);
""" + track_changes("safety_marks")
