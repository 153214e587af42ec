//! The key template: `"user:{req.user_id}:sale:{sale.id}"`, read at compile time.
//!
//! Text is copied as is (`{{` and `}}` stand for `{` and `}`); each `{...}` names a parameter
//! of the function, optionally followed by a field path (`{req.user_id}`, `{pair.0}`,
//! `{self.id}`). The template becomes a `format!` call whose arguments carry the literal's
//! span, so a missing field or a parameter that is not `Display` is reported on the key.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::{Ident, LitStr};

/// A parsed key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, PartialEq, Eq)]
enum Piece {
    /// Literal text, unescaped.
    Text(String),
    /// `{root.field.0}`: a parameter (or `self`) and a field path.
    Field { root: String, fields: Vec<Field> },
}

#[derive(Debug, PartialEq, Eq)]
enum Field {
    Named(String),
    Index(u32),
}

impl Template {
    /// Reads a template; errors are spanned at the literal.
    pub(crate) fn parse(lit: &LitStr) -> syn::Result<Template> {
        parse_str(&lit.value()).map_err(|message| syn::Error::new(lit.span(), message))
    }

    /// Checks that every placeholder starts with one of `params` (the names the function's
    /// parameters bind, `self` included).
    pub(crate) fn check_params(
        &self,
        lit: &LitStr,
        fn_name: &Ident,
        params: &[String],
    ) -> syn::Result<()> {
        for piece in &self.pieces {
            let Piece::Field { root, .. } = piece else {
                continue;
            };
            if !params.iter().any(|p| p == root) {
                let known = if params.is_empty() {
                    format!("`{fn_name}` has no parameters")
                } else {
                    let list: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
                    format!("the parameters are {}", list.join(", "))
                };
                return Err(syn::Error::new(
                    lit.span(),
                    format!("`{root}` in the key is not a parameter of `{fn_name}`; {known}"),
                ));
            }
        }
        Ok(())
    }

    /// The expression that builds the key, a `String`.
    pub(crate) fn expand(&self, span: Span) -> TokenStream {
        let mut format = String::new();
        let mut args = Vec::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Field { root, fields } => {
                    format.push_str("{}");
                    let root = make_ident(root, span);
                    let fields = fields.iter().map(|field| match field {
                        Field::Named(name) => {
                            let name = make_ident(name, span);
                            quote_spanned!(span=> .#name)
                        }
                        Field::Index(index) => {
                            let index = syn::Index {
                                index: *index,
                                span,
                            };
                            quote_spanned!(span=> .#index)
                        }
                    });
                    args.push(quote_spanned!(span=> #root #(#fields)*));
                }
            }
        }
        let format = LitStr::new(&format, span);
        if args.is_empty() {
            let text = LitStr::new(&format.value().replace("{{", "{").replace("}}", "}"), span);
            quote!(::std::string::String::from(#text))
        } else {
            quote_spanned!(span=> ::std::format!(#format, #(#args),*))
        }
    }
}

fn parse_str(template: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '}' => {
                return Err("unmatched `}` in the key; write `}}` for a literal `}`".to_owned());
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => {
                            return Err(format!(
                                "unclosed `{{{inner}` in the key; \
                                 write `{{{{` for a literal `{{`"
                            ));
                        }
                        Some(c) => inner.push(c),
                    }
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(parse_placeholder(&inner)?);
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Template { pieces })
}

/// `root` or `root.field.0`, nothing else: no spaces, no format specs, no expressions.
fn parse_placeholder(inner: &str) -> Result<Piece, String> {
    let invalid = || {
        format!(
            "`{{{inner}}}` in the key is not a parameter or a field path; \
             expected `{{param}}` or `{{param.field}}`, e.g. `{{req.user_id}}`"
        )
    };
    let mut parts = inner.split('.');
    let root = parts.next().and_then(ident).ok_or_else(invalid)?;
    let fields = parts
        .map(|part| match part.parse::<u32>() {
            Ok(index) if index.to_string() == part => Some(Field::Index(index)),
            _ => ident(part).map(Field::Named),
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(invalid)?;
    if fields.iter().any(|f| f == &Field::Named("self".to_owned())) {
        return Err(invalid());
    }
    Ok(Piece::Field { root, fields })
}

/// An identifier, exactly (keywords other than `self` are refused; `r#raw` ones are kept).
fn ident(s: &str) -> Option<String> {
    let name = Ident::parse_any.parse_str(s).ok()?.to_string();
    let keyword = syn::parse_str::<Ident>(&name).is_err();
    (name == s && (!keyword || name == "self")).then_some(name)
}

/// The identifier `name` (as read by [`ident`]) with the given span.
fn make_ident(name: &str, span: Span) -> Ident {
    match name.strip_prefix("r#") {
        Some(raw) => Ident::new_raw(raw, span),
        None => Ident::new(name, span),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(root: &str, fields: &[&str]) -> Piece {
        Piece::Field {
            root: root.to_owned(),
            fields: fields
                .iter()
                .map(|f| match f.parse() {
                    Ok(i) => Field::Index(i),
                    Err(_) => Field::Named((*f).to_owned()),
                })
                .collect(),
        }
    }

    fn text(s: &str) -> Piece {
        Piece::Text(s.to_owned())
    }

    #[test]
    fn reads_text_params_and_field_paths() {
        let t = parse_str("user:{req.user_id}:sale:{sale.id}").unwrap();
        assert_eq!(
            t.pieces,
            vec![
                text("user:"),
                field("req", &["user_id"]),
                text(":sale:"),
                field("sale", &["id"]),
            ]
        );
        let t = parse_str("{self.0.name}{id}").unwrap();
        assert_eq!(
            t.pieces,
            vec![field("self", &["0", "name"]), field("id", &[])]
        );
        let t = parse_str("{r#type}").unwrap();
        assert_eq!(t.pieces, vec![field("r#type", &[])]);
    }

    #[test]
    fn unescapes_braces() {
        let t = parse_str("a{{b}}c{id}}}").unwrap();
        assert_eq!(t.pieces, vec![text("a{b}c"), field("id", &[]), text("}")]);
    }

    #[test]
    fn refuses_malformed_placeholders() {
        for bad in [
            "{}",
            "{req..id}",
            "{req.}",
            "{.id}",
            "{ id }",
            "{id:?}",
            "{1abc}",
            "{a-b}",
            "{type}",
            "{req.self}",
            "{a.01x}",
            "{a.01}",
            "{Self}",
        ] {
            let err = parse_str(bad).unwrap_err();
            assert!(
                err.contains("not a parameter or a field path"),
                "{bad}: {err}"
            );
        }
        assert!(parse_str("a}b").unwrap_err().contains("unmatched `}`"));
        assert!(parse_str("a{b").unwrap_err().contains("unclosed `{b`"));
        assert!(parse_str("a{b{c}").unwrap_err().contains("unclosed"));
    }

    #[test]
    fn expands_to_format_or_a_plain_string() {
        let span = Span::call_site();
        let t = parse_str("o{{x}}:{id}:{req.0}").unwrap();
        assert_eq!(
            t.expand(span).to_string(),
            quote!(::std::format!("o{{x}}:{}:{}", id, req.0)).to_string()
        );
        let t = parse_str("plain{{x}}").unwrap();
        assert_eq!(
            t.expand(span).to_string(),
            quote!(::std::string::String::from("plain{x}")).to_string()
        );
    }

    /// Hostile key templates (issue 17 §3): the parser never panics, every error points at
    /// the key's literal, and what it accepts it reads exactly and expands into valid code.
    mod properties {
        use proptest::prelude::*;
        use proptest::test_runner::Config;

        use super::*;

        fn config(cases: u32) -> Config {
            Config {
                cases,
                failure_persistence: None,
                ..Config::default()
            }
        }

        /// Pieces of templates that matter to the parser, and any character.
        fn fragment() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => prop::sample::select(vec![
                    "{", "}", "{{", "}}", ".", "..", ":", "?", ":?", ":>8", "!", " ", "0", "01",
                    "4294967296", "r#", "r#type", "r#self", "r#_", "self", "Self", "super", "type",
                    "_", "a", "req", "user_id", "é", "\u{301}", "\u{200b}", "\\", "\"", "'",
                    "'a", "b'", "c\"", "/*", "*/", "//", "///", "#", "#!", "-", "1e3", "0x1f",
                    "$", "@", "\0", "\n", "\u{feff}", "(", ")", "[", "]", ",", ";", "<", ">",
                ])
                .prop_map(str::to_owned),
                1 => any::<char>().prop_map(String::from),
                1 => "[a-z_][a-z0-9_]{0,6}",
            ]
        }

        fn template() -> impl Strategy<Value = String> {
            prop_oneof![
                6 => prop::collection::vec(fragment(), 0..16).prop_map(|f| f.concat()),
                1 => any::<String>(),
            ]
        }

        /// `value` as the string literal a user writes: escaped, then read back by syn.
        fn literal(value: &str) -> LitStr {
            let tokens: TokenStream = proc_macro2::Literal::string(value)
                .to_string()
                .parse()
                .expect("the literal lexes");
            syn::parse2(tokens).expect("a string literal")
        }

        /// An error as [`Template::parse`] and [`Template::check_params`] must give it: one
        /// message, saying something. (Where it points cannot be seen outside the compiler
        /// without proc-macro2's `span-locations`; both build every error from `lit.span()`,
        /// and the UI tests in `tests/ui` show it on the key.)
        fn one_message(error: &syn::Error) -> bool {
            error.clone().into_iter().count() == 1 && !error.to_string().trim().is_empty()
        }

        /// A parameter name the parser accepts: an identifier that is not a keyword, a raw
        /// identifier, or `self`.
        fn root() -> impl Strategy<Value = String> {
            prop_oneof![
                6 => "[a-z_][a-z0-9_]{0,8}"
                    .prop_filter("not a keyword", |s| syn::parse_str::<Ident>(s).is_ok()),
                1 => prop::sample::select(vec!["r#type", "r#match", "self", "é", "ünïcode"])
                    .prop_map(str::to_owned),
            ]
        }

        fn field() -> impl Strategy<Value = Field> {
            prop_oneof![
                root()
                    .prop_filter("not self", |s| s != "self")
                    .prop_map(Field::Named),
                prop_oneof![0u32..10, Just(u32::MAX)].prop_map(Field::Index),
            ]
        }

        fn piece() -> impl Strategy<Value = Piece> {
            prop_oneof![
                any::<String>().prop_map(Piece::Text),
                prop::collection::vec(prop::sample::select(vec!['{', '}', ':', 'x']), 1..5)
                    .prop_map(|c| Piece::Text(String::from_iter(c))),
                (root(), prop::collection::vec(field(), 0..3))
                    .prop_map(|(root, fields)| Piece::Field { root, fields }),
            ]
        }

        /// The template text of `pieces`: text with its braces doubled, fields in braces.
        fn render(pieces: &[Piece]) -> String {
            let mut out = String::new();
            for piece in pieces {
                match piece {
                    Piece::Text(text) => out.push_str(&text.replace('{', "{{").replace('}', "}}")),
                    Piece::Field { root, fields } => {
                        out.push('{');
                        out.push_str(root);
                        for field in fields {
                            match field {
                                Field::Named(name) => out.push_str(&format!(".{name}")),
                                Field::Index(index) => out.push_str(&format!(".{index}")),
                            }
                        }
                        out.push('}');
                    }
                }
            }
            out
        }

        /// `pieces` as the parser reports them: adjacent text joined, empty text left out.
        fn normalized(pieces: Vec<Piece>) -> Vec<Piece> {
            let mut out: Vec<Piece> = Vec::new();
            for piece in pieces {
                match (out.last_mut(), piece) {
                    (_, Piece::Text(text)) if text.is_empty() => {}
                    (Some(Piece::Text(last)), Piece::Text(text)) => last.push_str(&text),
                    (_, piece) => out.push(piece),
                }
            }
            out
        }

        proptest! {
            #![proptest_config(config(2000))]

            /// Any template: read, or refused with one message (the parser's own), and what is
            /// read expands into an expression; never a panic.
            #[test]
            fn any_template_is_read_or_refused_with_one_message(text in template()) {
                let lit = literal(&text);
                prop_assert_eq!(lit.value(), text.clone());
                match Template::parse(&lit) {
                    Ok(template) => {
                        let expr = template.expand(lit.span());
                        prop_assert!(
                            syn::parse2::<syn::Expr>(expr.clone()).is_ok(),
                            "{:?} expands to {}", text, expr
                        );
                        let params = ["self", "req", "a", "user_id"].map(str::to_owned);
                        let fn_name = Ident::new("f", Span::call_site());
                        if let Err(error) = template.check_params(&lit, &fn_name, &params) {
                            prop_assert!(one_message(&error), "{:?}: {:?}", text, error);
                        }
                    }
                    Err(error) => {
                        prop_assert!(one_message(&error), "{:?}: {:?}", text, error);
                        prop_assert_eq!(Err(error.to_string()), parse_str(&text).map(drop));
                    }
                }
            }

            /// A template written from pieces (text with doubled braces, parameters with
            /// field paths) reads back as exactly those pieces, and expands into a `format!`
            /// whose literal text is the pieces' text.
            #[test]
            fn a_well_formed_template_reads_back_exactly(
                pieces in prop::collection::vec(piece(), 0..6),
            ) {
                let text = render(&pieces);
                let read = parse_str(&text);
                prop_assert_eq!(
                    read.as_ref().map(|t| &t.pieces),
                    Ok(&normalized(pieces)),
                    "{:?}", text
                );
                let expr = read.unwrap().expand(Span::call_site());
                prop_assert!(syn::parse2::<syn::Expr>(expr).is_ok(), "{:?}", text);
            }
        }
    }
}
