//! The guide's chapters (`guide/src`, an mdBook), compiled as doc tests, so that every Rust
//! block in the book builds with the crates a service would depend on (blocks that need a
//! server are `no_run`). The macro chapter includes lock-macros' rustdoc, whose examples are
//! lock-macros' own doc tests.

#[doc = include_str!("../../guide/src/introduction.md")]
struct Introduction;

#[doc = include_str!("../../guide/src/locks.md")]
struct Locks;

#[doc = include_str!("../../guide/src/http.md")]
struct HttpLayers;

#[doc = include_str!("../../guide/src/jobs.md")]
struct Jobs;

#[doc = include_str!("../../guide/src/fencing.md")]
struct Fencing;

#[doc = include_str!("../../guide/src/testing.md")]
struct Testing;

#[doc = include_str!("../../guide/src/production.md")]
struct Production;

#[doc = include_str!("../../guide/src/operating.md")]
struct Operating;

#[doc = include_str!("../../guide/src/workspace.md")]
struct Workspace;
