//! `#[distributed_lock]` against a real redis-server: exclusion, re-entry, release on every
//! way out of the body, `on_lost`, and the shapes of function it accepts.

use std::collections::HashMap;
use std::fmt::Display;
use std::num::ParseIntError;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{HeldLock, LockClient, LockError, current_lock, distributed_lock};
use lock_tests::fixtures::{assert_clean, client, client_with_lease, eventually, lock_keys};
use lock_tests::{FaultProxy, RedisServer};
use tokio::sync::oneshot;

/// The Redis key of the mutex `name` under the default prefix.
fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// An application error type, as users write them: lock errors convert into it.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Rejected(&'static str),
    Parse(ParseIntError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<ParseIntError> for AppError {
    fn from(e: ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

// ---------------------------------------------------------------------------------------------
// Mutual exclusion

#[derive(Default)]
struct Counter {
    value: AtomicU64,
    inside: AtomicUsize,
    max_inside: AtomicUsize,
}

/// A read-sleep-write with no atomicity of its own: without mutual exclusion, increments are
/// lost and `max_inside` goes above 1.
#[distributed_lock(key = "counter:{name}", client = client, wait = "30s")]
async fn increment(
    client: &LockClient,
    name: &str,
    counter: &Counter,
    pause: Duration,
) -> Result<(), LockError> {
    let now = counter.inside.fetch_add(1, Ordering::SeqCst) + 1;
    counter.max_inside.fetch_max(now, Ordering::SeqCst);
    let read = counter.value.load(Ordering::SeqCst);
    tokio::time::sleep(pause).await;
    counter.value.store(read + 1, Ordering::SeqCst);
    counter.inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_calls_exclude_each_other_across_clients() {
    let server = RedisServer::start();
    let clients = [client(&server.url()).await, client(&server.url()).await];
    let counter = Arc::new(Counter::default());
    const TASKS: u64 = 8;
    const CALLS: u64 = 4;
    let mut tasks = Vec::new();
    for c in &clients {
        for t in 0..TASKS {
            let (c, counter) = (c.clone(), counter.clone());
            // Spawning also proves the expanded future is `Send`.
            tasks.push(tokio::spawn(async move {
                for i in 0..CALLS {
                    let pause = Duration::from_micros(300 + (t * 7 + i) % 5 * 100);
                    increment(&c, "shared", &counter, pause).await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(counter.value.load(Ordering::SeqCst), 2 * TASKS * CALLS);
    assert_eq!(counter.max_inside.load(Ordering::SeqCst), 1);
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Re-entry

/// Returns (its own token, the nested call's token, the hold count the nested call saw).
#[distributed_lock(key = "account:{id}", client = client, wait = "5s", held = lock)]
async fn transfer(client: &LockClient, id: u64) -> Result<(u64, u64, u32), LockError> {
    let current = current_lock(&format!("account:{id}")).expect("held by this call");
    assert_eq!(current.fencing_token(), lock.fencing_token());
    // Same task, same client, same key: re-enters instead of waiting (which would time out).
    let (nested_token, hold_count) = audit(client, id).await?;
    assert!(
        lock.is_held(),
        "the nested call's release left the outer hold in place"
    );
    Ok((lock.fencing_token().unwrap(), nested_token, hold_count))
}

#[distributed_lock(key = "account:{id}", client = client, wait = "1s", held = lock)]
async fn audit(client: &LockClient, id: u64) -> Result<(u64, u32), LockError> {
    let info = client.mutex(format!("account:{id}")).info().await?;
    Ok((lock.fencing_token().unwrap(), info.hold_count))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_with_the_same_key_reenters() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let (token, nested_token, hold_count) = transfer(&c, 7).await.unwrap();
    assert_eq!(token, nested_token);
    assert_eq!(hold_count, 2);
    // The release is awaited before the call returns.
    assert!(lock_keys(&server).is_empty());
    // A later call is a fresh acquisition with a newer token.
    let (later, _, _) = transfer(&c, 7).await.unwrap();
    assert!(later > token);
    assert_clean(&server).await;
}

#[distributed_lock(key = "job:{id}", client = client, held = lock)]
async fn spawns_a_step(client: &LockClient, id: u64) -> Result<Result<u64, LockError>, LockError> {
    let c = client.clone();
    let spawned = tokio::spawn(async move {
        assert!(current_lock(&format!("job:{id}")).is_none());
        job_step(&c, id).await
    })
    .await
    .unwrap();
    assert!(lock.is_held());
    Ok(spawned)
}

#[distributed_lock(key = "job:{id}", client = client, wait = Duration::from_millis(300))]
async fn job_step(client: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_does_not_inherit_the_lock() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let spawned = spawns_a_step(&c, 3).await.unwrap();
    assert!(
        matches!(&spawned, Err(LockError::Timeout { name, .. }) if name == "job:3"),
        "{spawned:?}"
    );
    // Once the outer call is done, the step takes the lock.
    assert_eq!(job_step(&c, 3).await.unwrap(), 3);
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Release on every way out of the body

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Normal,
    EarlyReturn,
    EarlyError,
    QuestionMark,
}

struct Order {
    id: u64,
    qty: &'static str,
}

#[distributed_lock(key = "order:{order.id}", client = client, held = lock)]
async fn checkout(
    client: &LockClient,
    order: &Order,
    exit: Exit,
    server: &RedisServer,
) -> Result<u32, AppError> {
    assert!(lock.is_held());
    assert_eq!(lock_keys(server), vec![lock_key("order:1")]);
    if exit == Exit::EarlyReturn {
        return Ok(0);
    }
    if exit == Exit::EarlyError {
        return Err(AppError::Rejected("sold out"));
    }
    let qty: u32 = order.qty.parse()?;
    tokio::task::yield_now().await;
    Ok(qty)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_errors_and_question_marks_release_the_lock() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let other = client(&server.url()).await;
    let good = Order { id: 1, qty: "5" };
    let bad = Order { id: 1, qty: "five" };
    let cases = [
        (&good, Exit::Normal),
        (&good, Exit::EarlyReturn),
        (&good, Exit::EarlyError),
        (&bad, Exit::QuestionMark),
    ];
    for (order, exit) in cases {
        let result = checkout(&c, order, exit, &server).await;
        match exit {
            Exit::Normal => assert_eq!(result.unwrap(), 5),
            Exit::EarlyReturn => assert_eq!(result.unwrap(), 0),
            Exit::EarlyError => assert!(matches!(result, Err(AppError::Rejected("sold out")))),
            Exit::QuestionMark => assert!(
                matches!(&result, Err(AppError::Parse(e)) if e.to_string().contains("invalid digit")),
                "{result:?}"
            ),
        }
        // Released, and confirmed, before the call returned.
        assert!(lock_keys(&server).is_empty(), "{exit:?} left the lock held");
        let guard = other.try_lock("order:1").await.unwrap();
        assert!(
            guard.is_some(),
            "{exit:?}: another client cannot take the lock"
        );
        guard.unwrap().unlock().await.unwrap();
    }
    assert_clean(&server).await;
}

#[distributed_lock(key = "confirmed", client = client)]
async fn quick(client: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_is_confirmed_before_the_call_returns() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let c = client(&proxy.url()).await;
    proxy.delay(Duration::from_millis(100));
    quick(&c).await.unwrap();
    // Checked on the server directly: a release left to the background would still be
    // on its way through the slow proxy.
    assert!(lock_keys(&server).is_empty());
    proxy.pass();
    assert_clean(&server).await;
}

#[distributed_lock(key = "fragile:{id}", client = client)]
async fn panics(client: &LockClient, id: u64) -> Result<(), LockError> {
    tokio::task::yield_now().await;
    if id > 0 {
        panic!("boom inside the lock");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_body_releases_the_lock() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let other = client(&server.url()).await;
    let task = tokio::spawn({
        let c = c.clone();
        async move { panics(&c, 1).await }
    });
    assert!(task.await.unwrap_err().is_panic());
    eventually("the panicked call's lock is released", || {
        lock_keys(&server).is_empty()
    })
    .await;
    let guard = other
        .lock("fragile:1")
        .wait(Duration::from_secs(2))
        .await
        .unwrap();
    guard.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[distributed_lock(key = "slow:{id}", client = client)]
async fn slow(client: &LockClient, id: u64, started: oneshot::Sender<()>) -> Result<(), LockError> {
    let _ = started.send(());
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_releases_the_lock() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let (started, is_started) = oneshot::channel();
    let call = tokio::spawn({
        let c = c.clone();
        async move { slow(&c, 1, started).await }
    });
    is_started.await.unwrap();
    assert_eq!(lock_keys(&server), vec![lock_key("slow:1")]);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    eventually("the cancelled call's lock is released", || {
        lock_keys(&server).is_empty()
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// on_lost

/// Sets its flag when dropped: shows that the body future was dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Default `on_lost` ("abort").
#[distributed_lock(key = "long:{id}", client = client)]
async fn long_job(
    client: &LockClient,
    id: u64,
    started: oneshot::Sender<()>,
    dropped: Arc<AtomicBool>,
) -> Result<&'static str, AppError> {
    let _flag = SetOnDrop(dropped);
    let _ = started.send(());
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok("finished")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_aborts_the_body_by_default() {
    let server = RedisServer::start();
    // A short watchdog lease, so a renewal finds the deleted key within ~100 ms.
    let c = client_with_lease(&server.url(), Duration::from_millis(300)).await;
    let (started, is_started) = oneshot::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let call = tokio::spawn({
        let (c, dropped) = (c.clone(), dropped.clone());
        async move { long_job(&c, 1, started, dropped).await }
    });
    is_started.await.unwrap();
    assert_eq!(server.cmd(&["DEL", &lock_key("long:1")]), "1");
    let result = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the body was not aborted")
        .unwrap();
    assert!(
        matches!(&result, Err(AppError::Lock(LockError::Lost { name })) if name == "long:1"),
        "{result:?}"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the body future was not dropped"
    );
    assert_clean(&server).await;
}

#[distributed_lock(key = "migrate:{id}", client = client, on_lost = "continue", held = lock)]
async fn migrate(
    client: &LockClient,
    id: u64,
    started: oneshot::Sender<()>,
) -> Result<bool, LockError> {
    let _ = started.send(());
    lock.lost().await;
    // Still running after the loss: report what the body sees.
    Ok(lock.is_held())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_continue_lets_the_body_finish() {
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), Duration::from_millis(300)).await;
    let (started, is_started) = oneshot::channel();
    let call = tokio::spawn({
        let c = c.clone();
        async move { migrate(&c, 1, started).await }
    });
    is_started.await.unwrap();
    assert_eq!(server.cmd(&["DEL", &lock_key("migrate:1")]), "1");
    let held_at_the_end = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the loss was never signalled")
        .unwrap()
        .unwrap();
    assert!(!held_at_the_end);
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Leases, durations and key expressions

const LEASE: Duration = Duration::from_secs(2);

/// A fixed lease from a `Duration` expression, and a key that is an expression.
#[distributed_lock(key = name.to_uppercase(), client = client, lease = LEASE, wait = Duration::from_secs(1))]
async fn leased(client: &LockClient, name: &str, server: &RedisServer) -> Result<i64, LockError> {
    Ok(server
        .cmd(&["PTTL", &lock_key(&name.to_uppercase())])
        .parse()
        .unwrap())
}

/// A fixed lease from a string.
#[distributed_lock(key = "short-lease", client = client, lease = "1500ms")]
async fn short_lease(client: &LockClient, server: &RedisServer) -> Result<i64, LockError> {
    Ok(server
        .cmd(&["PTTL", &lock_key("short-lease")])
        .parse()
        .unwrap())
}

/// The watchdog's lease (30 s by default).
#[distributed_lock(key = "watched", client = client)]
async fn watched(client: &LockClient, server: &RedisServer) -> Result<i64, LockError> {
    Ok(server.cmd(&["PTTL", &lock_key("watched")]).parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_and_key_arguments_reach_redis() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let ttl = leased(&c, "report", &server).await.unwrap();
    assert!((1..=2_000).contains(&ttl), "{ttl}");
    let ttl = short_lease(&c, &server).await.unwrap();
    assert!((1..=1_500).contains(&ttl), "{ttl}");
    let ttl = watched(&c, &server).await.unwrap();
    assert!(ttl > 2_000, "{ttl}");
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// The global client

#[distributed_lock(key = "global:{id}", wait = "2s", held = lock)]
async fn with_global_client(id: u32) -> Result<String, LockError> {
    Ok(lock.name().to_owned())
}

/// The only test of this binary that installs the process-wide client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_argument_the_global_client_is_used() {
    let server = RedisServer::start();
    assert!(matches!(
        with_global_client(1).await,
        Err(LockError::NoClient)
    ));
    lock_core::install_global(client(&server.url()).await).expect("installed once");
    assert_eq!(with_global_client(1).await.unwrap(), "global:1");
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Methods, generics, trait impls, `impl Trait`

struct Inventory {
    locks: LockClient,
    name: String,
    stock: std::sync::Mutex<HashMap<String, u32>>,
    restocked: u32,
}

impl Inventory {
    /// `&self`, with the client taken from `self`.
    #[distributed_lock(key = "stock:{sku}", client = self.locks, wait = "2s", held = lock)]
    async fn reserve(&self, sku: &str, qty: u32) -> Result<u64, AppError> {
        assert!(current_lock(&format!("stock:{sku}")).is_some());
        let mut stock = self.stock.lock().unwrap();
        let left = stock
            .get_mut(sku)
            .ok_or(AppError::Rejected("unknown sku"))?;
        *left = left
            .checked_sub(qty)
            .ok_or(AppError::Rejected("sold out"))?;
        Ok(lock.fencing_token().unwrap())
    }

    /// `&mut self`.
    #[distributed_lock(key = "restock:{self.name}", client = self.locks)]
    async fn restock(&mut self, qty: u32) -> Result<u32, AppError> {
        assert!(current_lock(&format!("restock:{}", self.name)).is_some());
        self.restocked += qty;
        Ok(self.restocked)
    }

    /// `self: Arc<Self>`: the client is borrowed from `self`, which the body then moves.
    #[distributed_lock(key = "shared:{self.name}", client = self.locks, lease = "5s")]
    async fn shared(self: Arc<Self>) -> Result<Arc<Self>, AppError> {
        assert!(current_lock(&format!("shared:{}", self.name)).is_some());
        Ok(self)
    }

    /// `self` by value.
    #[distributed_lock(key = "close:{self.name}", client = self.locks.clone())]
    async fn close(self) -> Result<String, AppError> {
        assert!(current_lock(&format!("close:{}", self.name)).is_some());
        Ok(self.name)
    }
}

/// Generic, with a where clause and an `impl Trait` inside the `Result`.
#[distributed_lock(key = "label:{item}:{extra.0}", client = client)]
async fn label<T, U>(
    client: &LockClient,
    item: T,
    extra: (U, u8),
) -> Result<impl Display, LockError>
where
    T: Display + Send,
    U: Display + Send,
{
    let held = current_lock(&format!("label:{item}:{}", extra.0)).is_some();
    Ok(format!("{item}/{held}"))
}

trait Store {
    async fn put(&self, key: &str, value: u32) -> Result<HeldLock, AppError>;
}

struct MemoryStore {
    locks: LockClient,
    data: std::sync::Mutex<HashMap<String, u32>>,
}

impl Store for MemoryStore {
    #[distributed_lock(key = "put:{key}", client = &self.locks, held = lock)]
    async fn put(&self, key: &str, value: u32) -> Result<HeldLock, AppError> {
        self.data.lock().unwrap().insert(key.to_owned(), value);
        Ok(lock)
    }
}

async fn put_through<S: Store>(store: &S, key: &str) -> Result<HeldLock, AppError> {
    store.put(key, 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_generics_and_trait_impls_lock() {
    let server = RedisServer::start();
    let locks = client(&server.url()).await;
    let mut inventory = Inventory {
        locks: locks.clone(),
        name: "main".to_owned(),
        stock: std::sync::Mutex::new(HashMap::from([("sku-1".to_owned(), 3)])),
        restocked: 0,
    };

    let first = inventory.reserve("sku-1", 2).await.unwrap();
    let second = inventory.reserve("sku-1", 1).await.unwrap();
    assert!(second > first, "each call is a fresh acquisition");
    assert!(matches!(
        inventory.reserve("sku-1", 1).await,
        Err(AppError::Rejected("sold out"))
    ));
    assert_eq!(inventory.restock(5).await.unwrap(), 5);
    let inventory = Arc::new(inventory).shared().await.unwrap();
    let inventory = Arc::into_inner(inventory).unwrap();
    assert_eq!(inventory.close().await.unwrap(), "main");

    assert_eq!(
        label(&locks, 42, ("x", 1)).await.unwrap().to_string(),
        "42/true"
    );

    let store = MemoryStore {
        locks: locks.clone(),
        data: std::sync::Mutex::new(HashMap::new()),
    };
    let held = put_through(&store, "a").await.unwrap();
    assert_eq!(held.name(), "put:a");
    assert!(!held.is_held(), "released when the call returned");
    assert_eq!(store.data.lock().unwrap().get("a"), Some(&1));

    assert!(lock_keys(&server).is_empty());
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Fair locks

/// Records its turn; the first caller holds the lock until `gate` opens.
#[distributed_lock(key = "turn:{queue}", client = client, wait = "30s", kind = "fair")]
async fn take_turn(
    client: LockClient,
    queue: String,
    id: usize,
    order: Arc<std::sync::Mutex<Vec<usize>>>,
    gate: Option<oneshot::Receiver<()>>,
) -> Result<(), LockError> {
    order.lock().unwrap().push(id);
    if let Some(gate) = gate {
        let _ = gate.await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_calls_get_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let clients = [client(&server.url()).await, client(&server.url()).await];
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let queue_key = format!("{}:fair:queue", lock_key("turn:q"));
    let queued = || -> u64 { server.cmd(&["ZCARD", &queue_key]).parse().unwrap() };

    let (open, gate) = oneshot::channel();
    let first = tokio::spawn(take_turn(
        clients[0].clone(),
        "q".into(),
        0,
        order.clone(),
        Some(gate),
    ));
    eventually("the first call holds the fair lock", || {
        order.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(
        server.cmd(&["EXISTS", &format!("{}:fair", lock_key("turn:q"))]),
        "1"
    );
    // Four more calls, alternating clients, each queued before the next arrives.
    let mut calls = Vec::new();
    for id in 1..=4 {
        let before = queued();
        calls.push(tokio::spawn(take_turn(
            clients[id % 2].clone(),
            "q".into(),
            id,
            order.clone(),
            None,
        )));
        eventually("the call is queued", || queued() > before).await;
    }
    open.send(()).unwrap();
    first.await.unwrap().unwrap();
    for call in calls {
        tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Read-write locks and permits

/// Readers and writers of one catalog, and every conflict seen between them.
#[derive(Default)]
struct Catalog {
    readers: AtomicUsize,
    writers: AtomicUsize,
    conflicts: AtomicUsize,
    most_readers: AtomicUsize,
}

/// Waits (up to 10 s) until every party of `together` is inside too; an error otherwise.
async fn meet(together: Option<&tokio::sync::Barrier>) -> Result<(), LockError> {
    if let Some(barrier) = together {
        tokio::time::timeout(Duration::from_secs(10), barrier.wait())
            .await
            .map_err(|_| LockError::NoClient)?;
    }
    Ok(())
}

#[distributed_lock(key = "catalog", client = client, wait = "30s", kind = "read", held = lock)]
async fn browse(
    client: &LockClient,
    catalog: &Catalog,
    together: Option<&tokio::sync::Barrier>,
) -> Result<Option<u64>, LockError> {
    let now = catalog.readers.fetch_add(1, Ordering::SeqCst) + 1;
    catalog.most_readers.fetch_max(now, Ordering::SeqCst);
    if catalog.writers.load(Ordering::SeqCst) > 0 {
        catalog.conflicts.fetch_add(1, Ordering::SeqCst);
    }
    meet(together).await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    catalog.readers.fetch_sub(1, Ordering::SeqCst);
    Ok(lock.fencing_token())
}

#[distributed_lock(key = "catalog", client = client, wait = "30s", kind = "write", held = lock)]
async fn restock(client: &LockClient, catalog: &Catalog) -> Result<Option<u64>, LockError> {
    if catalog.writers.fetch_add(1, Ordering::SeqCst) > 0
        || catalog.readers.load(Ordering::SeqCst) > 0
    {
        catalog.conflicts.fetch_add(1, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    catalog.writers.fetch_sub(1, Ordering::SeqCst);
    Ok(lock.fencing_token())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_kinds_share_readers_and_isolate_writers() {
    let server = RedisServer::start();
    let clients = [client(&server.url()).await, client(&server.url()).await];
    let catalog = Arc::new(Catalog::default());
    // Two readers, one per client, are inside together (or neither returns).
    let together = Arc::new(tokio::sync::Barrier::new(2));
    let both = (0..2).map(|i| {
        let (c, catalog, together) = (clients[i].clone(), catalog.clone(), together.clone());
        tokio::spawn(async move { browse(&c, &catalog, Some(&together)).await })
    });
    for call in futures_util::future::join_all(both).await {
        assert_eq!(
            call.unwrap().unwrap(),
            None,
            "readers have no fencing token"
        );
    }
    // Readers and writers mixed: a writer is always alone.
    let calls = (0..12).map(|i| {
        let (c, catalog) = (clients[i % 2].clone(), catalog.clone());
        tokio::spawn(async move {
            if i % 4 == 0 {
                restock(&c, &catalog).await.map(|token| (false, token))
            } else {
                browse(&c, &catalog, None).await.map(|token| (true, token))
            }
        })
    });
    for call in futures_util::future::join_all(calls).await {
        let (read, token) = call.unwrap().unwrap();
        assert_eq!(
            token.is_some(),
            !read,
            "writers are fenced, readers are not"
        );
    }
    assert_eq!(
        catalog.conflicts.load(Ordering::SeqCst),
        0,
        "a writer overlapped"
    );
    assert!(
        catalog.most_readers.load(Ordering::SeqCst) > 1,
        "readers never shared the lock"
    );
    assert_clean(&server).await;
}

#[distributed_lock(key = "render:{queue}", client = client, wait = "30s", permits = 3)]
async fn render(
    client: &LockClient,
    queue: &str,
    running: &Counter,
    together: Option<&tokio::sync::Barrier>,
) -> Result<(), LockError> {
    let now = running.inside.fetch_add(1, Ordering::SeqCst) + 1;
    running.max_inside.fetch_max(now, Ordering::SeqCst);
    meet(together).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    running.inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_let_n_calls_run_at_once() {
    let server = RedisServer::start();
    let clients = [client(&server.url()).await, client(&server.url()).await];
    let running = Arc::new(Counter::default());
    // Three calls are inside together (or none returns): it is not a mutex.
    let together = Arc::new(tokio::sync::Barrier::new(3));
    let three = (0..3).map(|i| {
        let (c, running, together) = (clients[i % 2].clone(), running.clone(), together.clone());
        tokio::spawn(async move { render(&c, "q", &running, Some(&together)).await })
    });
    for call in futures_util::future::join_all(three).await {
        call.unwrap().unwrap();
    }
    // Twelve at once: never more than three inside.
    let calls = (0..12).map(|i| {
        let (c, running) = (clients[i % 2].clone(), running.clone());
        tokio::spawn(async move { render(&c, "q", &running, None).await })
    });
    for call in futures_util::future::join_all(calls).await {
        call.unwrap().unwrap();
    }
    let most = running.max_inside.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} calls held one of 3 permits at once");
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Once per period: on_busy = "skip", hold_at_least

#[distributed_lock(
    key = "{period}",
    client = client,
    on_busy = "skip",
    hold_at_least = "1500ms",
    held = lock
)]
async fn draw(
    client: &LockClient,
    period: &str,
    runs: &AtomicUsize,
) -> Result<Option<u64>, AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(lock.fencing_token())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_once_per_period_across_instances() {
    let server = RedisServer::start();
    let instances = [
        client(&server.url()).await,
        client(&server.url()).await,
        client(&server.url()).await,
    ];
    let runs = AtomicUsize::new(0);
    // Every instance fires at once: one draws, the others skip.
    let (a, b, c) = tokio::join!(
        draw(&instances[0], "lottery:p1", &runs),
        draw(&instances[1], "lottery:p1", &runs),
        draw(&instances[2], "lottery:p1", &runs),
    );
    let drawn: Vec<u64> = [a, b, c].into_iter().filter_map(|r| r.unwrap()).collect();
    assert_eq!(drawn.len(), 1, "{drawn:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A timer that fires after the draw finished: still skipped (the minimum hold).
    assert_eq!(
        draw(&instances[1], "lottery:p1", &runs).await.unwrap(),
        None
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The next period draws at once, with its own lock.
    assert!(
        draw(&instances[2], "lottery:p2", &runs)
            .await
            .unwrap()
            .is_some()
    );
    // Once the minimum hold is over the first period's name is free again.
    let again = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(token) = draw(&instances[0], "lottery:p1", &runs).await.unwrap() {
                break token;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the period's lock expires after its minimum hold");
    assert!(again > drawn[0]);
    server.cmd(&["DEL", &lock_key("lottery:p1"), &lock_key("lottery:p2")]);
    assert_clean(&server).await;
}
