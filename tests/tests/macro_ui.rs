//! Compile-time behaviour of `#[distributed_lock]`: what compiles (`ui/pass`) and the errors
//! for misuse (`ui/fail`, expected output in the `.stderr` files).
//!
//! The expected output depends on the compiler version. After a toolchain update, or a change
//! to a message, regenerate it with
//! `TRYBUILD=overwrite cargo test -p lock-tests --test macro_ui` and review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
    cases.compile_fail("ui/fail/*.rs");
}
