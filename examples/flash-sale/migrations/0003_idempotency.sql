-- Idempotency records (lock-tower's IdempotencyLayer, through `flash_sale::idempotency::
-- SqlRecordStore`): the stored answer of a request with an Idempotency-Key, under its record key
-- (the layer's prefix, the scope and the key), with the fencing token of the key's lock that
-- wrote it and when it expires (Unix ms). The purchase and the payment write theirs in the
-- transaction that writes the order or the payment; the layer writes the others after the
-- handler. `record` is lock-tower's `Record::to_bytes` (BYTEA: a BLOB in SQLite).
CREATE TABLE idempotency_records (
    record_key TEXT PRIMARY KEY,
    fence      BIGINT NOT NULL,
    record     BYTEA NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX idempotency_records_by_expiry ON idempotency_records (expires_at);
