//! The attribute's arguments: `key = "...", client = <expr>, wait = "2s", lease = "10s",
//! on_lost = "abort" | "continue", held = <ident>, kind = "mutex" | "fair" | "read" | "write",
//! permits = <n>, on_busy = "wait" | "skip", hold_at_least = "55s"`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::template::Template;

/// Every argument, in the order the docs list them.
const VALID: &str = "`key`, `client`, `wait`, `lease`, `on_lost`, `held`, `kind`, `permits`, `on_busy`, \
     `hold_at_least`";

/// Arguments a caller might try for a rate limit, which the attribute does not take (see
/// "Rate limits" in its docs).
const RATE_ARGUMENTS: &[&str] = &["rate", "rate_limit", "per", "burst", "quota"];

/// What the attribute says to them.
const NOT_A_RATE_LIMIT: &str = "`#[distributed_lock]` takes no rate limit: a limited call \
     is not a lock error, and what to do with it (a 429 with `Retry-After`, a later retry) \
     is the caller's; check one in the body with \
     `client.rate_limit(name).per(period, n).check().await?`, or put \
     `lock_tower::RateLimitLayer` in front of an HTTP handler";

/// The largest semaphore lock-core accepts (`Semaphore::MAX_SIZE`).
const MAX_PERMITS: u32 = 100_000;

/// The shortest and longest lease lock-core accepts (`LockClient::MIN_LEASE`, `MAX_LEASE`).
const MIN_LEASE_MS: u64 = 10;
const MAX_LEASE_MS: u64 = 30 * 24 * 3600 * 1000;

/// The limits above as the expression `(MIN_LEASE_MS, MAX_LEASE_MS, MAX_PERMITS)`, typed
/// `(u64, u64, u32)`: what the hidden `__limits!()` expands to. lock-macros cannot depend on
/// lock-core (lock-core re-exports it), so these are copies, and the lock-tests suite
/// `macro_limits` checks them against lock-core's constants.
pub(crate) fn limits() -> proc_macro2::TokenStream {
    quote::quote!((#MIN_LEASE_MS, #MAX_LEASE_MS, #MAX_PERMITS))
}

/// The parsed arguments. Only syntax and literal values are checked here; the key's
/// placeholders are checked against the signature in `expand`.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<Key>,
    pub(crate) client: Option<Expr>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) lease: Option<DurationArg>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) held: Option<Ident>,
    pub(crate) kind: Option<(Kind, Span)>,
    pub(crate) permits: Option<(u32, Span)>,
    pub(crate) on_busy: Option<(OnBusy, Span)>,
    pub(crate) hold_at_least: Option<(DurationArg, Span)>,
}

/// `on_busy = "..."`: what a call does when the lock stays busy for its whole wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBusy {
    /// Return the `LockError::Timeout`, converted (the default).
    Wait,
    /// Return `Ok(None)` without running the body (one attempt unless `wait` is given).
    Skip,
}

/// `kind = "..."`: which lock the function takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    Read,
    Write,
}

/// `key = "template"` or `key = <expr>` (any `Display` value, used as is).
pub(crate) enum Key {
    Template(LitStr, Template),
    Expr(Expr),
}

/// `wait` or `lease`: a duration written as a string and checked now, or an expression of
/// type `Duration` that rustc checks.
pub(crate) enum DurationArg {
    Millis(u64, Span),
    Expr(Expr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    Abort,
    Continue,
}

impl Args {
    /// The rules between arguments: a minimum hold within the lease, and only on a mutex;
    /// `permits` without `kind`.
    fn check(&self) -> syn::Result<()> {
        if let (Some((DurationArg::Millis(least, span), _)), Some(DurationArg::Millis(lease, _))) =
            (&self.hold_at_least, &self.lease)
            && least > lease
        {
            return Err(syn::Error::new(
                *span,
                "`hold_at_least` is longer than the `lease`: the lock would expire before it",
            ));
        }
        if let Some((_, span)) = &self.hold_at_least {
            let kind = self.kind.map(|(kind, _)| kind);
            if self.permits.is_some() || !matches!(kind, None | Some(Kind::Mutex)) {
                return Err(syn::Error::new(
                    *span,
                    "`hold_at_least` keeps a mutex taken after the call returns; it cannot be \
                     combined with `kind = \"fair\"`, `\"read\"`, `\"write\"` or `permits`",
                ));
            }
        }
        if let (Some(_), Some((_, span))) = (&self.kind, &self.permits) {
            return Err(syn::Error::new(
                *span,
                "`permits` takes a semaphore permit instead of a lock: it cannot be combined \
                 with `kind`",
            ));
        }
        Ok(())
    }
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let name = input.call(Ident::parse_any)?;
            match name.to_string().as_str() {
                "key" => {
                    unset(&args.key, &name)?;
                    args.key = Some(Key::parse(value(input, &name)?)?);
                }
                "client" => {
                    unset(&args.client, &name)?;
                    args.client = Some(value(input, &name)?);
                }
                "wait" => {
                    unset(&args.wait, &name)?;
                    args.wait = Some(DurationArg::parse(value(input, &name)?, &name)?);
                }
                "lease" => {
                    unset(&args.lease, &name)?;
                    args.lease = Some(DurationArg::parse(value(input, &name)?, &name)?);
                }
                "on_lost" => {
                    unset(&args.on_lost, &name)?;
                    args.on_lost = Some(OnLost::parse(&value(input, &name)?)?);
                }
                "held" => {
                    unset(&args.held, &name)?;
                    args.held = Some(value(input, &name)?);
                }
                "kind" => {
                    unset(&args.kind, &name)?;
                    let lit: LitStr = value(input, &name)?;
                    args.kind = Some((Kind::parse(&lit)?, lit.span()));
                }
                "permits" => {
                    unset(&args.permits, &name)?;
                    let lit: Lit = value(input, &name)?;
                    args.permits = Some((parse_permits(&lit)?, lit.span()));
                }
                "on_busy" => {
                    unset(&args.on_busy, &name)?;
                    let lit: LitStr = value(input, &name)?;
                    args.on_busy = Some((OnBusy::parse(&lit)?, lit.span()));
                }
                "hold_at_least" => {
                    unset(&args.hold_at_least, &name)?;
                    args.hold_at_least = Some((
                        DurationArg::parse(value(input, &name)?, &name)?,
                        name.span(),
                    ));
                }
                _ if RATE_ARGUMENTS.contains(&name.to_string().as_str()) => {
                    return Err(syn::Error::new(name.span(), NOT_A_RATE_LIMIT));
                }
                _ => {
                    return Err(syn::Error::new(
                        name.span(),
                        format!("unknown argument `{name}`; expected one of {VALID}"),
                    ));
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        args.check()?;
        Ok(args)
    }
}

impl Kind {
    fn parse(lit: &LitStr) -> syn::Result<Kind> {
        match lit.value().as_str() {
            "mutex" => Ok(Kind::Mutex),
            "fair" => Ok(Kind::Fair),
            "read" => Ok(Kind::Read),
            "write" => Ok(Kind::Write),
            other => Err(syn::Error::new(
                lit.span(),
                format!(
                    "unknown kind {other:?}; expected one of \"mutex\" (the default), \
                     \"fair\", \"read\", \"write\" (or `permits = N` for a semaphore)"
                ),
            )),
        }
    }
}

/// `permits = N`: the semaphore's size, 1 to 100,000.
fn parse_permits(lit: &Lit) -> syn::Result<u32> {
    let n = match lit {
        Lit::Int(int) => int.base10_parse::<u32>().ok(),
        _ => None,
    };
    n.filter(|n| (1..=MAX_PERMITS).contains(n)).ok_or_else(|| {
        syn::Error::new(
            lit.span(),
            "`permits` must be a whole number from 1 to 100000 (the semaphore's size; each \
             call takes one permit)",
        )
    })
}

/// Refuses an argument given twice, at its second occurrence.
fn unset<T>(slot: &Option<T>, name: &Ident) -> syn::Result<()> {
    match slot {
        Some(_) => Err(syn::Error::new(
            name.span(),
            format!("`{name}` is given more than once"),
        )),
        None => Ok(()),
    }
}

/// `= <value>` after an argument's name.
fn value<T: Parse>(input: ParseStream<'_>, name: &Ident) -> syn::Result<T> {
    if !input.peek(Token![=]) {
        return Err(input.error(format!("expected `=` after `{name}`")));
    }
    input.parse::<Token![=]>()?;
    input.parse()
}

impl Key {
    fn parse(expr: Expr) -> syn::Result<Key> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                let template = Template::parse(&lit)?;
                Ok(Key::Template(lit, template))
            }
            expr => Ok(Key::Expr(expr)),
        }
    }
}

impl DurationArg {
    fn parse(expr: Expr, name: &Ident) -> syn::Result<DurationArg> {
        let lit = match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => lit,
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => {
                return Err(syn::Error::new(
                    int.span(),
                    format!(
                        "`{name}` needs a unit: write a string such as \"{}ms\" or \"{}s\", \
                         or a `Duration`",
                        int.base10_digits(),
                        int.base10_digits()
                    ),
                ));
            }
            expr => return Ok(DurationArg::Expr(expr)),
        };
        let millis = parse_millis(&lit.value()).ok_or_else(|| {
            syn::Error::new(
                lit.span(),
                format!(
                    "invalid duration {:?} for `{name}`: expected a whole number and a unit \
                     (`ms`, `s`, `m` or `h`), such as \"500ms\", \"2s\" or \"1m\", \
                     or a `Duration` expression",
                    lit.value()
                ),
            )
        })?;
        if name == "hold_at_least" && millis > MAX_LEASE_MS {
            return Err(syn::Error::new(
                lit.span(),
                "`hold_at_least` must be at most 30 days (and at most the `lease`)",
            ));
        }
        if name == "lease" && !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&millis) {
            return Err(syn::Error::new(
                lit.span(),
                "`lease` must be between 10ms and 30 days (lock_core::MIN_LEASE..=MAX_LEASE)",
            ));
        }
        Ok(DurationArg::Millis(millis, lit.span()))
    }
}

/// `"500ms"`, `"2s"`, `"1m"`, `"1h"` as milliseconds.
fn parse_millis(s: &str) -> Option<u64> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = s.split_at(split);
    if number.is_empty() {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    number.checked_mul(scale)
}

impl OnBusy {
    fn parse(lit: &LitStr) -> syn::Result<OnBusy> {
        match lit.value().as_str() {
            "wait" => Ok(OnBusy::Wait),
            "skip" => Ok(OnBusy::Skip),
            _ => Err(syn::Error::new(
                lit.span(),
                "expected `on_busy = \"wait\"` (the default: a busy lock is an error) or \
                 `on_busy = \"skip\"` (return `Ok(None)`)",
            )),
        }
    }
}

impl OnLost {
    fn parse(lit: &LitStr) -> syn::Result<OnLost> {
        match lit.value().as_str() {
            "abort" => Ok(OnLost::Abort),
            "continue" => Ok(OnLost::Continue),
            _ => Err(syn::Error::new(
                lit.span(),
                "expected `on_lost = \"abort\"` or `on_lost = \"continue\"`",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: &str) -> syn::Result<Args> {
        syn::parse_str(tokens)
    }

    fn error(tokens: &str) -> String {
        match parse(tokens) {
            Ok(_) => panic!("`{tokens}` was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_every_argument() {
        let args = parse(
            r#"key = "stock:{sku}", client = self.locks, wait = "2s",
               lease = Duration::from_secs(10), on_lost = "continue", held = lock, kind = "fair","#,
        )
        .unwrap();
        assert!(matches!(args.key, Some(Key::Template(..))));
        assert!(args.client.is_some());
        assert!(matches!(args.wait, Some(DurationArg::Millis(2000, _))));
        assert!(matches!(args.lease, Some(DurationArg::Expr(_))));
        assert_eq!(args.on_lost, Some(OnLost::Continue));
        assert_eq!(args.held.unwrap().to_string(), "lock");
        assert_eq!(args.kind.map(|(k, _)| k), Some(Kind::Fair));
        assert_eq!(
            parse(r#"key = "a", permits = 3"#)
                .unwrap()
                .permits
                .map(|(n, _)| n),
            Some(3)
        );

        let args = parse(r#"key = "a", on_busy = "skip", hold_at_least = "55s""#).unwrap();
        assert_eq!(args.on_busy.map(|(b, _)| b), Some(OnBusy::Skip));
        assert!(matches!(
            args.hold_at_least,
            Some((DurationArg::Millis(55_000, _), _))
        ));

        let args = parse("key = name.as_str()").unwrap();
        assert!(matches!(args.key, Some(Key::Expr(_))));
        assert!(parse("").unwrap().key.is_none());
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_millis("500ms"), Some(500));
        assert_eq!(parse_millis("2s"), Some(2_000));
        assert_eq!(parse_millis("1m"), Some(60_000));
        assert_eq!(parse_millis("3h"), Some(10_800_000));
        assert_eq!(parse_millis("0s"), Some(0));
        for bad in [
            "",
            "s",
            "2",
            "2 s",
            "1.5s",
            "-1s",
            "2sec",
            "ms500",
            "99999999999999999h",
        ] {
            assert_eq!(parse_millis(bad), None, "{bad}");
        }
    }

    /// The checks use the limits (which `macro_limits` pins to lock-core's), bounds included.
    #[test]
    fn the_limits_are_what_the_checks_use() {
        let lease = |ms: u64| parse(&format!(r#"key = "a", lease = "{ms}ms""#));
        assert!(lease(MIN_LEASE_MS).is_ok() && lease(MAX_LEASE_MS).is_ok());
        assert!(lease(MIN_LEASE_MS - 1).is_err() && lease(MAX_LEASE_MS + 1).is_err());
        let hold = |ms: u64| parse(&format!(r#"key = "a", hold_at_least = "{ms}ms""#));
        assert!(hold(MAX_LEASE_MS).is_ok() && hold(MAX_LEASE_MS + 1).is_err());
        let permits = |n: u32| parse(&format!(r#"key = "a", permits = {n}"#));
        assert!(permits(1).is_ok() && permits(MAX_PERMITS).is_ok());
        assert!(permits(0).is_err() && permits(MAX_PERMITS + 1).is_err());
        assert_eq!(
            limits().to_string(),
            format!("({MIN_LEASE_MS}u64 , {MAX_LEASE_MS}u64 , {MAX_PERMITS}u32)")
        );
    }

    #[test]
    fn refuses_bad_arguments() {
        assert!(error(r#"key = "a", ttl = "1s""#).starts_with("unknown argument `ttl`"));
        assert!(error(r#"key = "a", key = "b""#).contains("`key` is given more than once"));
        assert!(error(r#"key = "a", wait = "2 secs""#).contains("invalid duration \"2 secs\""));
        assert!(error(r#"key = "a", wait = 2"#).contains("`wait` needs a unit"));
        assert!(error(r#"key = "a", lease = "5ms""#).contains("between 10ms and 30 days"));
        assert!(error(r#"key = "a", on_lost = "retry""#).contains("\"abort\""));
        assert!(error(r#"key = "a", kind = "mutex", kind = "fair""#).contains("more than once"));
        assert!(error(r#"key = "a", kind = "exclusive""#).contains("\"read\""));
        assert!(error(r#"key = "a", kind = "read", permits = 2"#).contains("cannot be combined"));
        assert!(error(r#"key = "a", permits = 0"#).contains("1 to 100000"));
        assert!(error(r#"key = "a", permits = "2""#).contains("1 to 100000"));
        assert!(error(r#"key = "a", fair"#).starts_with("unknown argument `fair`"));
        for rate in ["rate = \"10/s\"", "per = \"1s\"", "burst = 20"] {
            let message = error(&format!(r#"key = "a", {rate}"#));
            assert!(message.contains("takes no rate limit"), "{rate}: {message}");
        }
        assert!(error(r#"key "a""#).contains("expected `=` after `key`"));
        assert!(error(r#"key = "a", on_busy = "drop""#).contains("\"skip\""));
        assert!(error(r#"key = "a", hold_at_least = "1s", kind = "fair""#).contains("mutex"));
        assert!(error(r#"key = "a", hold_at_least = "1s", permits = 2"#).contains("mutex"));
        assert!(error(r#"key = "a", hold_at_least = "31d""#).contains("invalid duration"));
        assert!(error(r#"key = "a", hold_at_least = "800h""#).contains("at most 30 days"));
        assert!(error(r#"key = "a", lease = "1m", hold_at_least = "2m""#).contains("longer"));
        assert!(error(r#"key = "{id""#).contains("unclosed"));
    }
}
