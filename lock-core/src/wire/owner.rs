//! [`Owner`]: an owner id, `<client id>:<holder>`, as every call writes it.

/// An owner id, `<client id>:<holder>`, that writes itself into a command without a string
/// of its own.
#[derive(Clone, Copy)]
pub(crate) struct Owner<'a> {
    pub(crate) client: &'a str,
    pub(crate) holder: u64,
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
