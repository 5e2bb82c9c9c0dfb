//! TLS to a ringfeed server (issue 21), through tonic's rustls support (no
//! OpenSSL): what `--tls-ca [--tls-cert --tls-key]` trusts and presents,
//! and the sentences a refused handshake is said in. Files are PEM; errors
//! name the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use ringfeed_proto::tonic::transport::ClientTlsConfig;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// What a client's `--tls-ca [--tls-cert --tls-key]` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// The client's own certificate and key (for a server that asks for one).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// A PEM file's bytes; the error names the file as `what`.
pub fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading the {what} {}", path.display()))
}

/// A certificate chain and its key, from PEM files.
pub fn certificate_and_key(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs = CertificateDer::pem_slice_iter(&read(cert, "TLS certificate")?)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("the TLS certificate {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&read(key, "TLS key")?)
        .with_context(|| format!("the TLS key {}", key.display()))?;
    Ok((certs, key))
}

impl ClientTls {
    /// Whether TLS is asked for at all.
    pub fn enabled(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }

    /// The rustls configuration a client connects with: the server's
    /// certificate checked by [`SignedOrPinned`] against `--tls-ca`, this
    /// client's certificate if given, HTTP/2 offered.
    pub fn rustls_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let Some(ca) = &self.ca else {
            anyhow::bail!("TLS needs --tls-ca: the CA that signed the server's certificate");
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SignedOrPinned::new(ca)?));
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let (certs, key) = certificate_and_key(cert, key)?;
                builder
                    .with_client_auth_cert(certs, key)
                    .context("the TLS certificate and key")?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => anyhow::bail!("--tls-cert and --tls-key go together"),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    pub fn config(&self) -> Result<ClientTlsConfig> {
        Ok(ClientTlsConfig::new().rustls_client_config(self.rustls_config()?))
    }

    /// Why a TLS server closed a connection this client made after the
    /// handshake (a TLS 1.3 server refuses a client certificate then, and
    /// HTTP/2 reports only "broken pipe"): a connection of its own to
    /// `host:port` that completes the handshake and reads the server's
    /// answer to the HTTP/2 preface. The TLS failure found, if any, as
    /// [`explain`] says it.
    pub async fn diagnose(&self, host: &str, port: u16) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let config = self.rustls_config().ok()?;
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .ok()?
            .to_owned();
        let probe = async {
            let tcp = tokio::net::TcpStream::connect((host, port)).await?;
            let mut tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            // The HTTP/2 preface and an empty SETTINGS frame.
            tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
                .await?;
            tls.flush().await?;
            let mut buf = [0u8; 256];
            loop {
                if tls.read(&mut buf).await? == 0 {
                    return Ok(());
                }
            }
        };
        let probed: std::io::Result<()> =
            match tokio::time::timeout(std::time::Duration::from_secs(5), probe).await {
                Ok(result) => result,
                Err(_) => return None,
            };
        let err = probed.err()?;
        explain(&err, self.ca.as_deref())
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

/// How a client checks the server's certificate against `--tls-ca FILE`:
/// as webpki does (signed by a CA in FILE, valid now, for the name
/// connected to), and also accepting a certificate FILE holds itself,
/// byte for byte, if it is valid now and for that name. That is the
/// self-signed certificate `openssl req -x509` makes, given as its own CA:
/// Go clients, grpcurl and grpcio accept it, and webpki alone refuses it
/// ("CaUsedAsEndEntity"). A pinned certificate proves nothing more than
/// the exact bytes the user handed over, and the handshake still proves the
/// server holds its key.
#[derive(Debug)]
struct SignedOrPinned {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl SignedOrPinned {
    fn new(ca: &Path) -> Result<SignedOrPinned> {
        let what = || format!("the TLS CA {}", ca.display());
        let pinned = CertificateDer::pem_slice_iter(&read(ca, "TLS CA")?)
            .collect::<Result<Vec<_>, _>>()
            .with_context(what)?;
        if pinned.is_empty() {
            anyhow::bail!("{}: no PEM certificate in it", what());
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in &pinned {
            roots.add(cert.clone()).with_context(what)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let webpki =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .with_context(what)?;
        Ok(SignedOrPinned {
            webpki,
            pinned,
            algorithms,
        })
    }
}

impl ServerCertVerifier for SignedOrPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let signed = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match signed {
            // webpki checks the validity period before it looks at the
            // certificate's CA flag or issuer, so these two errors say the
            // certificate is valid now (an expired one fails as expired).
            // The test `a_self_signed_certificate_is_its_own_ca` keeps that
            // true for the webpki in Cargo.lock.
            Err(rustls::Error::InvalidCertificate(ref e))
                if (ca_used_as_end_entity(e) || *e == CertificateError::UnknownIssuer)
                    && self
                        .pinned
                        .iter()
                        .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// webpki's "a CA certificate was presented as the server's own", which
/// rustls passes on as an opaque `Other` error.
fn ca_used_as_end_entity(e: &CertificateError) -> bool {
    matches!(e, CertificateError::Other(other)
        if other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity))
}

/// The TLS failure in `err`'s chain, if any, as a sentence that says what
/// is wrong and what to do. `ca` is the client's `--tls-ca`, if given.
/// Certificate errors come from this client checking the server; alerts
/// from the server refusing this client.
pub fn explain(err: &(dyn std::error::Error + 'static), ca: Option<&Path>) -> Option<String> {
    let mut cause = Some(err);
    let mut found = None;
    while let Some(e) = cause {
        // An io::Error's `source` skips the error it wraps: look inside.
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(tls) = e.downcast_ref::<rustls::Error>().or(inner) {
            found = Some(tls);
            break;
        }
        cause = e.source();
    }
    let ca = ca
        .map(|ca| ca.display().to_string())
        .unwrap_or_else(|| "--tls-ca".to_owned());
    use rustls::AlertDescription as Alert;
    Some(match found? {
        rustls::Error::InvalidCertificate(e) => match e {
            e if ca_used_as_end_entity(e) => format!(
                "the server's certificate is a CA certificate that {ca} does not hold: give \
                 --tls-ca that very certificate, or serve a certificate the CA signed"
            ),
            CertificateError::UnknownIssuer => format!(
                "the server's certificate was not signed by a CA in {ca} (nor is it in that \
                 file): give --tls-ca the CA that signed it"
            ),
            CertificateError::BadSignature => format!(
                "the server's certificate names a CA in {ca} as its signer, but that CA's key \
                 did not sign it (a CA made again under the same name?): give --tls-ca the CA \
                 that signed it"
            ),
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => format!(
                "the server's certificate is not valid for {} (it is for {}): use an address \
                 it names in --server, or reissue it with that address in its subjectAltName",
                server_name(expected),
                if presented.is_empty() {
                    "no name".to_owned()
                } else {
                    presented
                        .iter()
                        .map(|name| presented_name(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            CertificateError::NotValidForName => "the server's certificate is not valid for \
                 the address in --server: use an address it names, or reissue it"
                .to_owned(),
            CertificateError::ExpiredContext { not_after, .. } => format!(
                "the server's certificate expired at {}: the server needs a new one",
                utc(*not_after)
            ),
            CertificateError::Expired => {
                "the server's certificate has expired: the server needs a new one".to_owned()
            }
            CertificateError::NotValidYetContext { not_before, .. } => format!(
                "the server's certificate is not valid before {}: check this machine's clock \
                 and the certificate",
                utc(*not_before)
            ),
            CertificateError::NotValidYet => "the server's certificate is not valid yet: check \
                 this machine's clock and the certificate"
                .to_owned(),
            other => format!("the server's certificate was refused: {other}"),
        },
        rustls::Error::AlertReceived(Alert::CertificateRequired | Alert::HandshakeFailure) => {
            "the server refused the connection: it asks for a client certificate (give \
             --tls-cert and --tls-key, signed by the CA of its --tls-client-ca)"
                .to_owned()
        }
        rustls::Error::AlertReceived(
            Alert::UnknownCA | Alert::BadCertificate | Alert::DecryptError,
        ) => "the server refused this client's certificate (--tls-cert): it was not signed \
             by the CA of the server's --tls-client-ca"
            .to_owned(),
        rustls::Error::AlertReceived(Alert::CertificateExpired) => {
            "the server refused this client's certificate (--tls-cert): it has expired".to_owned()
        }
        rustls::Error::InvalidMessage(_) => {
            "the server does not answer in TLS: if it was started without --tls-cert, leave \
             out --tls-ca"
                .to_owned()
        }
        other => format!("TLS: {other}"),
    })
}

/// A certificate's time, as RFC 3339 UTC.
fn utc(time: UnixTime) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(time.as_secs());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A name webpki found in a certificate, as the user wrote it: webpki
/// gives `DnsName("host")` and `IpAddress(10.0.0.1)`.
fn presented_name(name: &str) -> &str {
    name.split_once('(')
        .and_then(|(_, inner)| inner.strip_suffix(')'))
        .map(|inner| inner.trim_matches('"'))
        .unwrap_or(name)
}

fn server_name(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}
