//! The floor: the minimal correct lock, with no reentrancy, fencing, watchdog or waiting.

use std::sync::LazyLock;

use redis::aio::MultiplexedConnection;

static CAD: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

#[derive(Clone)]
pub(crate) struct Floor {
    con: MultiplexedConnection,
}

impl Floor {
    pub(crate) async fn connect(url: &str) -> Self {
        let con = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        Self { con }
    }

    /// One uncontended acquire + release.
    pub(crate) async fn cycle(mut self, name: &str) {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let ok: Option<String> = redis::cmd("SET")
            .arg(name)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut self.con)
            .await
            .unwrap();
        assert!(ok.is_some(), "floor: {name} was taken");
        let deleted: i64 = CAD
            .key(name)
            .arg(&token)
            .invoke_async(&mut self.con)
            .await
            .unwrap();
        assert_eq!(deleted, 1);
    }
}
