//! Throwaway TLS material for tests, made with the `openssl` command: a CA, a server
//! certificate for `127.0.0.1` and `localhost` (also usable as a client certificate, which
//! Redis presents on replication and Cluster bus links), and a client certificate, all signed
//! by the CA, with P-256 keys, valid for two days. [`RedisServer::start_tls`](crate::server::RedisServer::start_tls)
//! starts a server that uses them.
//!
//! The `openssl` binary is taken from the `OPENSSL_BIN` environment variable and defaults to
//! `openssl` on the `PATH`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

/// Whether a TLS server asks for client certificates (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for (`no`).
    No,
    /// A client certificate is checked if given (`optional`).
    Optional,
    /// A client certificate signed by the CA is required (`yes`).
    Required,
}

impl ClientAuth {
    /// The value of `--tls-auth-clients`.
    pub fn arg(self) -> &'static str {
        match self {
            ClientAuth::No => "no",
            ClientAuth::Optional => "optional",
            ClientAuth::Required => "yes",
        }
    }
}

/// A CA with a server and a client certificate, in PEM files in a temporary directory that is
/// deleted on drop.
pub struct TlsFiles {
    dir: TempDir,
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl TlsFiles {
    /// Makes a fresh CA and its certificates (a few tens of milliseconds).
    ///
    /// # Panics
    ///
    /// Panics if `openssl` cannot be run or fails.
    pub fn generate() -> TlsFiles {
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-tls-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let files = TlsFiles { dir };
        files.write(
            "server.ext",
            "basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth,clientAuth\n\
             subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        );
        files.write(
            "client.ext",
            "basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=clientAuth\n",
        );
        // Each CA its own name, as real CAs have.
        let ca_subject = format!("/CN=lock-tests CA {}", crate::unique::unique_name("ca"));
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        files.openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    &ca_subject,
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
        );
        for (name, subject) in [
            ("server", "/CN=localhost"),
            ("client", "/CN=lock-tests client"),
        ] {
            let (key, csr, crt, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            files.openssl(
                &[
                    &["req", "-new"][..],
                    &ec,
                    &["-keyout", &key, "-out", &csr, "-subj", subject],
                ]
                .concat(),
            );
            let serial = format!("0x{}", &crate::unique::unique_name("s")[2..18]);
            files.openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &serial,
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &crt,
            ]);
        }
        files
    }

    fn write(&self, name: &str, text: &str) {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    fn openssl(&self, args: &[&str]) {
        let binary = std::env::var("OPENSSL_BIN").unwrap_or_else(|_| "openssl".to_owned());
        let output = Command::new(&binary)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {binary:?} (set OPENSSL_BIN?): {e}"));
        assert!(
            output.status.success(),
            "{binary} {args:?} failed with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn read(&self, name: &str) -> Vec<u8> {
        let path = self.path(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate file (`--tls-ca-cert-file`).
    pub fn ca_cert_file(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// The server certificate file (`--tls-cert-file`).
    pub fn server_cert_file(&self) -> PathBuf {
        self.path("server.crt")
    }

    /// The server key file (`--tls-key-file`).
    pub fn server_key_file(&self) -> PathBuf {
        self.path("server.key")
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.read("ca.crt")
    }

    /// The client certificate, PEM.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        self.read("client.crt")
    }

    /// The client's private key, PEM (PKCS#8).
    pub fn client_key_pem(&self) -> Vec<u8> {
        self.read("client.key")
    }

    /// The `redis-server` arguments that serve TLS on `tls_port` with these files (the plain
    /// `--port` stays, for the harness's own commands).
    pub fn server_args(&self, tls_port: u16, auth: ClientAuth) -> Vec<String> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path(self.server_cert_file()),
            "--tls-key-file".to_owned(),
            path(self.server_key_file()),
            "--tls-ca-cert-file".to_owned(),
            path(self.ca_cert_file()),
            "--tls-auth-clients".to_owned(),
            auth.arg().to_owned(),
        ]
    }
}
