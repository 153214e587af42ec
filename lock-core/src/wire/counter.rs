//! The native protocol's fencing counters: one per Cluster slot (one per server elsewhere),
//! `Pfence` or `Pfence:{tag}` with a tag that hashes to the slot.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::cluster_routing::Slot;

/// The fencing counter of `slot` (None: the only counter of a server).
pub(crate) fn counter(prefix: &str, slot: Option<Slot>) -> String {
    match slot {
        Some(slot) => format!("{prefix}fence:{{{}}}", tag_of(slot)),
        None => format!("{prefix}fence"),
    }
}

/// A hash tag that falls in `slot`: the smallest number, in decimal, whose CRC16 does. The
/// table is made once, the first time a Cluster asks (about 16,384 × ln 16,384 hashes).
fn tag_of(slot: Slot) -> &'static str {
    static TAGS: LazyLock<HashMap<Slot, String>> = LazyLock::new(|| {
        let mut tags = HashMap::with_capacity(SLOTS);
        let mut n: u64 = 0;
        while tags.len() < SLOTS {
            let tag = n.to_string();
            tags.entry(Slot::for_key(&tag)).or_insert(tag);
            n += 1;
        }
        tags
    });
    TAGS.get(&slot).map_or("0", String::as_str)
}

/// Slots in a Cluster.
const SLOTS: usize = 16_384;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_outside_every_lock_key_and_in_the_locks_slot() {
        assert_eq!(counter("lock:", None), "lock:fence");
        for name in ["order:42", "a", "lottery:2026-11-24T12:00:00Z"] {
            let key = format!("lock:{{{name}}}");
            let slot = Slot::for_key(&key);
            let counter = counter("lock:", Some(slot));
            assert!(counter.starts_with("lock:fence:{"), "{counter}");
            assert_eq!(
                Slot::for_key(&counter),
                slot,
                "{counter} is in {key}'s slot"
            );
        }
    }
}
