//! What every layer that names a Redis object after a request shares: the key extractors
//! (`extract`, `client_ip`), the rules that make a key a name (`name`), the key settings and
//! their builder setters (`settings`), the one step from a request to its object's name
//! (`request`), the one decision once the store failed, failing open or not (`decision`),
//! and the words each layer uses in them (`words`). The layers (`lock`, `rate`,
//! `idempotency`) sit above it; nothing here imports them.

pub(crate) mod client_ip;
pub(crate) mod decision;
pub(crate) mod extract;
pub(crate) mod name;
pub(crate) mod request;
pub(crate) mod settings;
pub(crate) mod validate;
pub(crate) mod words;
