//! [`Words`]: how a keyed layer names itself in the events and answers of the steps every
//! keyed layer shares (naming a request's object, deciding after the store's answer).

/// The words that differ between keyed layers in their shared steps.
#[derive(Debug)]
pub(crate) struct Words {
    /// The layer in its events: `the {layer} layer is misconfigured`, `invalid {layer} key`.
    pub(crate) layer: &'static str,
    /// The layer in a rejection's log event ([`Rejection::by_layer`](crate::rejection::Rejection::by_layer)).
    pub(crate) label: &'static str,
    /// The detail of the `400` of a request without a key.
    pub(crate) missing_key: &'static str,
    /// The `warn` of a request let through without the layer while the store is unavailable.
    pub(crate) fail_open: &'static str,
    /// What failed, in the `error` of a call the store refused: `{failed}; the layer is
    /// misconfigured`.
    pub(crate) failed: &'static str,
}
