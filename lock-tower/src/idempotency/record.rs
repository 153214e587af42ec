//! [`Record`]: a response kept for replay, with the [`Fingerprint`] of the request that made
//! it, and its byte format in a store.

use std::fmt;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode, Uri};
use sha2::{Digest, Sha256};

use super::error::StoreError;

/// What makes two requests with one idempotency key the same request: the SHA-256 of the
/// method, the path and query, and the SHA-256 of the body.
///
/// Headers are not part of it (a retry may well carry another `Date` or trace id); two
/// requests that differ only in headers are the same request.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a request with `method`, `uri` (its path and query count; scheme
    /// and authority do not) and `body`.
    pub fn of(method: &Method, uri: &Uri, body: &[u8]) -> Self {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut hash = Sha256::new();
        hash.update(method.as_str());
        hash.update([0]);
        hash.update(path);
        hash.update([0]);
        hash.update(Sha256::digest(body));
        Self(hash.finalize().into())
    }

    /// A fingerprint from its 32 bytes (as [`as_bytes`](Self::as_bytes) gave them).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Its 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    /// Lowercase hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// A response kept for replay: its status, the headers the layer keeps
/// ([`replay_headers`](crate::IdempotencyLayer::replay_headers)), its body, and the
/// [`Fingerprint`] of the request that made it.
///
/// A handler that writes the record in its own transaction makes it with
/// [`Idempotency::record`](crate::Idempotency::record) and answers with
/// [`to_response`](Self::to_response), so that its answer and every replay are the same.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    fingerprint: Fingerprint,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// What a stored record starts with: the format and its version.
const MAGIC: &[u8; 4] = b"IDR1";

/// The header that marks a [not replayable](Record::not_replayable) record (in the record
/// only: never sent). A header, so the stored format stays `IDR1` and any store keeps it.
const NOT_REPLAYABLE: HeaderName = HeaderName::from_static("idempotency-not-replayable");

impl Record {
    /// A record of a response with `status`, `headers` and `body`, made by a request with
    /// `fingerprint`.
    pub fn new(
        fingerprint: Fingerprint,
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        Self {
            fingerprint,
            status,
            headers,
            body,
        }
    }

    /// The "completed, not replayable" marker the layer stores when a request with
    /// `fingerprint` completed with `status` but its response could not be kept (a body over
    /// [`max_record_body`](crate::IdempotencyLayer::max_record_body), or trailers): the key's
    /// retries are answered `409` (`idempotency_response_not_replayable`) instead of running
    /// the handler again. No headers or body are kept; [`is_replayable`](Self::is_replayable)
    /// is false.
    pub fn not_replayable(fingerprint: Fingerprint, status: StatusCode) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(NOT_REPLAYABLE, HeaderValue::from_static("1"));
        Self::new(fingerprint, status, headers, Bytes::new())
    }

    /// False for a [`not_replayable`](Self::not_replayable) marker: the request completed
    /// and its response is not kept.
    pub fn is_replayable(&self) -> bool {
        !self.headers.contains_key(NOT_REPLAYABLE)
    }

    /// The fingerprint of the request that made it.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response's headers that are kept.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The response's body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The response: its status, headers and body (without the replay mark, which the layer
    /// adds when it replays). Works for any body that can be made from [`Bytes`].
    pub fn to_response<B: From<Bytes>>(&self) -> Response<B> {
        let mut response = Response::new(B::from(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }

    /// The record as a store keeps it: `IDR1`, the fingerprint (32 bytes), the status (2
    /// bytes), the number of headers (2 bytes), each header as its name's length (2 bytes),
    /// name, value's length (4 bytes) and value, then the body; integers big-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, value)| 6 + name.as_str().len() + value.len())
            .sum();
        let mut out = Vec::with_capacity(40 + headers + self.body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.fingerprint.0);
        out.extend_from_slice(&self.status.as_u16().to_be_bytes());
        let count = u16::try_from(self.headers.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&count.to_be_bytes());
        for (name, value) in self.headers.iter().take(usize::from(count)) {
            let name = name.as_str().as_bytes();
            // Header names and values fit: http limits them far below these widths.
            out.extend_from_slice(&u16::try_from(name.len()).unwrap_or(0).to_be_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(0).to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(&self.body);
        out
    }

    /// A record from what [`to_bytes`](Self::to_bytes) made; anything else is a
    /// [`StoreError`] of kind [`Corrupt`](super::StoreErrorKind::Corrupt), never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<Record, StoreError> {
        let mut input = Reader(bytes);
        if input.take(4)? != MAGIC {
            return Err(StoreError::corrupt(
                "not a record of this layer (no IDR1 mark)",
            ));
        }
        let fingerprint = Fingerprint(input.take(32)?.try_into().map_err(|_| input.short())?);
        let status = StatusCode::from_u16(input.u16()?)
            .map_err(|e| StoreError::corrupt(format!("a record with a bad status: {e}")))?;
        let count = input.u16()?;
        let mut headers = HeaderMap::new();
        for _ in 0..count {
            let len = usize::from(input.u16()?);
            let name = HeaderName::from_bytes(input.take(len)?).map_err(|e| {
                StoreError::corrupt(format!("a record with a bad header name: {e}"))
            })?;
            let len = usize::try_from(input.u32()?).map_err(|_| input.short())?;
            let value = HeaderValue::from_bytes(input.take(len)?).map_err(|e| {
                StoreError::corrupt(format!("a record with a bad header value: {e}"))
            })?;
            headers.append(name, value);
        }
        Ok(Record::new(
            fingerprint,
            status,
            headers,
            Bytes::copy_from_slice(input.0),
        ))
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("fingerprint", &self.fingerprint)
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// Reads a stored record, front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn short(&self) -> StoreError {
        StoreError::corrupt("a record cut short")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(self.short());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, StoreError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

#[cfg(test)]
mod tests {
    use http::header::{CONTENT_TYPE, LOCATION};

    use super::*;
    use crate::idempotency::error::StoreErrorKind;

    fn record() -> Record {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(LOCATION, HeaderValue::from_static("/orders/7"));
        headers.append("x-multi", HeaderValue::from_static("1"));
        headers.append("x-multi", HeaderValue::from_static("2"));
        let uri: Uri = "/orders?x=1".parse().unwrap();
        Record::new(
            Fingerprint::of(&Method::POST, &uri, b"{}"),
            StatusCode::CREATED,
            headers,
            Bytes::from_static(b"{\"id\":7}\0\xff"),
        )
    }

    #[test]
    fn a_not_replayable_marker_survives_the_stored_format() {
        let fingerprint = Fingerprint::of(&Method::POST, &"/a".parse().unwrap(), b"x");
        let marker = Record::not_replayable(fingerprint, StatusCode::CREATED);
        assert!(!marker.is_replayable());
        let read = Record::from_bytes(&marker.to_bytes()).unwrap();
        assert_eq!(read, marker);
        assert!(!read.is_replayable());
        assert_eq!(read.status(), StatusCode::CREATED);
        let plain = Record::new(fingerprint, StatusCode::OK, HeaderMap::new(), Bytes::new());
        assert!(
            Record::from_bytes(&plain.to_bytes())
                .unwrap()
                .is_replayable()
        );
    }

    #[test]
    fn a_record_round_trips() {
        let record = record();
        assert_eq!(Record::from_bytes(&record.to_bytes()).unwrap(), record);
        let empty = Record::new(
            Fingerprint::from_bytes([7; 32]),
            StatusCode::NO_CONTENT,
            HeaderMap::new(),
            Bytes::new(),
        );
        assert_eq!(Record::from_bytes(&empty.to_bytes()).unwrap(), empty);
        let response: Response<Bytes> = record.to_response();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers().get_all("x-multi").iter().count(), 2);
        assert_eq!(response.body(), record.body());
    }

    #[test]
    fn fingerprints_tell_method_path_query_and_body_apart() {
        let of = |m: &Method, u: &str, b: &[u8]| Fingerprint::of(m, &u.parse().unwrap(), b);
        let base = of(&Method::POST, "/a?x=1", b"body");
        assert_eq!(base, of(&Method::POST, "http://h/a?x=1", b"body"));
        for other in [
            of(&Method::PUT, "/a?x=1", b"body"),
            of(&Method::POST, "/b?x=1", b"body"),
            of(&Method::POST, "/a?x=2", b"body"),
            of(&Method::POST, "/a?x=1", b"body2"),
            of(&Method::POST, "/a", b"?x=1body"),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base.to_string().len(), 64);
    }

    #[test]
    fn every_cut_or_damaged_record_is_an_error_not_a_panic() {
        let bytes = record().to_bytes();
        let body_starts = bytes.len() - record().body().len();
        for end in 0..body_starts {
            let err = Record::from_bytes(&bytes[..end]).unwrap_err();
            assert_eq!(err.kind(), StoreErrorKind::Corrupt, "cut at {end}");
        }
        for at in 0..body_starts {
            for byte in [0, 0xff, b'\n'] {
                let mut damaged = bytes.clone();
                damaged[at] = byte;
                let _ = Record::from_bytes(&damaged);
            }
        }
    }
}
