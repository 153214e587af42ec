//! What the answer to a purchase request means, for the load tool and the greedy clients.

/// What one request's answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `201`: an order.
    Accepted,
    /// `410 sold_out`.
    SoldOut,
    /// `409 already_ordered`: the per-buyer check found the buyer's earlier order.
    AlreadyOrdered,
    /// `409 lock_busy`: turned away at once by the buyer lock.
    LockBusy,
    /// `429`: refused by a rate limit.
    RateLimited,
    /// Another `503` (busy, lock lost, unavailable): retryable.
    Busy,
    /// `503 stale_lock`: a stale write refused by the fencing check.
    Stale,
    /// Anything else.
    Error,
}

/// What a purchase's answer means, from its status and problem code.
pub fn classify(status: u16, code: &str) -> Outcome {
    match (status, code) {
        (201, _) => Outcome::Accepted,
        (410, "sold_out") => Outcome::SoldOut,
        (409, "already_ordered") => Outcome::AlreadyOrdered,
        (409, "lock_busy") => Outcome::LockBusy,
        (429, _) => Outcome::RateLimited,
        (503, "stale_lock") => Outcome::Stale,
        (503, _) => Outcome::Busy,
        _ => Outcome::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes() {
        assert_eq!(classify(201, ""), Outcome::Accepted);
        assert_eq!(classify(409, "lock_busy"), Outcome::LockBusy);
        assert_eq!(classify(409, "already_ordered"), Outcome::AlreadyOrdered);
        assert_eq!(classify(503, "stale_lock"), Outcome::Stale);
        assert_eq!(classify(500, "internal"), Outcome::Error);
        assert_eq!(classify(429, "buyer_rate_limited"), Outcome::RateLimited);
    }
}
