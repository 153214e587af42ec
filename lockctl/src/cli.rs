//! The command line: the connection options, the subcommands and their options (clap derive).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::kind::Kind;

/// The exit codes, as `--help` shows them (the crate docs say the same).
pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  0  done: status found NAME held; list or watch ran; force-unlock freed something
  1  nothing held: status found NAME free or absent; force-unlock found nothing to free
  2  usage: a bad option, URL, file, name, prefix or pattern
  3  connection: refused, unreachable or not answering, a password required and not
     given, a user or password refused, TLS failed, no primary known to the sentinels
  4  failed: Redis refused or failed a command (an ACL permission, a value lock-core did
     not write), watch cannot watch this deployment, or the output could not be written
  5  force-unlock was not confirmed: nothing was changed";

/// `lockctl`: look at and operate lock-core's distributed locks on Redis.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    version,
    about = "Look at and operate lock-core's distributed locks on Redis",
    after_help = EXIT_CODES
)]
pub(crate) struct Cli {
    /// Where the locks live.
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,

    /// The key prefix of the applications' lock clients (their `key_prefix`).
    #[arg(
        long,
        short = 'p',
        global = true,
        default_value = "lock:",
        env = "LOCKCTL_PREFIX"
    )]
    pub(crate) prefix: String,

    /// Print JSON: one document (watch: one object per line).
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How to reach the deployment.
#[derive(Debug, Args)]
pub(crate) struct ConnectionArgs {
    /// Redis URL: redis://host:port, with user:password@ before the host and /db after it
    /// when needed; rediss:// for TLS. Give several (repeated or comma-separated) for the seed
    /// nodes of a Cluster, or the sentinels with --sentinel-master. Without --url: the
    /// LOCKCTL_URL environment variable, else REDIS_URL, else redis://127.0.0.1:6379, in that
    /// order (every message names the server used and where its URL came from).
    #[arg(long, short = 'u', global = true, value_delimiter = ',')]
    pub(crate) url: Vec<String>,

    /// The URLs are Redis Cluster nodes. Detected without it when one URL is given (INFO
    /// cluster); several URLs without --sentinel-master are always Cluster seeds.
    #[arg(long, global = true, conflicts_with = "sentinel_master")]
    pub(crate) cluster: bool,

    /// The URLs are sentinels: use the primary they name for this service (master name).
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) sentinel_master: Option<String>,

    /// With --sentinel-master: the primary's user, password, database and scheme, as a URL
    /// whose host and port are replaced by the address the sentinels name.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        requires = "sentinel_master",
        default_value = "redis://primary/"
    )]
    pub(crate) sentinel_primary_url: String,

    /// Trust this CA (PEM) for rediss:// instead of the platform's trust store.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) on rediss:// connections (mutual TLS).
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Accept any server certificate on rediss:// (development only).
    #[arg(long, global = true)]
    pub(crate) tls_insecure: bool,

    /// How long to wait for a connection, and for each answer.
    #[arg(long, global = true, default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
}

/// The variables `--url` falls back to, in order.
pub(crate) const URL_VARIABLES: [&str; 2] = ["LOCKCTL_URL", "REDIS_URL"];

/// The URL when neither `--url` nor a variable gives one.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

impl ConnectionArgs {
    /// The URLs to use and where they came from (`--url`, `LOCKCTL_URL`, `REDIS_URL` or
    /// `the default`), `var` reading the environment: `--url` first, then the first variable
    /// that is set and not empty (comma separated), then [`DEFAULT_URL`].
    pub(crate) fn urls(&self, var: impl Fn(&str) -> Option<String>) -> (Vec<String>, &'static str) {
        if !self.url.is_empty() {
            return (self.url.clone(), "--url");
        }
        for name in URL_VARIABLES {
            if let Some(value) = var(name).filter(|v| !v.trim().is_empty()) {
                let urls = value.split(',').map(|u| u.trim().to_owned()).collect();
                return (urls, name);
            }
        }
        (vec![DEFAULT_URL.to_owned()], "the default")
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every kind of lock under NAME: held or free, owner, holds, remaining lease, fencing
    /// token, waiters, the owner's description; and the record kept next to it (an
    /// idempotency layer's stored response: its size and token; with --idempotency-key, the
    /// request's state, in progress or completed, the stored status code, the record's age
    /// and time to live), its rate limit and its last guarded update (its token and values).
    /// Exit 0 when held, 1 when not.
    #[command(after_help = EXIT_CODES)]
    Status(StatusArgs),
    /// Held locks under the prefix, sorted by remaining lease (SCAN on every primary).
    #[command(after_help = EXIT_CODES)]
    List(ListArgs),
    /// Scheduled jobs (lock-core's scheduled module) under the prefix, from their records:
    /// the last period run, the instance, the outcome, the duration and the next period.
    #[command(after_help = EXIT_CODES)]
    Jobs(JobsArgs),
    /// Free NAME whoever holds it, the way lock-core's force_unlock() does: fencing counters
    /// stay, waiters are woken. Asks first unless --yes.
    #[command(after_help = EXIT_CODES)]
    ForceUnlock(ForceUnlockArgs),
    /// Print acquisitions and releases as they happen, through keyspace notifications when
    /// the server sends them, else through the release channels.
    #[command(after_help = EXIT_CODES)]
    Watch(WatchArgs),
    /// Values written with lock-core's fenced writes (fenced::set, claim / write_claimed,
    /// the fenced counters), each with its fence: the token of the holder that wrote or
    /// claimed it last. Exit 0 when every KEY holds one, 1 when some does not.
    #[command(after_help = EXIT_CODES)]
    Fenced(FencedArgs),
}

/// `fenced KEY...`.
#[derive(Debug, Args)]
pub(crate) struct FencedArgs {
    /// The application's keys, whole (no prefix is added).
    #[arg(required = true)]
    pub(crate) keys: Vec<String>,
}

/// `status NAME`, or `status --idempotency-key KEY`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock's name, as the application gives it (without the prefix); or give
    /// --idempotency-key instead.
    #[arg(
        required_unless_present = "idempotency_key",
        conflicts_with = "idempotency_key"
    )]
    pub(crate) name: Option<String>,
    /// Look at an IdempotencyLayer's key instead of NAME: its lock (held while its first
    /// request runs) and its stored response, under the name the layer gives it: PREFIX +
    /// SCOPE + ":" + KEY (`idem::KEY` for an unscoped layer; hashed when that cannot be a lock
    /// name, as the layer does). KEY as the client sent it, without the quotes of its
    /// structured-field form.
    #[arg(long, value_name = "KEY")]
    pub(crate) idempotency_key: Option<String>,
    /// With --idempotency-key: the request's scope, for a layer that scopes keys (what its
    /// scope extractor found, such as the client's id).
    #[arg(long, value_name = "SCOPE")]
    pub(crate) scope: Option<String>,
    /// With --idempotency-key: the layer's prefix (its `prefix`) [default: idem:].
    #[arg(long, value_name = "PREFIX")]
    pub(crate) idempotency_prefix: Option<String>,
    /// With --idempotency-key: the layer's records' time to live (its `ttl`), from which the
    /// record's age is told (it is stored without a time of its own).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration)]
    pub(crate) idempotency_ttl: Duration,
    /// Only this kind of lock.
    #[arg(long, value_enum)]
    pub(crate) kind: Option<Kind>,
}

impl StatusArgs {
    /// The name to look at: NAME, or the name an IdempotencyLayer keeps the key under (a
    /// usage error when the prefix cannot be one).
    pub(crate) fn lock_name(&self) -> Result<String, String> {
        match (&self.name, &self.idempotency_key) {
            (Some(_), _) if self.scope.is_some() || self.idempotency_prefix.is_some() => {
                Err("--scope and --idempotency-prefix go with --idempotency-key".to_owned())
            }
            (Some(name), _) => Ok(name.clone()),
            (None, Some(key)) => {
                let prefix = self.idempotency_prefix.as_deref().unwrap_or("idem:");
                lock_tower::idempotency::record_key(prefix, self.scope.as_deref(), key)
                    .map_err(|reason| format!("bad --idempotency-prefix: {reason}"))
            }
            (None, None) => Err("give NAME or --idempotency-key".to_owned()),
        }
    }
}

/// `list [PATTERN]`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// A Redis glob over lock names (`*`, `?`, `[ab]`, `\` escapes).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
    /// Show at most this many held locks (the first found); says so when there are more.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) limit: u64,
    /// Only this kind of lock.
    #[arg(long, value_enum)]
    pub(crate) kind: Option<Kind>,
}

/// `jobs [PATTERN]`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// A Redis glob over job names (`*`, `?`, `[ab]`, `\` escapes).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
}

/// `force-unlock NAME`.
#[derive(Debug, Args)]
pub(crate) struct ForceUnlockArgs {
    /// The lock's name, as the application gives it (without the prefix).
    pub(crate) name: String,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Only this kind of lock (default: every kind held under NAME).
    #[arg(long, value_enum)]
    pub(crate) kind: Option<Kind>,
    /// How long a freed lock keeps its fencing counter (lock-core's fence_ttl; give at least
    /// the applications' own).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub(crate) fence_ttl: Duration,
}

/// `watch [PATTERN]`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// A Redis glob over lock names.
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
    /// Stop after this many events.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Stop after this long (e.g. 30s, 5m).
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// What to listen to.
    #[arg(long, value_enum, default_value_t = Source::Auto)]
    pub(crate) source: Source,
}

/// What `watch` listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Source {
    /// Keyspace notifications if the server's notify-keyspace-events has what is needed,
    /// else the release channels.
    Auto,
    /// Keyspace notifications, without checking the server's setting (when CONFIG is
    /// refused but you know they are on).
    Keyspace,
    /// The release channels lock-core publishes on.
    Channels,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_url_is_the_flag_then_lockctl_url_then_redis_url_then_the_default() {
        let cli = Cli::try_parse_from(["lockctl", "list"]).unwrap();
        let both = |name: &str| Some(format!("redis://{name}:1"));
        assert_eq!(
            cli.connection.urls(both),
            (vec!["redis://LOCKCTL_URL:1".to_owned()], "LOCKCTL_URL")
        );
        let redis_only = |name: &str| match name {
            "REDIS_URL" => Some("redis://a:1, redis://b:2".to_owned()),
            _ => Some(String::new()),
        };
        assert_eq!(
            cli.connection.urls(redis_only),
            (
                vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()],
                "REDIS_URL"
            )
        );
        assert_eq!(
            cli.connection.urls(|_| None),
            (vec![DEFAULT_URL.to_owned()], "the default")
        );
    }

    #[test]
    fn an_idempotency_key_is_looked_at_under_the_layers_name() {
        let status = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Status(status) = cli.command else {
                panic!("not status")
            };
            status.lock_name()
        };
        let name = status(&["lockctl", "status", "--idempotency-key", "8e03978e"]);
        assert_eq!(name.as_deref(), Ok("idem::8e03978e"));
        let scoped = [
            "lockctl",
            "status",
            "--idempotency-key",
            "k1",
            "--scope",
            "client-7",
        ];
        assert_eq!(status(&scoped).as_deref(), Ok("idem:client-7:k1"));
        let prefixed = [
            "lockctl",
            "status",
            "--idempotency-key",
            "k",
            "--idempotency-prefix",
            "pay:",
        ];
        assert_eq!(status(&prefixed).as_deref(), Ok("pay::k"));
        assert_eq!(
            status(&["lockctl", "status", "order:1"]).as_deref(),
            Ok("order:1")
        );
        assert!(
            Cli::try_parse_from(["lockctl", "status"]).is_err(),
            "NAME or a key"
        );
        let both = ["lockctl", "status", "order:1", "--idempotency-key", "k"];
        assert!(Cli::try_parse_from(both).is_err(), "not both");
        let stray = status(&["lockctl", "status", "x", "--scope", "s"]);
        assert!(stray.is_err_and(|e| e.contains("--idempotency-key")));
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn several_urls_by_repetition_or_commas() {
        let cli = Cli::try_parse_from([
            "lockctl",
            "--url",
            "redis://a:1,redis://b:2",
            "-u",
            "redis://c:3",
            "list",
        ])
        .unwrap();
        assert_eq!(cli.connection.url.len(), 3);
        let env = |name: &str| (name == "REDIS_URL").then(|| "redis://r:1".to_owned());
        assert_eq!(cli.connection.urls(env).1, "--url", "--url first");
        let cli =
            Cli::try_parse_from(["lockctl", "watch", "--for", "1m 30s", "--count", "2"]).unwrap();
        let Command::Watch(watch) = cli.command else {
            panic!("not watch")
        };
        assert_eq!(watch.duration, Some(Duration::from_secs(90)));
    }
}
