"""The database schema of the seven concerns of LMSP 11.1, and its migrations.

Each migration runs in its own transaction and bumps `PRAGMA user_version`; a database from a
newer version of the app is refused rather than guessed at.
"""

from __future__ import annotations

# `responses.final` is no longer written (issue 26, B4): the stored response is the row
# itself (build_response reads it) and its closing event carries the same object. Rows
# written before keep theirs; dropping the column would rewrite every row at the upgrade.
SCHEMA_V1 = """
CREATE TABLE service_config (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL              -- JSON
);

CREATE TABLE clients (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    token_hash     TEXT NOT NULL UNIQUE,   -- sha256 of the bearer token; the token is never stored
    token_prefix   TEXT NOT NULL,          -- non-secret, for display
    scopes         TEXT NOT NULL,          -- JSON list
    created_at     INTEGER NOT NULL,
    last_seen_at   INTEGER,
    last_seen_addr TEXT,
    revoked_at     INTEGER
);

CREATE TABLE pairings (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('device', 'claim')),
    client_name    TEXT,
    address        TEXT,
    scopes         TEXT NOT NULL,          -- JSON list requested (device) or granted (claim)
    user_code      TEXT NOT NULL,
    secret_hash    TEXT,                   -- device pairings: sha256 of the pairing secret
    state          TEXT NOT NULL,          -- pending|approved|denied|ignored|issued|dead
    granted_scopes TEXT,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    interval_s     INTEGER NOT NULL,
    last_poll_at   REAL,
    failures       INTEGER NOT NULL DEFAULT 0,
    client_id      TEXT
);
CREATE INDEX pairings_by_code ON pairings(user_code);

CREATE TABLE models (
    id             TEXT PRIMARY KEY,       -- readable, unique, safe name; never joined into a path
    path           TEXT NOT NULL UNIQUE,
    size_bytes     INTEGER NOT NULL,
    mtime_ns       INTEGER NOT NULL,
    digest         TEXT,                   -- sha256:<hex> of the whole file
    state          TEXT NOT NULL,          -- unverified|verified|changed|missing
    verified_at    INTEGER,
    architecture   TEXT,
    parameters     INTEGER,
    quantization   TEXT,
    context_length INTEGER,
    meta           TEXT,                   -- JSON: other header values (chat template, name)
    created_at     INTEGER NOT NULL
);

CREATE TABLE responses (
    id                TEXT PRIMARY KEY,    -- resp_…; its task shares the id
    created_at        INTEGER NOT NULL,
    model             TEXT NOT NULL,
    request           TEXT NOT NULL,       -- JSON: the normalised request settings and input
    output_text       TEXT NOT NULL DEFAULT '',
    item_id           TEXT,
    input_tokens      INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    completed_at      INTEGER,
    error             TEXT,                -- JSON {code, message}
    incomplete_reason TEXT,
    final             TEXT                 -- JSON: the stored response object once finished
);

CREATE TABLE tasks (
    n           INTEGER PRIMARY KEY AUTOINCREMENT,  -- submission order: queues and paging
    id          TEXT NOT NULL UNIQUE REFERENCES responses(id) ON DELETE CASCADE,
    client_id   TEXT,
    model       TEXT NOT NULL,
    state       TEXT NOT NULL,
    on_restart  TEXT NOT NULL,
    mode        TEXT NOT NULL,             -- background|stream|sync
    created_at  INTEGER NOT NULL,
    started_at  REAL,
    finished_at REAL,
    restarts    INTEGER NOT NULL DEFAULT 0,
    last_seq    INTEGER NOT NULL,
    recovered_boot INTEGER,                -- the startup whose recovery last handled it
    snapshot    TEXT                       -- JSON: token ids so far, for exact resume
);
CREATE INDEX tasks_by_state ON tasks(state, model, n);
CREATE INDEX tasks_finished ON tasks(finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE task_events (
    task_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    created_at REAL NOT NULL,
    data       TEXT NOT NULL,              -- JSON of the whole event
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;

CREATE TABLE idempotency_keys (
    client_id      TEXT NOT NULL,
    key            TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    state          TEXT NOT NULL,          -- in_flight|done
    status         INTEGER,
    body           TEXT,
    task_id        TEXT,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (client_id, key)
);
CREATE INDEX idempotency_expiry ON idempotency_keys(expires_at);

CREATE TABLE recovery_reports (
    n           INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at  REAL NOT NULL,
    finished_at REAL NOT NULL,
    items       TEXT NOT NULL              -- JSON list
);
"""

# Upstream engines (issue 17): OpenAI-compatible servers whose models run tasks stored here.
# The API key lives in the OS keyring when there is one (`key_store` = 'keyring'); only
# without one is it kept here, in the 0600 database file ('database').
SCHEMA_V2_UPSTREAMS = """
CREATE TABLE upstreams (
    name            TEXT PRIMARY KEY,      -- models appear as <name>/<model>
    base_url        TEXT NOT NULL,         -- ends in /v1
    key_store       TEXT NOT NULL CHECK (key_store IN ('none', 'keyring', 'database')),
    api_key         TEXT,                  -- only when key_store = 'database'
    max_concurrency INTEGER NOT NULL,
    timeout_s       REAL NOT NULL,         -- connect and between-chunks limit
    created_at      INTEGER NOT NULL,
    updated_at      REAL NOT NULL          -- a running service notices changes by it
);
"""

# Function tools (issue 14): a response that may call tools keeps its output items (the
# message and `function_call` items, in output order) as JSON; NULL for the others.
SCHEMA_V3_OUTPUT_ITEMS = """
ALTER TABLE responses ADD COLUMN output_items TEXT;
"""

# Usage's cached_tokens: of a response's input tokens, how many the engine took from its
# prompt-prefix cache (an upstream: what it reported) rather than evaluated.
SCHEMA_V4_CACHED_TOKENS = """
ALTER TABLE responses ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
"""

# Task kinds: a task is a response (any API's generation: the default, so every task stored
# before is one), a `download` of a model file from the Hugging Face hub, and later others
# (`embedding`). They share states, events, cancel and recovery; the kind says who runs it.
SCHEMA_V5_TASK_KIND = """
ALTER TABLE tasks ADD COLUMN kind TEXT NOT NULL DEFAULT 'response';
"""

# Per-model load settings (issue 21): NULL leaves the choice to the service (context fitted
# to memory, the global concurrency, GPU layers auto). Keyed by the model's id.
SCHEMA_V6_MODEL_SETTINGS = """
CREATE TABLE model_settings (
    model_id       TEXT PRIMARY KEY,
    context_length INTEGER,                -- tokens per request; NULL: fitted to memory
    parallel       INTEGER,                -- concurrent requests; NULL: the global setting
    kv_type        TEXT NOT NULL DEFAULT 'f16' CHECK (kv_type IN ('f16', 'q8_0')),
    gpu_layers     INTEGER,                -- NULL: auto; -1: all
    updated_at     REAL NOT NULL
);
"""

# Retention (issue 26): the purge walks the finished tasks oldest first. This partial index
# holds exactly them, in that order, with what a purge step reads, so each step is one range
# of it (the old index on finished_at alone made every step also scan the state index for
# all finished tasks and sort them: 0.8 s per step at 100k tasks). The states are
# core.states.TERMINAL; retention.py spells the same list, which lets SQLite use the index.
SCHEMA_V7_EXPIRY_INDEX = """
DROP INDEX tasks_finished;
CREATE INDEX tasks_expiry ON tasks(finished_at, id, last_seq, state)
    WHERE state IN ('cancelled', 'completed', 'failed', 'incomplete');
"""

# Embeddings (issue 22): an embedding task's vectors, stored with its completion: float32
# little-endian, one row of `dimensions` per input, in input order. NULL for other tasks.
SCHEMA_V8_EMBEDDINGS = """
ALTER TABLE responses ADD COLUMN embeddings BLOB;
ALTER TABLE responses ADD COLUMN embedding_dimensions INTEGER;
"""

# Stop sequences (issue 22): the one that ended a response's output, NULL when none did
# (Anthropic's `stop_reason: "stop_sequence"` names it; the task object shows it).
SCHEMA_V9_STOP_SEQUENCE = """
ALTER TABLE responses ADD COLUMN stop_sequence TEXT;
"""

# The event log in the order it is written (B4): a rowid table, each new event appended at
# its end, and a unique index on (task_id, seq) for every read (and the numbering's guard).
# Keyed by (task_id, seq) itself (WITHOUT ROWID), an event went into the middle of the tree,
# inside its task's range, so that a startup's recovery of 10k tasks split and rewrote every
# page holding their events: 64 of the 96 MB of its WAL at 100k tasks (57 MB in all now).
# Existing events are copied in their key order, each task's together.
SCHEMA_V10_EVENTS_APPENDED = """
CREATE TABLE task_events_appended (
    n          INTEGER PRIMARY KEY,       -- write order: a new event goes at the end
    task_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    created_at REAL NOT NULL,
    data       TEXT NOT NULL              -- JSON of the whole event
);
INSERT INTO task_events_appended (task_id, seq, type, created_at, data)
    SELECT task_id, seq, type, created_at, data FROM task_events ORDER BY task_id, seq;
DROP TABLE task_events;
ALTER TABLE task_events_appended RENAME TO task_events;
CREATE UNIQUE INDEX task_events_by_task ON task_events(task_id, seq);
"""

# When a task's output began (its first output token, epoch seconds like started_at): the
# runner knows it in memory while the task runs and the move that ends the task stores it
# (Transition.first_tokens), so the window's Speed is the generation's rate, not one that
# counts the prompt's read (a 6k-token prompt read for 86 s made 21 tok/s show as 0.3).
# NULL: not known (tasks stored before, ended by the recovery, or before any output).
SCHEMA_V11_FIRST_TOKEN = """
ALTER TABLE tasks ADD COLUMN first_token_at REAL;
"""

# The writer connection's own count of each model's queued tasks, rebuilt at every open and
# kept by TEMP triggers (they fire for the writer's statements only, and only the writer
# writes tasks): a new task's queue position is its model's count, one key read, instead of
# counting the queue (B1: with 8,000 tasks queued that COUNT was half the writer's time per
# create). Nothing in the file changes; savepoints and rollbacks undo the counts with the rows.
# No trigger on DELETE: unfinished tasks are never deleted (LMSP 11.2).
WRITER_TEMP_SCHEMA = """
PRAGMA temp_store=MEMORY;
CREATE TEMP TABLE IF NOT EXISTS queue_lengths (
    model  TEXT PRIMARY KEY,
    queued INTEGER NOT NULL
) WITHOUT ROWID;
DELETE FROM temp.queue_lengths;
INSERT INTO temp.queue_lengths (model, queued)
    SELECT model, COUNT(*) FROM main.tasks WHERE state = 'queued' GROUP BY model;
CREATE TEMP TRIGGER IF NOT EXISTS queue_joined AFTER INSERT ON main.tasks
WHEN NEW.state = 'queued' BEGIN
    INSERT INTO queue_lengths (model, queued) VALUES (NEW.model, 1)
        ON CONFLICT (model) DO UPDATE SET queued = queued + 1;
END;
CREATE TEMP TRIGGER IF NOT EXISTS queue_left AFTER UPDATE OF state, model ON main.tasks
WHEN OLD.state = 'queued' AND (NEW.state IS NOT 'queued' OR NEW.model IS NOT OLD.model) BEGIN
    UPDATE queue_lengths SET queued = queued - 1 WHERE model = OLD.model;
END;
CREATE TEMP TRIGGER IF NOT EXISTS queue_rejoined AFTER UPDATE OF state, model ON main.tasks
WHEN NEW.state = 'queued' AND (OLD.state IS NOT 'queued' OR NEW.model IS NOT OLD.model) BEGIN
    INSERT INTO queue_lengths (model, queued) VALUES (NEW.model, 1)
        ON CONFLICT (model) DO UPDATE SET queued = queued + 1;
END;
"""

# MIGRATIONS[i] brings a database from user_version i to i + 1.
MIGRATIONS: list[str] = [
    SCHEMA_V1,
    SCHEMA_V2_UPSTREAMS,
    SCHEMA_V3_OUTPUT_ITEMS,
    SCHEMA_V4_CACHED_TOKENS,
    SCHEMA_V5_TASK_KIND,
    SCHEMA_V6_MODEL_SETTINGS,
    SCHEMA_V7_EXPIRY_INDEX,
    SCHEMA_V8_EMBEDDINGS,
    SCHEMA_V9_STOP_SEQUENCE,
    SCHEMA_V10_EVENTS_APPENDED,
    SCHEMA_V11_FIRST_TOKEN,
]
CURRENT_VERSION = len(MIGRATIONS)
