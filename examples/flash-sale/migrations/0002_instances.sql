-- The instances that have served this shop: each `serve` process adds its row at start, so
-- that an owner id read from a lock (`<client id>:<holder>`) can be shown as the instance
-- that holds it. Client ids are random per process: a restarted instance adds a new row.
CREATE TABLE instances (
    client_id  TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    started_at BIGINT NOT NULL
);
