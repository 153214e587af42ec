//! Checks the function against the arguments and writes the expansion.
//!
//! ```ignore
//! // input
//! #[distributed_lock(key = "stock:{sku}", client = self.locks, wait = "2s", held = lock)]
//! pub async fn reserve(&self, sku: &str) -> Result<(), AppError> { BODY }
//!
//! // output
//! pub async fn reserve(&self, sku: &str) -> Result<(), AppError> {
//!     ::lock_core::__private::reentrant(async move {
//!         let __lock_name: ::std::string::String = ::std::format!("stock:{}", sku);
//!         let __lock_acquire = ::lock_core::__private::acquire(
//!             ::lock_core::__private::client(&(self.locks)),
//!             move |__lock_client: &::lock_core::LockClient| __lock_client.lock(__lock_name),
//!             ::core::option::Option::Some(::core::time::Duration::from_millis(2000u64)),
//!             ::core::option::Option::None,
//!         );
//!         ::lock_core::__private::run(
//!             __lock_acquire,
//!             <_ as ::core::convert::From<::lock_core::LockError>>::from,
//!             ::lock_core::__private::OnLost::Abort,
//!             move |lock: ::lock_core::HeldLock| async move {
//!                 #[allow(unreachable_code, ...)]
//!                 if false {
//!                     let __lock_fake_return: Result<(), AppError> = loop {};
//!                     return __lock_fake_return;
//!                 }
//!                 BODY
//!             },
//!         )
//!         .await
//!     })
//!     .await
//! }
//! ```
//!
//! * The body is an `async move` block of its own, so its `return` and `?` leave the body
//!   only, and `run` can release the lock (or race the body against the lost signal).
//! * The client is only borrowed while the request is built, so the body may move what the
//!   client expression borrowed from (`self: Arc<Self>`). The request is the public API's own
//!   (`client.fair_lock(name).lock()`, `client.read_write_lock(name).read()`,
//!   `client.semaphore(name, n).acquire(1)` for the other kinds).
//! * The fake return edge (tracing's trick) pins the block's type to the declared return type
//!   (with `impl Trait` erased to `_`), so `?` infers and mismatches point at the signature.
//! * The conversion `E::from` is spanned at the error type, so a missing `From<LockError>` is
//!   reported there.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    AttrStyle, Attribute, FnArg, GenericArgument, LitInt, Pat, PathArguments, ReturnType,
    Signature, Type, Visibility, braced, token::Brace,
};

use crate::args::{Args, DurationArg, Key, Kind, OnBusy, OnLost};

/// The attribute's entry point: the expansion, or the unchanged function plus the errors.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let func = match parse_fn(item.clone()) {
        Ok(func) => func,
        Err(error) => return with_error(item, error),
    };
    let args = syn::parse2::<Args>(args);
    match check(args, &func) {
        Ok(checked) => expand(checked, func),
        Err(error) => with_error(item, error),
    }
}

/// Emits the item as written next to the error, so the function still exists for callers
/// and IDEs (tokio-macros' `token_stream_with_error`).
fn with_error(mut item: TokenStream, error: syn::Error) -> TokenStream {
    item.extend(error.into_compile_error());
    item
}

/// A function whose body is kept as tokens: it is never parsed, only moved.
struct LockedFn {
    attrs: Vec<Attribute>,
    vis: Visibility,
    sig: Signature,
    /// The body's braces, whose span the expanded body keeps.
    brace: Brace,
    inner_attrs: Vec<Attribute>,
    body: TokenStream,
}

fn parse_fn(item: TokenStream) -> syn::Result<LockedFn> {
    let not_a_fn = || {
        syn::Error::new(
            Span::call_site(),
            "`#[distributed_lock]` can only be applied to an `async fn` with a body",
        )
    };
    let parser = |input: ParseStream<'_>| {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse().map_err(|_| not_a_fn())?;
        if !input.peek(syn::token::Brace) {
            return Err(not_a_fn());
        }
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body = content.parse()?;
        Ok(LockedFn {
            attrs,
            vis,
            sig,
            brace,
            inner_attrs,
            body,
        })
    };
    parser.parse2(item)
}

/// What `check` found valid, ready to expand.
struct Checked {
    args: Args,
    /// Where trait errors about the return type are reported: the `E` of `Result<T, E>`, or
    /// the whole type.
    error_span: Span,
}

/// Every problem with the arguments and the signature, combined into one error.
fn check(args: syn::Result<Args>, func: &LockedFn) -> syn::Result<Checked> {
    let mut errors: Option<syn::Error> = None;
    let mut push = |error: syn::Error| match &mut errors {
        Some(errors) => errors.combine(error),
        None => errors = Some(error),
    };
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        push(syn::Error::new_spanned(
            sig.fn_token,
            "the `async` keyword is missing: `#[distributed_lock]` only applies to `async fn`",
        ));
    }
    let error_span = match result_error_span(&sig.ident, &sig.output) {
        Ok(span) => span,
        Err(error) => {
            push(error);
            Span::call_site()
        }
    };
    if let Ok(Args {
        on_busy: Some((OnBusy::Skip, span)),
        ..
    }) = &args
        && let Err(error) = returns_result_of_option(&sig.output, *span)
    {
        push(error);
    }
    match &args {
        Err(error) => push(error.clone()),
        Ok(args) => match &args.key {
            None => push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. \
                 `#[distributed_lock(key = \"order:{order_id}\")]`",
            )),
            Some(Key::Template(lit, template)) => {
                if let Err(error) = template.check_params(lit, &sig.ident, &param_names(sig)) {
                    push(error);
                }
            }
            Some(Key::Expr(_)) => {}
        },
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok(Checked {
            args: args?,
            error_span,
        }),
    }
}

/// The span of `E` in a return type `...Result<T, E>` (or of the whole type for an alias such
/// as `io::Result<T>`); an error for any other return type.
fn result_error_span(name: &syn::Ident, output: &ReturnType) -> syn::Result<Span> {
    const MESSAGE: &str = "`#[distributed_lock]` needs the function to return \
                           `Result<T, E>` where `E: From<lock_core::LockError>`";
    let ty = match output {
        ReturnType::Default => {
            return Err(syn::Error::new(
                name.span(),
                format!("{MESSAGE}; this function returns `()`"),
            ));
        }
        ReturnType::Type(_, ty) => ty,
    };
    let mut inner = &**ty;
    while let Type::Group(group) = inner {
        inner = &group.elem;
    }
    let segment = match inner {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    };
    match segment {
        Some(segment) if segment.ident == "Result" => match &segment.arguments {
            PathArguments::AngleBracketed(generics) => {
                let types: Vec<_> = generics
                    .args
                    .iter()
                    .filter_map(|arg| match arg {
                        GenericArgument::Type(ty) => Some(ty),
                        _ => None,
                    })
                    .collect();
                Ok(match types.as_slice() {
                    [_, error] => error.span(),
                    _ => ty.span(),
                })
            }
            _ => Ok(ty.span()),
        },
        _ => Err(syn::Error::new(ty.span(), MESSAGE)),
    }
}

/// Checks that a function with `on_busy = "skip"` returns `...Result<Option<T>, E>`, whose
/// `Ok(None)` says "skipped: someone else holds the lock".
fn returns_result_of_option(output: &ReturnType, on_busy: Span) -> syn::Result<()> {
    const MESSAGE: &str = "`on_busy = \"skip\"` needs the function to return \
                           `Result<Option<T>, E>`: a call that finds the lock busy returns \
                           `Ok(None)` without running the body";
    let ReturnType::Type(_, ty) = output else {
        return Err(syn::Error::new(on_busy, MESSAGE));
    };
    let first_argument = |ty: &Type, name: &str| -> Option<Type> {
        let mut ty = ty;
        while let Type::Group(group) = ty {
            ty = &group.elem;
        }
        let Type::Path(path) = ty else { return None };
        let segment = path.path.segments.last()?;
        if segment.ident != name {
            return None;
        }
        let PathArguments::AngleBracketed(generics) = &segment.arguments else {
            return None;
        };
        generics.args.iter().find_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty.clone()),
            _ => None,
        })
    };
    match first_argument(ty, "Result").and_then(|ok| first_argument(&ok, "Option")) {
        Some(_) => Ok(()),
        None => Err(syn::Error::new(ty.span(), MESSAGE)),
    }
}

/// The names a key may start with: `self` and every name the parameters' patterns bind.
fn param_names(sig: &Signature) -> Vec<String> {
    fn bound(pat: &Pat, names: &mut Vec<String>) {
        match pat {
            Pat::Ident(p) => {
                names.push(p.ident.to_string());
                if let Some((_, sub)) = &p.subpat {
                    bound(sub, names);
                }
            }
            Pat::Type(p) => bound(&p.pat, names),
            Pat::Reference(p) => bound(&p.pat, names),
            Pat::Paren(p) => bound(&p.pat, names),
            Pat::Tuple(p) => p.elems.iter().for_each(|p| bound(p, names)),
            Pat::TupleStruct(p) => p.elems.iter().for_each(|p| bound(p, names)),
            Pat::Slice(p) => p.elems.iter().for_each(|p| bound(p, names)),
            Pat::Struct(p) => p.fields.iter().for_each(|f| bound(&f.pat, names)),
            _ => {}
        }
    }
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(arg) => bound(&arg.pat, &mut names),
        }
    }
    names
}

fn expand(checked: Checked, func: LockedFn) -> TokenStream {
    let Checked { args, error_span } = checked;
    let LockedFn {
        attrs,
        vis,
        sig,
        brace,
        inner_attrs,
        body,
    } = func;
    // A block cannot carry the body's inner attributes (`#![allow(..)]`): they go on the fn.
    let attrs = attrs
        .into_iter()
        .chain(inner_attrs.into_iter().map(|mut attr| {
            attr.style = AttrStyle::Outer;
            attr
        }));

    let client = match &args.client {
        Some(expr) => quote_spanned!(expr.span()=> ::lock_core::__private::client(&(#expr))),
        None => quote!(::lock_core::__private::global_client()),
    };
    let key = key(&args);
    let skip = matches!(args.on_busy, Some((OnBusy::Skip, _)));
    let wait = wait(&args, skip);
    let lease = duration(args.lease.as_ref());
    let request = request(&args);
    let on_lost = match args.on_lost.unwrap_or(OnLost::Abort) {
        OnLost::Abort => quote!(::lock_core::__private::OnLost::Abort),
        OnLost::Continue => quote!(::lock_core::__private::OnLost::Continue),
    };
    let held = match &args.held {
        Some(ident) => ident.to_token_stream(),
        None => quote!(_),
    };
    let fake_return = fake_return_edge(&sig.output);
    let run = if skip {
        quote!(run_or_skip)
    } else {
        quote!(run)
    };
    // Named at the error type, so that a missing `From<LockError>` is reported there.
    let convert = quote_spanned! {error_span=>
        <_ as ::core::convert::From<::lock_core::LockError>>::from
    };

    let mut outer_body = TokenStream::new();
    // The user's braces: the function's span stays the user's, so lints such as `dead_code`
    // still report on it.
    brace.surround(&mut outer_body, |tokens| {
        tokens.extend(quote! {
            ::lock_core::__private::reentrant(async move {
                let __lock_name: ::std::string::String = #key;
                let __lock_acquire = ::lock_core::__private::acquire(
                    #client,
                    move |__lock_client: &::lock_core::LockClient| #request,
                    #wait,
                    #lease,
                );
                ::lock_core::__private::#run(
                    __lock_acquire,
                    #convert,
                    #on_lost,
                    move |#held: ::lock_core::HeldLock| async move {
                        #fake_return
                        #body
                    },
                )
                .await
            })
            .await
        });
    });
    quote! {
        #(#attrs)*
        #vis #sig #outer_body
    }
}

/// How long to wait: as given; skipping makes one attempt unless a wait is given.
fn wait(args: &Args, skip: bool) -> TokenStream {
    match (&args.wait, skip) {
        (None, true) => {
            quote!(::core::option::Option::Some(::core::time::Duration::ZERO))
        }
        (wait, _) => duration(wait.as_ref()),
    }
}

/// The expression that makes the lock's name.
fn key(args: &Args) -> TokenStream {
    match &args.key {
        Some(Key::Template(lit, template)) => template.expand(lit.span()),
        Some(Key::Expr(expr)) => {
            quote_spanned!(expr.span()=> ::std::string::ToString::to_string(&(#expr)))
        }
        None => unreachable!("checked: the key is required"),
    }
}

/// The request the attribute asks for: a semaphore permit, or a lock of its kind.
fn request(args: &Args) -> TokenStream {
    match (args.permits, args.kind.map(|(kind, _)| kind)) {
        (Some((n, span)), _) => {
            let n = LitInt::new(&format!("{n}u32"), span);
            quote!(__lock_client.semaphore(__lock_name, #n).acquire(1))
        }
        (None, None | Some(Kind::Mutex)) => match &args.hold_at_least {
            Some((least, _)) => {
                let least = duration_value(least);
                quote!(__lock_client.lock(__lock_name).hold_at_least(#least))
            }
            None => quote!(__lock_client.lock(__lock_name)),
        },
        (None, Some(Kind::Fair)) => quote!(__lock_client.fair_lock(__lock_name).lock()),
        (None, Some(Kind::Read)) => quote!(__lock_client.read_write_lock(__lock_name).read()),
        (None, Some(Kind::Write)) => quote!(__lock_client.read_write_lock(__lock_name).write()),
    }
}

fn duration(arg: Option<&DurationArg>) -> TokenStream {
    match arg {
        None => quote!(::core::option::Option::None),
        Some(arg) => {
            let value = duration_value(arg);
            quote!(::core::option::Option::Some(#value))
        }
    }
}

/// A `Duration` expression: a literal checked by the parser, or the user's (type-checked by
/// rustc at its own span).
fn duration_value(arg: &DurationArg) -> TokenStream {
    match arg {
        DurationArg::Millis(millis, span) => {
            let millis = LitInt::new(&format!("{millis}u64"), *span);
            quote!(::core::time::Duration::from_millis(#millis))
        }
        DurationArg::Expr(expr) => quote_spanned! {expr.span()=>
            ::core::convert::identity::<::core::time::Duration>(#expr)
        },
    }
}

/// A never-taken `return` of the declared type (with `impl Trait` erased), so the body block
/// infers as the function would.
fn fake_return_edge(output: &ReturnType) -> TokenStream {
    let ReturnType::Type(_, ty) = output else {
        return TokenStream::new();
    };
    let mut ty = (**ty).clone();
    EraseImplTrait.visit_type_mut(&mut ty);
    quote_spanned! {ty.span()=>
        #[allow(
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::needless_return
        )]
        if false {
            let __lock_fake_return: #ty = loop {};
            return __lock_fake_return;
        }
    }
}

/// Replaces every `impl Trait` with `_`, which a `let` type may hold.
struct EraseImplTrait;

impl VisitMut for EraseImplTrait {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(impl_trait) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](impl_trait.span()),
            });
        } else {
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
}
