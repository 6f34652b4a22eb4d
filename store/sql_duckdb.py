"""The DuckDB dialect of each schema migration (`migrations.py` numbers them and says why)."""

V1 = """
CREATE SEQUENCE IF NOT EXISTS message_seq START 1;

CREATE TABLE users (
    id            VARCHAR PRIMARY KEY,
    name          VARCHAR UNIQUE,          -- NULL for anonymous users
    password_hash VARCHAR,
    is_admin      BOOLEAN NOT NULL DEFAULT false,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Users who asked to be forgotten: their rows are deleted; the id stays here so no later
-- import or training-set build can bring them back.
CREATE TABLE forgotten_users (
    user_id       VARCHAR PRIMARY KEY,
    forgotten_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE conversations (
    id          VARCHAR PRIMARY KEY,
    user_id     VARCHAR NOT NULL,
    title       VARCHAR NOT NULL DEFAULT '',
    source      VARCHAR NOT NULL DEFAULT 'ui',   -- ui | api | openai | cli | simulator
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX conversations_user ON conversations(user_id);

-- A tree: regenerate makes a sibling assistant message, edit a sibling user message.
CREATE TABLE messages (
    id               VARCHAR PRIMARY KEY,
    conversation_id  VARCHAR NOT NULL,
    parent_id        VARCHAR,
    role             VARCHAR NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content          VARCHAR NOT NULL,
    status           VARCHAR NOT NULL DEFAULT 'complete'
                     CHECK (status IN ('complete', 'interrupted', 'error')),
    seq              BIGINT NOT NULL DEFAULT nextval('message_seq'),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX messages_conversation ON messages(conversation_id);
CREATE INDEX messages_seq ON messages(seq);

-- Generation metadata, one row per assistant message.
CREATE TABLE generations (
    message_id        VARCHAR PRIMARY KEY,
    conversation_id   VARCHAR NOT NULL,       -- denormalised: a thread loads by index
    release_id        VARCHAR,
    backend           VARCHAR NOT NULL,
    model             VARCHAR NOT NULL,
    adapter           VARCHAR,
    steering          VARCHAR NOT NULL,       -- steerlm | instruct
    helpfulness       TINYINT NOT NULL,
    correctness       TINYINT NOT NULL,
    coherence         TINYINT NOT NULL,
    complexity        TINYINT NOT NULL,
    verbosity         TINYINT NOT NULL,
    temperature       DOUBLE,
    top_p             DOUBLE,
    max_new_tokens    INTEGER,
    seed              BIGINT,
    latency_ms        DOUBLE,
    first_token_ms    DOUBLE,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    finish_reason     VARCHAR,
    error             VARCHAR
);
CREATE INDEX generations_release ON generations(release_id);
CREATE INDEX generations_conversation ON generations(conversation_id);

-- Explicit feedback. value: +1 like, -1 dislike.
CREATE TABLE ratings (
    id          VARCHAR PRIMARY KEY,
    message_id  VARCHAR NOT NULL,
    user_id     VARCHAR NOT NULL,
    value       TINYINT NOT NULL CHECK (value IN (-1, 1)),
    reasons     VARCHAR[] NOT NULL DEFAULT [],
    comment     VARCHAR NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ratings_message ON ratings(message_id);

-- Which sibling the user kept after a regenerate or edit (the last choice wins).
CREATE TABLE sibling_choices (
    id          VARCHAR PRIMARY KEY,
    conversation_id VARCHAR NOT NULL,
    parent_id   VARCHAR,
    message_id  VARCHAR NOT NULL,
    user_id     VARCHAR NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX sibling_choices_conversation ON sibling_choices(conversation_id);

-- Mined natural feedback: a span of a user message about the assistant message before it.
CREATE TABLE feedback_events (
    id                 VARCHAR PRIMARY KEY,
    conversation_id    VARCHAR NOT NULL,
    message_id         VARCHAR NOT NULL,   -- the user message holding the span
    target_message_id  VARCHAR NOT NULL,   -- the assistant message it refers to
    category           VARCHAR NOT NULL,
    span               VARCHAR NOT NULL,
    span_start         INTEGER NOT NULL,
    span_end           INTEGER NOT NULL,
    extractor          VARCHAR NOT NULL,
    extractor_version  VARCHAR NOT NULL,
    job_id             VARCHAR,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (message_id, category, span_start, span_end, extractor)
);
CREATE INDEX feedback_events_conversation ON feedback_events(conversation_id);

CREATE TABLE jobs (
    id           VARCHAR PRIMARY KEY,
    kind         VARCHAR NOT NULL,           -- extract | dataset | train | eval | gate | cycle | ...
    trigger      VARCHAR NOT NULL,           -- schedule | manual | cli | api
    status       VARCHAR NOT NULL CHECK (status IN
                 ('queued', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    params       JSON,
    result       JSON,
    error        VARCHAR,
    parent_id    VARCHAR,                    -- the cycle a step belongs to
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ
);

-- Named progress markers, e.g. the extraction watermark over messages.seq.
CREATE TABLE watermarks (
    name        VARCHAR PRIMARY KEY,
    value       BIGINT NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE training_runs (
    id                 VARCHAR PRIMARY KEY,
    job_id             VARCHAR,
    method             VARCHAR NOT NULL,     -- sft | kto | dpo
    status             VARCHAR NOT NULL,     -- queued | running | succeeded | failed | cancelled
    run_dir            VARCHAR NOT NULL,
    base_model         VARCHAR NOT NULL,
    parent_release_id  VARCHAR,
    data_hash          VARCHAR,
    config             JSON,
    metrics            JSON,
    error              VARCHAR,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at        TIMESTAMPTZ
);

CREATE TABLE eval_results (
    id          VARCHAR PRIMARY KEY,
    job_id      VARCHAR,
    subject     VARCHAR NOT NULL,            -- release id, run id or model path
    suite       VARCHAR NOT NULL,            -- hh | helpfulness | harmlessness | diversity | ...
    metric      VARCHAR NOT NULL,
    value       DOUBLE,
    details     JSON,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE releases (
    id            VARCHAR PRIMARY KEY,
    run_id        VARCHAR,
    adapter_path  VARCHAR,                   -- NULL: the base model itself
    base_model    VARCHAR NOT NULL,
    status        VARCHAR NOT NULL CHECK (status IN ('candidate', 'live', 'rejected', 'retired')),
    decision      JSON,                      -- the gate's metrics, comparisons and reasons
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    promoted_at   TIMESTAMPTZ,
    retired_at    TIMESTAMPTZ
);
"""

V2 = """
ALTER TABLE messages ADD COLUMN generation JSON;  -- NULL for questions

UPDATE messages SET generation = g.doc
FROM (SELECT message_id, to_json({
          'release_id': release_id, 'backend': backend, 'model': model, 'adapter': adapter,
          'steering': steering, 'helpfulness': helpfulness, 'correctness': correctness,
          'coherence': coherence, 'complexity': complexity, 'verbosity': verbosity,
          'temperature': temperature, 'top_p': top_p, 'max_new_tokens': max_new_tokens,
          'seed': seed, 'latency_ms': latency_ms, 'first_token_ms': first_token_ms,
          'prompt_tokens': prompt_tokens, 'completion_tokens': completion_tokens,
          'finish_reason': finish_reason, 'error': error
      }) AS doc FROM generations) g
WHERE messages.id = g.message_id;

DROP TABLE generations;

-- v1's table, as a view: one row per answer, typed columns.
CREATE VIEW generations AS
SELECT id AS message_id, conversation_id,
       unnest(json_transform(generation, '{
           "release_id": "VARCHAR", "backend": "VARCHAR", "model": "VARCHAR",
           "adapter": "VARCHAR", "steering": "VARCHAR", "helpfulness": "TINYINT",
           "correctness": "TINYINT", "coherence": "TINYINT", "complexity": "TINYINT",
           "verbosity": "TINYINT", "temperature": "DOUBLE", "top_p": "DOUBLE",
           "max_new_tokens": "INTEGER", "seed": "BIGINT", "latency_ms": "DOUBLE",
           "first_token_ms": "DOUBLE", "prompt_tokens": "INTEGER",
           "completion_tokens": "INTEGER", "finish_reason": "VARCHAR", "error": "VARCHAR"
       }'))
FROM messages WHERE generation IS NOT NULL;
"""


# v3: people's data and chat UX: consent, server-side sessions, log-in attempts, audit log, who a run
# trained on, withdrawn ratings (value 0), canary releases.
V3 = """
        -- NULL: the deployment's default (privacy.training_default) applies.
        ALTER TABLE users ADD COLUMN training_consent BOOLEAN;

        -- Server-side sessions: the cookie names one; signing out, a password change or "sign out
        -- everywhere" revokes rows, so a copied cookie stops working at once.
        CREATE TABLE sessions (
            id            VARCHAR PRIMARY KEY,
            user_id       VARCHAR NOT NULL,
            is_admin      BOOLEAN NOT NULL DEFAULT false,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            expires_at    TIMESTAMPTZ NOT NULL,
            last_seen_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
            revoked_at    TIMESTAMPTZ,
            user_agent    VARCHAR NOT NULL DEFAULT ''
        );
        CREATE INDEX sessions_user ON sessions(user_id);

        -- Failed log-ins slow down, then refuse, further attempts at the same name for a while.
        CREATE TABLE login_attempts (
            id          VARCHAR PRIMARY KEY,
            name        VARCHAR NOT NULL,          -- the account name tried (lower-cased)
            ok          BOOLEAN NOT NULL,
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        CREATE INDEX login_attempts_name ON login_attempts(name);

        -- Who did what to the loop and to people's data, and when: append-only.
        CREATE TABLE audit_log (
            id          VARCHAR PRIMARY KEY,
            actor       VARCHAR NOT NULL,          -- user id, 'admin-token', 'cli', 'schedule'
            action      VARCHAR NOT NULL,          -- promote | rollback | forget | export | cancel | ...
            target      VARCHAR NOT NULL DEFAULT '',
            details     JSON,
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        );

        -- Whose conversations a training run's set was built from, so a release trained on data
        -- of a user who is later forgotten can be marked (adapter weights cannot be un-trained).
        CREATE TABLE run_users (
            run_id   VARCHAR NOT NULL,
            user_id  VARCHAR NOT NULL,
            PRIMARY KEY (run_id, user_id)
        );

        -- A rating of 0 withdraws an earlier like or dislike: the history stays append-only and
        -- the latest row counts. (A CHECK cannot be altered in place: the table is rebuilt.)
        CREATE TABLE ratings_v3 (
            id          VARCHAR PRIMARY KEY,
            message_id  VARCHAR NOT NULL,
            user_id     VARCHAR NOT NULL,
            value       TINYINT NOT NULL CHECK (value IN (-1, 0, 1)),
            reasons     VARCHAR[] NOT NULL DEFAULT [],
            comment     VARCHAR NOT NULL DEFAULT '',
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        INSERT INTO ratings_v3 SELECT id, message_id, user_id, value, reasons, comment, created_at FROM ratings;
        DROP TABLE ratings;
        ALTER TABLE ratings_v3 RENAME TO ratings;
        CREATE INDEX ratings_message ON ratings(message_id);

        -- A release that passed the gate first serves a share of users as a canary.
        CREATE TABLE releases_v3 (
            id            VARCHAR PRIMARY KEY,
            run_id        VARCHAR,
            adapter_path  VARCHAR,
            base_model    VARCHAR NOT NULL,
            status        VARCHAR NOT NULL CHECK (status IN
                          ('candidate', 'canary', 'live', 'rejected', 'retired')),
            decision      JSON,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            promoted_at   TIMESTAMPTZ,
            retired_at    TIMESTAMPTZ
        );
        INSERT INTO releases_v3 SELECT id, run_id, adapter_path, base_model, status, decision, created_at,
                                       promoted_at, retired_at FROM releases;
        DROP TABLE releases;
        ALTER TABLE releases_v3 RENAME TO releases;
        """

# Operators audit mined feedback. A reviewer's verdict on one mined feedback event: append-only,
# the latest per event counts (a second look may overrule the first); precision estimates and
# gold exports are computed from them. corrected_category is set exactly when the verdict is
# 'wrong_category'.
V4 = """
CREATE TABLE event_reviews (
    id                  VARCHAR PRIMARY KEY,
    event_id            VARCHAR NOT NULL,
    reviewer            VARCHAR NOT NULL,          -- the audit actor: a user id, 'admin-token', 'cli:<user>'
    verdict             VARCHAR NOT NULL CHECK (verdict IN ('correct', 'wrong_category', 'not_feedback')),
    corrected_category  VARCHAR,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((verdict = 'wrong_category' AND corrected_category IS NOT NULL)
           OR (verdict <> 'wrong_category' AND corrected_category IS NULL))
);
CREATE INDEX event_reviews_event ON event_reviews(event_id);
"""

# Crash recovery: who runs a job (a lease id: host, pid and a per-store token) and when it last
# said it was alive, so a row left `running` by a process that died can be told from a live one.
V5 = """
ALTER TABLE jobs ADD COLUMN owner VARCHAR;
ALTER TABLE jobs ADD COLUMN heartbeat_at TIMESTAMPTZ;
"""

# v6: people's data. Every change of a user's training consent, with its reason (the person's own
# history, in their export); and every export written to a file, so that forgetting a user can
# name the copies it cannot reach.
V6 = """
CREATE TABLE consent_changes (
    id          VARCHAR PRIMARY KEY,
    user_id     VARCHAR NOT NULL,
    old_value   BOOLEAN,                   -- NULL: the deployment's default applied
    new_value   BOOLEAN,
    reason      VARCHAR NOT NULL,          -- 'set by the user', 'merged guest session: stricter consent kept'
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX consent_changes_user ON consent_changes(user_id);

CREATE TABLE exports (
    id          VARCHAR PRIMARY KEY,
    actor       VARCHAR NOT NULL,          -- the audit actor who wrote it
    what        VARCHAR NOT NULL,          -- jsonl | jsonl for sharing | parquet | reviews-gold
    path        VARCHAR NOT NULL,          -- absolute path, or 'stdout'
    row_count   BIGINT NOT NULL DEFAULT 0,   -- conversations, messages or reviews written
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

# v7: operators mark the safety guard's refusals right or wrong (labelled safety data).
V7 = """
CREATE TABLE safety_marks (
    id          VARCHAR PRIMARY KEY,
    message_id  VARCHAR NOT NULL,              -- an answer the safety guard refused or replaced
    operator    VARCHAR NOT NULL,              -- the audit actor: a user id, 'admin-token', 'cli:<user>'
    label       VARCHAR NOT NULL CHECK (label IN ('wrong', 'right')),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX safety_marks_message ON safety_marks(message_id);
"""
