//! Reaching a server, and saying what went wrong in one line and an exit code.

use anyhow::{Context, Result};
use ringfeed_proto::tonic::service::interceptor::InterceptedService;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::RingFeedClient;

use ringfeed_client::Bearer;

pub(super) const DEFAULT_SERVER: &str = "127.0.0.1:7070";

/// Largest response the client decodes (tonic's default is 4 MiB). A batch of
/// large events can exceed that; the server's own limits are the real bound.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// Which server a client command talks to, and as whom.
#[derive(clap::Args, Clone, Debug)]
pub struct Access {
    /// Server address (a URI with a scheme is also accepted).
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// The token to send (`authorization: Bearer TOKEN`) to a server started with
    /// --token-file.
    #[arg(long, env = "RINGFEED_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Connect over TLS, trusting the server certificate this CA (PEM) signed.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// This client's certificate (PEM), for a server that asks for one (mutual TLS).
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl Access {
    pub(super) fn tls(&self) -> ringfeed_client::tls::ClientTls {
        ringfeed_client::tls::ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        }
    }

    /// The token, if any, to send with every request.
    pub(super) fn bearer(&self) -> Result<Bearer> {
        Bearer::new(self.token.as_deref())
            .ok_or_else(|| anyhow::anyhow!("--token: not a valid token (printable ASCII only)"))
    }
}

pub(super) type Client = RingFeedClient<InterceptedService<Channel, Bearer>>;

pub(super) async fn connect(access: &Access) -> Result<Client> {
    let bearer = access.bearer()?;
    let tls = access.tls();
    let uri = tls.uri(&access.server)?;
    let mut endpoint =
        Channel::from_shared(uri.clone()).with_context(|| format!("server address {uri}"))?;
    if tls.enabled() {
        endpoint = endpoint.tls_config(tls.config()?)?;
    }
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        // Nothing listens there: no TLS hint, which would send the user
        // the wrong way.
        Err(e) if refused(&e) => anyhow::bail!(
            "connecting to {uri}: nothing is listening there (connection refused); is the \
             server running, and at this address (--server)?"
        ),
        // A TLS failure, said as what is wrong and what to do.
        Err(e) => match ringfeed_client::tls::explain(&e, tls.ca.as_deref()) {
            Some(sentence) => anyhow::bail!("connecting to {uri}: {sentence}"),
            None => return Err(anyhow::Error::from(e).context(format!("connecting to {uri}"))),
        },
    };
    // One cheap call (the health service needs no token) so a plaintext
    // client of a TLS server, whose connection only fails at its first
    // call, says so at once.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let asked = tonic_health::pb::HealthCheckRequest::default();
    if let Err(status) = health.check(asked).await {
        // TLS 1.3 servers refuse a client certificate after the handshake:
        // it shows at the first call.
        let diagnosed = match (tls.enabled(), endpoint_host(&uri)) {
            (true, Some((host, port))) => tls.diagnose(&host, port).await,
            _ => None,
        };
        if let Some(sentence) = diagnosed {
            anyhow::bail!("connecting to {uri}: {sentence}");
        }
        let hint = if tls.enabled() {
            ""
        } else {
            " (if the server uses TLS, give --tls-ca with the CA that signed its certificate, \
             or the certificate itself)"
        };
        return Err(Status::new(status.code(), format!("{}{hint}", status.message())).into());
    }
    Ok(RingFeedClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(MAX_RESPONSE_BYTES))
}

/// The host and port of a URI such as `https://127.0.0.1:7070`.
fn endpoint_host(uri: &str) -> Option<(String, u16)> {
    let uri: ringfeed_proto::tonic::codegen::http::Uri = uri.parse().ok()?;
    Some((uri.host()?.to_owned(), uri.port_u16().unwrap_or(443)))
}

/// Exit code and one-line message for an error from a client command:
/// a gRPC status -> (its numeric code, "error: <CODE_NAME>: <message>");
/// anything else -> (1, "error: ...").
/// The tail was stopped by this signal (SIGINT or SIGTERM) after writing
/// what it had taken: exit 128 + the signal's number, as shells report it.
#[derive(Debug, thiserror::Error)]
#[error("stopped by {}", if *.0 == signal_hook::consts::SIGINT { "SIGINT" } else { "SIGTERM" })]
pub struct StoppedBy(pub i32);

/// A tail stopped by a signal -> (128 + its number, "stopped by SIGINT").
pub fn exit_code(err: &anyhow::Error) -> (i32, String) {
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    if let Some(stopped) = err.downcast_ref::<StoppedBy>() {
        return (128 + stopped.0, stopped.to_string());
    }
    if let Some(status) = err.chain().find_map(|e| e.downcast_ref::<Status>()) {
        let code = status.code();
        // Code::Ok as an error would exit 0; it cannot happen, but never lie.
        if code != Code::Ok {
            // The server speaks of headers; a CLI user gives flags.
            let hint = match code {
                Code::Unauthenticated => {
                    " (give the token with --token TOKEN or the RINGFEED_TOKEN environment variable)"
                }
                _ => "",
            };
            return (
                code as i32,
                format!(
                    "error: {}: {}{hint}",
                    code_name(code),
                    one_line(status.message())
                ),
            );
        }
    }
    (1, format!("error: {}", one_line(&error_text(err))))
}

/// The error and its causes, `: `-joined, each said once: a cause whose
/// text its parent already holds (an error whose message ends with its
/// source's, as `thiserror`'s "{what}: {source}" does) is not repeated.
/// (`{:#}` printed "Permission denied (os error 13): Permission denied (os
/// error 13)", and a full disk's "No space left on device" three times.)
pub fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut parent = String::new();
    for cause in err.chain() {
        let said = cause.to_string();
        if parent.is_empty() || !parent.contains(&said) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&said);
        }
        parent = said;
    }
    text
}

/// Whether nothing listened at the address (the connection was refused):
/// not a TLS mismatch, whatever the options.
fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The canonical name of a gRPC status code, as in the gRPC spec.
pub(super) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
