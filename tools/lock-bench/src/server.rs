//! The server's product and version.

use redis::aio::MultiplexedConnection;

/// The server's versions from `INFO server`: Valkey reports `redis_version:7.2.4` whatever its
/// own version, which is `valkey_version`.
#[derive(Debug)]
pub(crate) struct ServerVersion {
    pub(crate) redis: String,
    pub(crate) valkey: Option<String>,
}

impl ServerVersion {
    pub(crate) async fn read(admin: &mut MultiplexedConnection) -> Self {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(admin)
            .await
            .unwrap_or_default();
        Self::parse(&info)
    }

    fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        ServerVersion {
            redis: field("redis_version").unwrap_or_else(|| "?".to_owned()),
            valkey: field("valkey_version"),
        }
    }

    /// `redis` or `valkey`.
    pub(crate) fn product(&self) -> &'static str {
        if self.valkey.is_some() {
            "valkey"
        } else {
            "redis"
        }
    }

    /// The product's own version.
    pub(crate) fn version(&self) -> &str {
        self.valkey.as_deref().unwrap_or(&self.redis)
    }

    /// `redis 7.0.15`, or `valkey 9.1.2 (redis_version 7.2.4)`.
    pub(crate) fn describe(&self) -> String {
        match &self.valkey {
            Some(v) => format!("valkey {v} (redis_version {})", self.redis),
            None => format!("redis {}", self.redis),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_version_prefers_valkey_version() {
        let redis =
            ServerVersion::parse("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n");
        assert_eq!(redis.describe(), "redis 7.0.15");
        assert_eq!((redis.product(), redis.version()), ("redis", "7.0.15"));
        let valkey = ServerVersion::parse(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
        );
        assert_eq!(valkey.describe(), "valkey 9.1.2 (redis_version 7.2.4)");
        assert_eq!((valkey.product(), valkey.version()), ("valkey", "9.1.2"));
        assert_eq!(ServerVersion::parse("").describe(), "redis ?");
    }
}
