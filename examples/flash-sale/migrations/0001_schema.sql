-- The flash-sale schema. One file for SQLite and PostgreSQL alike: ids are TEXT made by the
-- app, integers are BIGINT, times are Unix milliseconds, and nothing depends on one
-- database's types, defaults or sequences.

-- One limited-stock sale. `fence` is the highest fencing token that has claimed the sale's
-- stock: a purchase claims it with `fence < token` and writes the stock only while
-- `fence = token`, so a holder of the stock lock that stalled past its lease cannot write.
CREATE TABLE sales (
    id             TEXT PRIMARY KEY,
    sku            TEXT NOT NULL,
    name           TEXT NOT NULL,
    price_cents    BIGINT NOT NULL,
    initial_stock  BIGINT NOT NULL,
    stock          BIGINT NOT NULL CHECK (stock >= 0),
    per_user_limit BIGINT NOT NULL,
    starts_at      BIGINT NOT NULL,
    ends_at        BIGINT NOT NULL,
    fence          BIGINT NOT NULL,
    created_at     BIGINT NOT NULL
);

-- No unique index on (sale_id, user_id): the per-person limit is a business rule of the sale
-- (`per_user_limit`), enforced by the purchase under the sale's stock lock.
CREATE TABLE orders (
    id         TEXT PRIMARY KEY,
    sale_id    TEXT NOT NULL REFERENCES sales (id),
    user_id    TEXT NOT NULL,
    status     TEXT NOT NULL,
    fence      BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    paid_at    BIGINT
);
CREATE INDEX orders_by_sale_user ON orders (sale_id, user_id);

-- Applied payment callbacks: one row per order that was paid.
CREATE TABLE payments (
    id           TEXT PRIMARY KEY,
    order_id     TEXT NOT NULL REFERENCES orders (id),
    payment_ref  TEXT NOT NULL,
    amount_cents BIGINT NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE INDEX payments_by_order ON payments (order_id);

-- Writes the fencing check refused: a stock-lock holder whose token was no longer the sale's.
CREATE TABLE stale_writes (
    id         TEXT PRIMARY KEY,
    sale_id    TEXT NOT NULL REFERENCES sales (id),
    token      BIGINT NOT NULL,
    fence      BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
