//! Key extractors for the client's address: [`PeerIp`], the address of the connection
//! (axum's `ConnectInfo<SocketAddr>`), and [`ForwardedIp`], the client's address as the
//! service's own trusted proxies recorded it (`X-Forwarded-For` or `Forwarded`). Each is a
//! [`KeyExtractor`], usable by the lock, rate-limit and idempotency layers (a per-IP rate
//! limit, say). Keys are the address alone (no port), written as [`IpAddr`] writes it
//! (`192.0.2.7`, `2001:db8::1`).

use std::net::{IpAddr, SocketAddr};

use http::{HeaderName, Request};

use crate::keyed::extract::KeyExtractor;

/// The key is the IP address of the connection the request came on: axum's
/// `ConnectInfo<SocketAddr>`, which axum adds when the app is served with
/// `into_make_service_with_connect_info::<SocketAddr>()`. Without it no request has a key
/// (the layer's [`missing_key`](crate::DistributedLockLayer::missing_key) policy applies:
/// `400` by default), so serve the app that way.
///
/// Behind a proxy or a load balancer every request comes from the proxy: use
/// [`ForwardedIp`] there.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::{extract::ConnectInfo, http::Request};
/// use lock_tower::{KeyExtractor, PeerIp};
///
/// let mut req = Request::builder().body(()).unwrap();
/// let peer: SocketAddr = "192.0.2.7:50123".parse().unwrap();
/// req.extensions_mut().insert(ConnectInfo(peer));
/// assert_eq!(PeerIp.extract(&req).as_deref(), Some("192.0.2.7"));
///
/// // Served with connect info:
/// // axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
/// ```
#[cfg(feature = "axum")]
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

#[cfg(feature = "axum")]
impl<B> KeyExtractor<B> for PeerIp {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        let axum::extract::ConnectInfo(peer) = request
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()?;
        Some(canonical(peer.ip()))
    }
}

/// Which header a [`ForwardedIp`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// The key is the client's IP address as the service's own proxies recorded it, counting
/// `trusted_hops` proxies from the service: each proxy appends the address it received the
/// request from, so with `n` trusted proxies in front of the service the client is the `n`-th
/// address from the right. Addresses left of it were written by the client or by proxies the
/// service does not control, and are never used: a client cannot choose its key by sending
/// the header itself.
///
/// Read from `X-Forwarded-For` ([`x_forwarded_for`](Self::x_forwarded_for)) or from
/// `Forwarded`'s `for=` parameters ([`forwarded`](Self::forwarded), RFC 7239): the one your
/// proxies write, never both (a client could send the other). Every line of the header
/// counts, in order. A request with fewer addresses than `trusted_hops` (it did not come
/// through all the proxies), or whose address there is not an IP (`unknown`, an obfuscated
/// `_node`), has no key. `trusted_hops` of 0 is never a key: use [`PeerIp`] for the
/// connection's own address.
///
/// ```
/// use axum::http::Request;
/// use lock_tower::{ForwardedIp, KeyExtractor};
///
/// // One load balancer in front of the service: the last address is the client's.
/// let key = ForwardedIp::x_forwarded_for(1);
/// let req = Request::builder()
///     .header("x-forwarded-for", "10.0.0.1, 203.0.113.9") // the first one is the client's say
///     .body(())
///     .unwrap();
/// assert_eq!(key.extract(&req).as_deref(), Some("203.0.113.9"));
///
/// // A CDN, then a load balancer: the second address from the right.
/// let key = ForwardedIp::forwarded(2);
/// let req = Request::builder()
///     .header("forwarded", r#"for=192.0.2.60;proto=https, for="[2001:db8:cafe::17]:4711""#)
///     .header("forwarded", "for=198.51.100.2")
///     .body(())
///     .unwrap();
/// assert_eq!(key.extract(&req).as_deref(), Some("2001:db8:cafe::17"));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ForwardedIp {
    field: Field,
    trusted_hops: usize,
}

impl ForwardedIp {
    /// From `X-Forwarded-For`, with `trusted_hops` proxies of the service's own in front of
    /// it (1: one load balancer).
    pub const fn x_forwarded_for(trusted_hops: usize) -> Self {
        Self {
            field: Field::XForwardedFor,
            trusted_hops,
        }
    }

    /// From `Forwarded`'s `for=` parameters (RFC 7239), with `trusted_hops` proxies of the
    /// service's own in front of it.
    pub const fn forwarded(trusted_hops: usize) -> Self {
        Self {
            field: Field::Forwarded,
            trusted_hops,
        }
    }

    /// The addresses of the header, in order (one per hop, as written).
    fn hops<'a, B>(&self, request: &'a Request<B>) -> Vec<&'a str> {
        let name = match self.field {
            Field::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            Field::Forwarded => http::header::FORWARDED,
        };
        let mut hops = Vec::new();
        for line in request.headers().get_all(name) {
            // A line that is not visible ASCII cannot be trusted to split right: no key.
            let Ok(line) = line.to_str() else {
                return Vec::new();
            };
            for element in line.split(',') {
                match self.field {
                    Field::XForwardedFor => hops.push(element.trim()),
                    Field::Forwarded => hops.push(for_of(element)),
                }
            }
        }
        hops
    }
}

impl<B> KeyExtractor<B> for ForwardedIp {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        let hops = self.hops(request);
        let index = hops.len().checked_sub(self.trusted_hops)?;
        if self.trusted_hops == 0 {
            return None;
        }
        parse_node(hops[index]).map(canonical)
    }
}

/// The `for=` value of one `Forwarded` element (`for=x;proto=y`), or "" when it has none.
fn for_of(element: &str) -> &str {
    element
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
        .map_or("", |(_, value)| value.trim())
}

/// The IP address of a node as the headers write it: `192.0.2.7`, `192.0.2.7:80`,
/// `2001:db8::1`, `[2001:db8::1]`, `"[2001:db8::1]:4711"`; None for anything else.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    let bracketed = node.strip_prefix('[')?.split(']').next()?;
    bracketed.parse().ok()
}

/// The key of an address: an IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut req = Request::builder();
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(()).unwrap()
    }

    fn key(extractor: ForwardedIp, headers: &[(&str, &str)]) -> Option<String> {
        extractor.extract(&req(headers))
    }

    #[test]
    fn x_forwarded_for_counts_trusted_hops_from_the_right() {
        let xff = |hops| ForwardedIp::x_forwarded_for(hops);
        let h = [("x-forwarded-for", "1.1.1.1, 2.2.2.2 ,3.3.3.3")];
        assert_eq!(key(xff(1), &h).as_deref(), Some("3.3.3.3"));
        assert_eq!(key(xff(2), &h).as_deref(), Some("2.2.2.2"));
        assert_eq!(key(xff(3), &h).as_deref(), Some("1.1.1.1"));
        assert_eq!(key(xff(4), &h), None, "fewer addresses than hops");
        assert_eq!(key(xff(0), &h), None);
        // Lines count in order; a spoofed address left of the trusted ones is never used.
        let lines = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "4.4.4.4, 5.5.5.5"),
        ];
        assert_eq!(key(xff(2), &lines).as_deref(), Some("4.4.4.4"));
        assert_eq!(key(xff(1), &[]), None);
        assert_eq!(key(xff(1), &[("x-forwarded-for", "unknown")]), None);
        // Ports and IPv6, written one way.
        assert_eq!(
            key(xff(1), &[("x-forwarded-for", "[2001:DB8::1]:443")]).as_deref(),
            Some("2001:db8::1")
        );
        assert_eq!(
            key(xff(1), &[("x-forwarded-for", "::ffff:192.0.2.1")]).as_deref(),
            Some("192.0.2.1")
        );
        assert_eq!(
            key(xff(1), &[("x-forwarded-for", "192.0.2.1:8080")]).as_deref(),
            Some("192.0.2.1")
        );
        // The other header is not read.
        assert_eq!(key(xff(1), &[("forwarded", "for=1.2.3.4")]), None);
    }

    #[test]
    fn forwarded_reads_the_for_parameters() {
        let fwd = |hops| ForwardedIp::forwarded(hops);
        let h = [(
            "forwarded",
            r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#,
        )];
        assert_eq!(key(fwd(1), &h).as_deref(), Some("2001:db8:cafe::17"));
        assert_eq!(key(fwd(2), &h).as_deref(), Some("192.0.2.60"));
        assert_eq!(key(fwd(1), &[("forwarded", "for=_hidden")]), None);
        assert_eq!(key(fwd(1), &[("forwarded", "proto=https")]), None);
        assert_eq!(key(fwd(1), &[("x-forwarded-for", "1.2.3.4")]), None);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn the_peer_ip_is_the_connections_address() {
        let mut req = req(&[]);
        assert_eq!(PeerIp.extract(&req), None, "served without connect info");
        let peer: SocketAddr = "[::ffff:10.1.2.3]:9".parse().unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        assert_eq!(PeerIp.extract(&req).as_deref(), Some("10.1.2.3"));
    }
}
