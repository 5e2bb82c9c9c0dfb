//! TLS for the gRPC listener and its clients (issue 21), through tonic's
//! rustls support (no OpenSSL). Files are PEM; errors name the file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ringfeed_proto::tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// What `serve --tls-cert --tls-key [--tls-client-ca]` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// What a client's `--tls-ca [--tls-cert --tls-key]` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// The client's own certificate and key (for a server that asks for one).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading the {what} {}", path.display()))
}

impl ServerTls {
    /// The same certificate (and client CA) for a listener tonic does not
    /// serve (the metrics endpoint), as a rustls config offering `alpn`.
    pub fn rustls_config(
        &self,
        alpn: &[u8],
    ) -> Result<std::sync::Arc<tokio_rustls::rustls::ServerConfig>> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio_rustls::rustls;
        let certs = CertificateDer::pem_slice_iter(&read(&self.cert, "TLS certificate")?)
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("the TLS certificate {}", self.cert.display()))?;
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key, "TLS key")?)
            .with_context(|| format!("the TLS key {}", self.key.display()))?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&read(ca, "client CA")?) {
                    roots
                        .add(cert.with_context(|| format!("the client CA {}", ca.display()))?)
                        .with_context(|| format!("the client CA {}", ca.display()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    std::sync::Arc::new(roots),
                    provider,
                )
                .build()
                .context("the client CA")?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .context("the TLS certificate and key")?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(std::sync::Arc::new(config))
    }

    pub fn config(&self) -> Result<ServerTlsConfig> {
        let identity = Identity::from_pem(
            read(&self.cert, "TLS certificate")?,
            read(&self.key, "TLS key")?,
        );
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(read(ca, "client CA")?));
        }
        Ok(config)
    }
}

impl ClientTls {
    /// Whether TLS is asked for at all.
    pub fn enabled(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }

    pub fn config(&self) -> Result<ClientTlsConfig> {
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &self.ca {
            config = config.ca_certificate(Certificate::from_pem(read(ca, "TLS CA")?));
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    read(cert, "TLS certificate")?,
                    read(key, "TLS key")?,
                ));
            }
            (None, None) => {}
            _ => anyhow::bail!("--tls-cert and --tls-key go together"),
        }
        Ok(config)
    }

    /// The URI for `server` with these options: see [`uri`].
    pub fn uri(&self, server: &str) -> Result<String> {
        uri(server, self.enabled())
    }
}

/// The URI for `server` ("host:port" or a URI): https with `tls`. An
/// `http://` address with TLS is refused (it would connect in plaintext and
/// send the token in clear).
pub fn uri(server: &str, tls: bool) -> Result<String> {
    Ok(match (server.contains("://"), tls) {
        (true, true) if server.starts_with("http://") => anyhow::bail!(
            "{server}: an http:// address with TLS options; use https:// or no scheme"
        ),
        (true, _) => server.to_owned(),
        (false, true) => format!("https://{server}"),
        (false, false) => format!("http://{server}"),
    })
}

/// A hint for a connection that failed: the usual cause when one side
/// speaks TLS and the other does not.
pub fn mismatch_hint(tls: bool) -> &'static str {
    if tls {
        " (if the server does not use TLS, leave out --tls-ca)"
    } else {
        " (if the server uses TLS, give --tls-ca with the CA that signed its certificate)"
    }
}
