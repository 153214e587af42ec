//! Idempotency keys on the app's two writes, with their records in the app's own database.
//!
//! `POST /api/sales/{sale_id}/orders` and `POST /api/orders/{order_id}/pay` go through
//! lock-tower's `IdempotencyLayer` ([`crate::api`]) with an [`SqlRecordStore`]: a request with an
//! `Idempotency-Key` runs once, under the key's lock (in Redis), and its retries get its
//! response from the `idempotency_records` table (`migrations/0003_idempotency.sql`).
//!
//! The purchase and the payment write their record **in the transaction that writes the order
//! or the payment** ([`Recorder`], [`InTransaction`]): the business rows and the record commit
//! together, so an instance that dies after the commit (and before its answer) leaves a record,
//! and the retry is replayed, not applied again; one that dies before leaves neither, and the
//! retry runs. Their other answers (`410 sold_out`, `409 already_ordered`, ...) are stored by
//! the layer after the handler, with the same store.
//!
//! # What the SQL store guarantees
//!
//! * A record written in a handler's transaction exists exactly when that transaction
//!   committed: the business write and its record are one atomic step (PostgreSQL and SQLite
//!   alike). That is what makes a retry after a crash safe.
//! * A put is fenced: refused when the row holds an unexpired record of a greater token (a
//!   newer holder of the key's lock recorded first); the transaction then rolls back.
//! * Records a layer stores after the handler (`store_if`) come after the handler's own
//!   writes: a crash in between leaves those writes without a record, and the retry runs the
//!   handler again (the purchase's limit check and the payment's conditional write answer it).
//! * Expired rows are ignored by [`get`](lock_tower::RecordStore::get) and deleted by
//!   [`SqlRecordStore::purge_expired`], which `serve` runs every minute.

use std::time::Duration;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION};
use lock_core::fenced::Fenced;
use lock_tower::{Idempotency, Record, RecordStore, StoreError, idempotency::StoreFuture};
use serde::Serialize;
use sqlx::{AnyConnection, AnyPool, Row};

use crate::error::ApiError;
use crate::model::now_ms;

/// Idempotency records in the app's database, table `idempotency_records`: one row per record
/// key with the fencing token that wrote it, the record ([`Record::to_bytes`]) and when it
/// expires (Unix ms). See the [module docs](self) for what it guarantees.
#[derive(Debug, Clone)]
pub struct SqlRecordStore {
    pool: AnyPool,
}

/// The fenced upsert: written unless the row holds an unexpired record of a greater token.
const PUT: &str = "INSERT INTO idempotency_records (record_key, fence, record, expires_at) \
                   VALUES ($1, $2, $3, $4) \
                   ON CONFLICT (record_key) DO UPDATE SET fence = excluded.fence, \
                   record = excluded.record, expires_at = excluded.expires_at \
                   WHERE idempotency_records.fence <= excluded.fence \
                   OR idempotency_records.expires_at <= $5";

impl SqlRecordStore {
    /// Records in the database of `pool`.
    pub fn new(pool: AnyPool) -> Self {
        Self { pool }
    }

    /// Writes `record` under `key` for `ttl` on `conn` (a transaction's connection, for a
    /// handler that records in its own transaction), fenced by `token`.
    pub async fn put_in(
        conn: &mut AnyConnection,
        key: &str,
        record: &Record,
        token: u64,
        ttl: Duration,
    ) -> Result<Fenced, sqlx::Error> {
        let fence = i64::try_from(token).map_err(|e| sqlx::Error::Encode(e.into()))?;
        let now = now_ms();
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let written = sqlx::query(PUT)
            .bind(key)
            .bind(fence)
            .bind(record.to_bytes())
            .bind(now.saturating_add(ttl))
            .bind(now)
            .execute(&mut *conn)
            .await?;
        if written.rows_affected() == 1 {
            return Ok(Fenced::Written);
        }
        let stored: i64 =
            sqlx::query("SELECT fence FROM idempotency_records WHERE record_key = $1")
                .bind(key)
                .fetch_one(&mut *conn)
                .await?
                .try_get(0)?;
        Ok(Fenced::Refused {
            stored: u64::try_from(stored).unwrap_or(0),
        })
    }

    /// Deletes the records that have expired; returns how many.
    pub async fn purge_expired(&self) -> Result<u64, sqlx::Error> {
        let done = sqlx::query("DELETE FROM idempotency_records WHERE expires_at <= $1")
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

fn store_error(error: sqlx::Error) -> StoreError {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            StoreError::unavailable(error)
        }
        other => StoreError::other(other),
    }
}

impl RecordStore for SqlRecordStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Record>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT record FROM idempotency_records WHERE record_key = $1 AND expires_at > $2",
            )
            .bind(key)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
            let Some(row) = row else { return Ok(None) };
            let bytes: Vec<u8> = row.try_get(0).map_err(StoreError::corrupt)?;
            Record::from_bytes(&bytes).map(Some)
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        record: &'a Record,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Fenced> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(store_error)?;
            Self::put_in(&mut conn, key, record, token, ttl)
                .await
                .map_err(store_error)
        })
    }
}

/// A JSON answer, as the API sends it and as a record keeps it: a status, `Content-Type:
/// application/json`, an optional `Location`, and the body.
#[derive(Debug, Clone)]
pub struct JsonAnswer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl JsonAnswer {
    /// `value` as JSON with `status` (and `location`).
    pub fn new(
        status: StatusCode,
        location: Option<String>,
        value: &impl Serialize,
    ) -> Result<Self, ApiError> {
        let body = serde_json::to_vec(value).map_err(|e| ApiError::internal(&e))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(location) = location {
            let location = HeaderValue::try_from(location).map_err(|e| ApiError::internal(&e))?;
            headers.insert(LOCATION, location);
        }
        Ok(Self {
            status,
            headers,
            body: body.into(),
        })
    }
}

impl IntoResponse for JsonAnswer {
    fn into_response(self) -> Response {
        (self.status, self.headers, self.body).into_response()
    }
}

/// How a write records its answer in its own transaction: the request's [`Idempotency`], and
/// how its result becomes the answer (the same function answers the request, so the answer
/// and the record are the same bytes).
#[derive(Debug)]
pub struct Recorder<'a, T> {
    idem: &'a Idempotency,
    answer: fn(&T) -> Result<JsonAnswer, ApiError>,
}

impl<'a, T> Recorder<'a, T> {
    /// Records `answer(result)` for the request of `idem`.
    pub fn new(idem: &'a Idempotency, answer: fn(&T) -> Result<JsonAnswer, ApiError>) -> Self {
        Self { idem, answer }
    }

    /// The answer to `result`, and its record to write in the transaction.
    fn prepare(&self, result: &T) -> Result<(JsonAnswer, InTransaction<'a>), ApiError> {
        let answer = (self.answer)(result)?;
        let record = self
            .idem
            .record(answer.status, &answer.headers, answer.body.clone());
        let write = InTransaction {
            idem: self.idem,
            record,
        };
        Ok((answer, write))
    }
}

/// A write's record, made before the write from its result, to write in its transaction; none
/// for a request without a key.
#[derive(Debug)]
pub struct ToRecord<'a>(Option<(JsonAnswer, InTransaction<'a>)>);

impl<'a> ToRecord<'a> {
    /// The record of `result`, as `recorder` answers it (none without a recorder).
    pub fn new<T>(recorder: Option<Recorder<'a, T>>, result: &T) -> Result<Self, ApiError> {
        Ok(Self(recorder.map(|r| r.prepare(result)).transpose()?))
    }

    /// The record to write in the transaction, if there is one.
    pub fn in_transaction(&self) -> Option<&InTransaction<'a>> {
        self.0.as_ref().map(|(_, record)| record)
    }

    /// The write's `value` with the recorded answer, once the transaction committed.
    pub fn done<T>(self, value: T) -> Recorded<T> {
        Recorded {
            value,
            answer: self.0.map(|(answer, _)| answer),
        }
    }
}

/// A write's result and, when it wrote its idempotency record in its own transaction, the
/// answer that record holds: send exactly that.
#[derive(Debug)]
pub struct Recorded<T> {
    /// The result.
    pub value: T,
    /// The recorded answer, if the write recorded one.
    pub answer: Option<JsonAnswer>,
}

impl<T> Recorded<T> {
    /// A result with no record written.
    pub fn without_record(value: T) -> Self {
        Self {
            value,
            answer: None,
        }
    }

    /// The response: the recorded answer, or `answer(value)` (the function that made it).
    pub fn respond(
        self,
        answer: fn(&T) -> Result<JsonAnswer, ApiError>,
    ) -> Result<Response, ApiError> {
        match self.answer {
            Some(recorded) => Ok(recorded.into_response()),
            None => Ok(answer(&self.value)?.into_response()),
        }
    }
}

/// A record to write in a handler's transaction.
#[derive(Debug)]
pub struct InTransaction<'a> {
    idem: &'a Idempotency,
    record: Record,
}

impl InTransaction<'_> {
    /// Writes it on the transaction's connection `conn`, fenced by the key's token.
    pub async fn put(&self, conn: &mut AnyConnection) -> Result<Fenced, sqlx::Error> {
        let idem = self.idem;
        SqlRecordStore::put_in(
            conn,
            idem.record_key(),
            &self.record,
            idem.fencing_token(),
            idem.ttl(),
        )
        .await
    }

    /// Says the transaction committed: the layer does not store the answer again.
    pub fn committed(&self) {
        self.idem.mark_stored();
    }

    /// The record key.
    pub fn key(&self) -> &str {
        self.idem.record_key()
    }
}

/// The answer to a write whose record was refused in its transaction: a newer request with the
/// key recorded first (this one's lock was lost), and nothing was written.
pub fn record_fenced() -> ApiError {
    ApiError::unavailable(
        "idempotency_record_fenced",
        "a newer request with this idempotency key recorded its answer first; nothing was \
         written"
            .to_owned(),
        Duration::from_secs(1),
    )
}
