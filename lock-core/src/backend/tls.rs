//! TLS for `rediss://` connections: the builder's certificates (a custom CA, a client identity
//! for mutual TLS), the development-only opt-out of verification, and what a failed handshake
//! means. Every function here works without the `tls` feature too: it then refuses TLS with
//! [`LockError::InvalidOption`] instead of connecting in plain text.

use redis::{ConnectionAddr, ConnectionInfo, RedisError};

use crate::error::LockError;

/// The builder's TLS options. They apply to every `rediss://` connection of the client
/// (the command pool, pub/sub, the sentinels and the primary they name, every Cluster node);
/// `redis://` connections ignore them.
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// PEM certificates to trust instead of the system's roots.
    pub(crate) roots: Option<Vec<u8>>,
    /// A PEM certificate chain and its PEM private key, for mutual TLS.
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept any certificate (development only).
    pub(crate) insecure: bool,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsOptions")
            .field("root_certificate", &self.roots.is_some())
            .field("client_identity", &self.identity.is_some())
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// Whether a parsed URL is `rediss://`.
pub(crate) fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

impl TlsOptions {
    /// The first option that was set, to name it in an error.
    fn first_set(&self) -> Option<&'static str> {
        if self.roots.is_some() {
            Some("tls_root_certificate")
        } else if self.identity.is_some() {
            Some("tls_client_identity")
        } else if self.insecure {
            Some("danger_accept_invalid_certificates")
        } else {
            None
        }
    }

    /// Checks the options before anything connects: the PEMs parse, and some connection of the
    /// deployment uses TLS (`any_tls`), so a certificate is never given for nothing while the
    /// client talks in plain text.
    pub(crate) fn check(&self, any_tls: bool) -> Result<(), LockError> {
        let Some(option) = self.first_set() else {
            return Ok(());
        };
        #[cfg(not(feature = "tls"))]
        {
            let _ = any_tls;
            Err(without_feature(option))
        }
        #[cfg(feature = "tls")]
        {
            if !any_tls {
                return Err(LockError::InvalidOption {
                    option,
                    reason: "no URL of the client is rediss://, so no connection would use TLS"
                        .to_owned(),
                });
            }
            enabled::check_pems(self)
        }
    }

    /// Applies the options to a parsed address when it is TLS (a `rediss://` URL); a plain
    /// one is returned as it is.
    pub(crate) fn apply(
        &self,
        info: ConnectionInfo,
        option: &'static str,
    ) -> Result<ConnectionInfo, LockError> {
        if !is_tls(&info) {
            return Ok(info);
        }
        #[cfg(feature = "tls")]
        {
            enabled::apply(self, info).map_err(|e| LockError::InvalidOption {
                option,
                reason: e.to_string(),
            })
        }
        #[cfg(not(feature = "tls"))]
        {
            Err(without_feature(option))
        }
    }

    /// Sets up a Cluster client builder whose seed nodes are `seeds`: TLS with the options
    /// when the first seed is `rediss://` (the redis crate refuses seeds that disagree).
    pub(crate) fn cluster(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
        seeds: &[ConnectionInfo],
    ) -> Result<redis::cluster::ClusterClientBuilder, RedisError> {
        let Some(ConnectionAddr::TcpTls { insecure, .. }) = seeds.first().map(ConnectionInfo::addr)
        else {
            return Ok(builder);
        };
        #[cfg(feature = "tls")]
        {
            Ok(enabled::cluster(self, builder, *insecure))
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (builder, insecure);
            Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "rediss:// needs lock-core's `tls` feature",
            )))
        }
    }
}

#[cfg(not(feature = "tls"))]
fn without_feature(option: &'static str) -> LockError {
    LockError::InvalidOption {
        option,
        reason: "TLS needs lock-core's `tls` feature (on by default)".to_owned(),
    }
}

/// If `e` is a failed TLS handshake, what went wrong, in words that say what to change.
pub(crate) fn failure(e: &RedisError) -> Option<String> {
    #[cfg(feature = "tls")]
    {
        enabled::failure(e)
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = e;
        None
    }
}

#[cfg(feature = "tls")]
mod enabled {
    use std::error::Error;
    use std::sync::Arc;

    use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, RedisError, TlsCertificates};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::{AlertDescription, CertificateError};

    use super::TlsOptions;
    use crate::error::LockError;

    /// The redis crate builds its rustls configurations with the process-wide default crypto
    /// provider; install ring's unless the application installed one.
    fn ensure_provider() {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: one provider is installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    }

    fn certificates(options: &TlsOptions) -> Option<TlsCertificates> {
        if options.roots.is_none() && options.identity.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: options
                .identity
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: options.roots.clone(),
        })
    }

    fn invalid(option: &'static str, reason: String) -> LockError {
        LockError::InvalidOption { option, reason }
    }

    fn chain(pem: &[u8], option: &'static str) -> Result<Vec<CertificateDer<'static>>, LockError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(option, format!("not a PEM certificate: {e}")))?;
        if certs.is_empty() {
            return Err(invalid(
                option,
                "no certificate (-----BEGIN CERTIFICATE-----) in the PEM".to_owned(),
            ));
        }
        Ok(certs)
    }

    /// Parses every PEM the way the handshake will, so a bad one fails `build()` naming its
    /// option instead of failing every connection.
    pub(super) fn check_pems(options: &TlsOptions) -> Result<(), LockError> {
        ensure_provider();
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &options.roots {
            for cert in chain(pem, "tls_root_certificate")? {
                roots.add(cert).map_err(|e| {
                    invalid(
                        "tls_root_certificate",
                        format!("not a usable CA certificate: {e}"),
                    )
                })?;
            }
        }
        if let Some((cert, key)) = &options.identity {
            const OPTION: &str = "tls_client_identity";
            let certs = chain(cert, OPTION)?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| invalid(OPTION, format!("not a PEM private key: {e}")))?;
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(OPTION, e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| invalid(OPTION, format!("the key does not fit the certificate: {e}")))?;
        }
        Ok(())
    }

    pub(super) fn apply(
        options: &TlsOptions,
        info: ConnectionInfo,
    ) -> Result<ConnectionInfo, RedisError> {
        ensure_provider();
        let ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } = info.addr().clone()
        else {
            return Ok(info);
        };
        let info = info.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: insecure || options.insecure,
            tls_params: None,
        });
        match certificates(options) {
            Some(certs) => Ok(redis::Client::build_with_tls(info, certs)?
                .get_connection_info()
                .clone()),
            None => Ok(info),
        }
    }

    pub(super) fn cluster(
        options: &TlsOptions,
        mut builder: redis::cluster::ClusterClientBuilder,
        insecure_url: bool,
    ) -> redis::cluster::ClusterClientBuilder {
        ensure_provider();
        if let Some(certs) = certificates(options) {
            builder = builder.certs(certs);
        }
        // After `certs`, which sets verified TLS.
        if insecure_url || options.insecure {
            builder = builder.tls(redis::TlsMode::Insecure);
        }
        builder
    }

    /// The rustls error somewhere in `e`'s chain: the redis crate keeps an I/O error in an
    /// `Arc`, and an I/O error keeps rustls's error as its inner error (not its source).
    fn find<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && let Some(tls) = find(inner)
        {
            return Some(tls);
        }
        if let Some(arc) = e.downcast_ref::<Arc<dyn Error + Send + Sync>>()
            && let Some(tls) = find(&**arc)
        {
            return Some(tls);
        }
        e.source().and_then(find)
    }

    pub(super) fn failure(e: &RedisError) -> Option<String> {
        let tls = find(e.source()?)?;
        Some(match tls {
            // A CA of the same name as a trusted one, but another key: BadSignature.
            rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer | CertificateError::BadSignature,
            ) => "the server's certificate is not signed by a trusted CA \
                 (give its CA with tls_root_certificate)"
                .to_owned(),
            rustls::Error::InvalidCertificate(CertificateError::NotValidForName)
            | rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                ..
            }) => "the server's certificate is not valid for the host name or address in the URL"
                .to_owned(),
            rustls::Error::InvalidCertificate(other) => {
                format!("the server's certificate was refused: {other:?}")
            }
            rustls::Error::AlertReceived(
                alert @ (AlertDescription::CertificateRequired
                | AlertDescription::HandshakeFailure
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::AccessDenied),
            ) => format!(
                "the server refused the client: alert {alert:?} (it requires a client \
                 certificate it trusts: tls_client_identity)"
            ),
            rustls::Error::InvalidMessage(_) => {
                "the server did not answer in TLS (is this a plain redis:// port?)".to_owned()
            }
            other => other.to_string(),
        })
    }
}
