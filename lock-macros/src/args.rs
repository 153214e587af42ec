//! The attribute's arguments: `key = "...", client = <expr>, wait = "2s", lease = "10s",
//! on_lost = "abort" | "continue", handle = <ident>, fair [= true | false]`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitBool, LitStr, Token};

use crate::template::Template;

/// Every argument, in the order the docs list them.
const VALID: &str = "`key`, `client`, `wait`, `lease`, `on_lost`, `handle`, `fair`";

/// The shortest and longest lease lock-core accepts (`MIN_LEASE`, `MAX_LEASE`).
const MIN_LEASE_MS: u64 = 10;
const MAX_LEASE_MS: u64 = 30 * 24 * 3600 * 1000;

/// The parsed arguments. Only syntax and literal values are checked here; the key's
/// placeholders are checked against the signature in `expand`.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<Key>,
    pub(crate) client: Option<Expr>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) lease: Option<DurationArg>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) handle: Option<Ident>,
    pub(crate) fair: Option<bool>,
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
                "handle" => {
                    unset(&args.handle, &name)?;
                    args.handle = Some(value(input, &name)?);
                }
                "fair" => {
                    unset(&args.fair, &name)?;
                    // `fair` alone means `fair = true`.
                    let fair = if input.peek(Token![=]) {
                        value::<LitBool>(input, &name)?.value
                    } else {
                        true
                    };
                    args.fair = Some(fair);
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
        Ok(args)
    }
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
               lease = Duration::from_secs(10), on_lost = "continue", handle = lock, fair = false,"#,
        )
        .unwrap();
        assert!(matches!(args.key, Some(Key::Template(..))));
        assert!(args.client.is_some());
        assert!(matches!(args.wait, Some(DurationArg::Millis(2000, _))));
        assert!(matches!(args.lease, Some(DurationArg::Expr(_))));
        assert_eq!(args.on_lost, Some(OnLost::Continue));
        assert_eq!(args.handle.unwrap().to_string(), "lock");

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

    #[test]
    fn refuses_bad_arguments() {
        assert!(error(r#"key = "a", ttl = "1s""#).starts_with("unknown argument `ttl`"));
        assert!(error(r#"key = "a", key = "b""#).contains("`key` is given more than once"));
        assert!(error(r#"key = "a", wait = "2 secs""#).contains("invalid duration \"2 secs\""));
        assert!(error(r#"key = "a", wait = 2"#).contains("`wait` needs a unit"));
        assert!(error(r#"key = "a", lease = "5ms""#).contains("between 10ms and 30 days"));
        assert!(error(r#"key = "a", on_lost = "retry""#).contains("\"abort\""));
        assert!(error(r#"key = "a", fair, fair = false"#).contains("more than once"));
        assert!(error(r#"key = "a", fair = "yes""#).contains("expected boolean literal"));
        assert!(error(r#"key "a""#).contains("expected `=` after `key`"));
        assert!(error(r#"key = "{id""#).contains("unclosed"));
    }
}
