//! TLS for the gRPC listener (issue 21), through tonic's rustls support (no
//! OpenSSL). Files are PEM; errors name the file. The client half (what
//! `--tls-ca` trusts, and the sentences a refusal is said in) is the client
//! crate's: peers dial through it too.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ringfeed_client::tls::{certificate_and_key, read};
pub use ringfeed_client::tls::{explain, uri, ClientTls};
use ringfeed_proto::tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;

/// What `serve --tls-cert --tls-key [--tls-client-ca]` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl ServerTls {
    /// The same certificate (and client CA) for a listener tonic does not
    /// serve (the metrics endpoint), as a rustls config offering `alpn`.
    pub fn rustls_config(
        &self,
        alpn: &[u8],
    ) -> Result<std::sync::Arc<tokio_rustls::rustls::ServerConfig>> {
        let (certs, key) = certificate_and_key(&self.cert, &self.key)?;
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
