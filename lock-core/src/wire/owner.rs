//! [`Owner`]: an owner id, `<client id>:<holder>`, as every call writes it, and
//! [`OwnerId`], the same kept by a call to read its reply.

use std::sync::Arc;

/// An owner id, `<client id>:<holder>`, that writes itself into a command without a string
/// of its own.
#[derive(Clone, Copy)]
pub(crate) struct Owner<'a> {
    pub(crate) client: &'a Arc<str>,
    pub(crate) holder: u64,
}

impl Owner<'_> {
    /// The same owner id, kept (the client id shared, no string of its own).
    pub(crate) fn id(&self) -> OwnerId {
        OwnerId {
            client: self.client.clone(),
            holder: self.holder,
        }
    }
}

/// An owner id kept by a call, to write it and to recognise it in a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnerId {
    client: Arc<str>,
    holder: u64,
}

impl OwnerId {
    /// The owner id `<client>:<holder>`.
    #[cfg(test)]
    pub(crate) fn new(client: &str, holder: u64) -> Self {
        Self {
            client: client.into(),
            holder,
        }
    }

    /// Whether `bytes` spell this owner id.
    pub(crate) fn is(&self, bytes: &[u8]) -> bool {
        bytes
            .strip_prefix(self.client.as_bytes())
            .and_then(|rest| rest.strip_prefix(b":"))
            .is_some_and(|rest| rest == crate::util::decimal(self.holder).as_bytes())
    }
}

impl redis::ToRedisArgs for OwnerId {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        Owner {
            client: &self.client,
            holder: self.holder,
        }
        .write_redis_args(out);
    }
}

impl std::fmt::Display for Owner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.client, self.holder)
    }
}

impl redis::ToRedisArgs for Owner<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        let _ = arg.write_all(self.client.as_bytes());
        let _ = arg.write_all(b":");
        let _ = arg.write_all(crate::util::decimal(self.holder).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_id_recognises_its_own_spelling_only() {
        let id = OwnerId::new("c0ffee", 1);
        assert!(id.is(b"c0ffee:1"));
        for other in [
            &b"c0ffee:10"[..],
            b"c0ffee:",
            b"c0ffee1",
            b"c0ffe:1",
            b"c0ffee:1:",
            b"",
            b"|1|2|3|0",
        ] {
            assert!(!id.is(other), "{:?}", String::from_utf8_lossy(other));
        }
        let mut written = redis::Cmd::new();
        written.arg(&id);
        let first = written.args_iter().next();
        assert!(matches!(first, Some(redis::Arg::Simple(bytes)) if id.is(bytes)));
    }
}
