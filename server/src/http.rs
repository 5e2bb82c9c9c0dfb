//! The server's HTTP endpoints: the Prometheus metrics (`serve
//! --metrics-listen`, `GET /metrics`) and the status page (`serve
//! --http-listen`: `GET /`, its script and style, and `GET /api/status`).
//!
//! One HTTP/1 server serves both, each listener with the routes it was
//! given: the page and the metrics get listeners of their own unless both
//! are given the same address, which then serves both (one bind). Both are
//! served over TLS when the gRPC listener is, with its certificate, and with
//! a token file both need an admin token (`authorization: Bearer TOKEN`).
//!
//! The page is static (embedded in the binary, no build step, nothing
//! fetched from elsewhere): its script polls `/api/status` once a second and
//! builds every row with `textContent`, so a client name is only ever text.
//! A browser cannot add a header to a page it navigates to, so the page's
//! token travels in the URL's fragment (`/#token=...`, which browsers never
//! send to the server) or is typed into the page, and the script sends it
//! with each fetch. Without it the page answers 401 (its body asks for the
//! token); the script and style carry no data and need none.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::metadata::MetadataMap;

use crate::board::StatusBoard;
use crate::metrics::Exporter;

const INDEX_HTML: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const STYLE_CSS: &str = include_str!("page/style.css");

/// What one listener serves.
#[derive(Clone, Default)]
pub struct Routes {
    /// `/metrics`.
    pub metrics: Option<Arc<Exporter>>,
    /// `/`, `/app.js`, `/style.css` and `/api/status`.
    pub page: Option<Arc<StatusBoard>>,
}

/// Who may use the endpoints, and over what.
#[derive(Clone, Default)]
pub struct Access {
    /// The server's tokens: with any, everything but the page's script and
    /// style needs an admin token.
    pub auth: Arc<crate::auth::Auth>,
    /// TLS (the gRPC listener's certificate), if on.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

type Answer = (StatusCode, &'static str, Bytes);

impl Routes {
    fn respond(
        &self,
        request: &Request<Incoming>,
        auth: &crate::auth::Auth,
    ) -> Response<Full<Bytes>> {
        let path = request.uri().path();
        // HEAD is GET without the body (hyper sends none for a HEAD).
        let read = matches!(*request.method(), Method::GET | Method::HEAD);
        let (status, content_type, body) = match (read, path) {
            (true, "/metrics") if self.metrics.is_some() => {
                self.admitted(request, auth).unwrap_or_else(|| {
                    let exporter = self.metrics.as_ref().expect("checked");
                    (
                        StatusCode::OK,
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                        exporter.render().into(),
                    )
                })
            }
            (true, "/") if self.page.is_some() => {
                let status = match self.admitted(request, auth) {
                    // The page's body asks for the token; its script sends it.
                    Some((status, ..)) => status,
                    None => StatusCode::OK,
                };
                (status, "text/html; charset=utf-8", INDEX_HTML.into())
            }
            (true, "/app.js") if self.page.is_some() => (
                StatusCode::OK,
                "text/javascript; charset=utf-8",
                APP_JS.into(),
            ),
            (true, "/style.css") if self.page.is_some() => {
                (StatusCode::OK, "text/css; charset=utf-8", STYLE_CSS.into())
            }
            (true, "/api/status") if self.page.is_some() => match self.admitted(request, auth) {
                Some((status, _, message)) => (status, "application/json", json_error(&message)),
                None => self.api_status(request.uri().query()),
            },
            (false, "/metrics") if self.metrics.is_some() => method_not_allowed(),
            (false, "/" | "/app.js" | "/style.css" | "/api/status") if self.page.is_some() => {
                method_not_allowed()
            }
            _ => (StatusCode::NOT_FOUND, "text/plain", self.not_found().into()),
        };
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        if status == StatusCode::METHOD_NOT_ALLOWED {
            headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        // The page runs only its own script and style: a string that got
        // into the page as markup still could not run or load anything.
        headers.insert(
            "content-security-policy",
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                 img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
        );
        headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
        response
    }

    /// `None` if the request may read: no tokens, or an admin token. Else
    /// the refusal (401 without a token, 403 with one that is not admin).
    fn admitted(&self, request: &Request<Incoming>, auth: &crate::auth::Auth) -> Option<Answer> {
        let headers = MetadataMap::from_headers(request.headers().clone());
        let refused = auth.admin(&headers, "the status page and metrics").err()?;
        let code = match refused.code() {
            ringfeed_proto::tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            _ => StatusCode::FORBIDDEN,
        };
        Some((
            code,
            "text/plain",
            format!("{}\n", refused.message()).into(),
        ))
    }

    /// `/api/status[?subscribers=N][&history=1]`: the `Status` answer as
    /// proto3 JSON with every field, the same object `ringfeed status
    /// --json` (`--history`) prints.
    fn api_status(&self, query: Option<&str>) -> Answer {
        let board = self.page.as_ref().expect("page routes");
        // Unless the request says (`?subscribers=N`).
        let mut limit = ringfeed_proto::wire::OVERVIEW_SUBSCRIBERS;
        let mut history = false;
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("subscribers", n)) => match n.parse() {
                    Ok(n) => limit = n,
                    Err(_) => {
                        return (
                            StatusCode::BAD_REQUEST,
                            "application/json",
                            json_error(&format!(
                                "subscribers={n:?}: expected the number of subscribers to list"
                            )),
                        )
                    }
                },
                Some(("history", "1" | "true")) => history = true,
                Some(("history", "0" | "false")) => history = false,
                _ => {
                    return (
                        StatusCode::BAD_REQUEST,
                        "application/json",
                        json_error(&format!(
                        "unknown parameter {pair:?}: /api/status takes subscribers=N and history=1"
                    )),
                    )
                }
            }
        }
        let request = ringfeed_proto::v1::StatusRequest {
            subscriber_limit: limit,
            history,
        };
        let status = board.status(&request);
        match ringfeed_proto::json::with_defaults(&status, "ringfeed.v1.StatusResponse") {
            Ok(json) => (StatusCode::OK, "application/json", json.to_string().into()),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "application/json",
                json_error(&format!("encoding the status: {e}")),
            ),
        }
    }

    fn not_found(&self) -> String {
        match (&self.page, &self.metrics) {
            (Some(_), Some(_)) => {
                "the status page is at /, its data at /api/status, metrics at /metrics\n"
            }
            (Some(_), None) => "the status page is at /, its data at /api/status\n",
            _ => "metrics are at /metrics\n",
        }
        .to_owned()
    }
}

fn method_not_allowed() -> Answer {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        "text/plain",
        "use GET or HEAD\n".into(),
    )
}

/// `{"error": message}`.
fn json_error(message: &impl AsRef<[u8]>) -> Bytes {
    let message = String::from_utf8_lossy(message.as_ref());
    serde_json::json!({ "error": message.trim_end() })
        .to_string()
        .into()
}

/// Serves `routes` over HTTP/1 (over TLS with `access.tls`) on `listener`
/// until the runtime stops.
pub async fn serve(listener: tokio::net::TcpListener, routes: Routes, access: Access) {
    let acceptor = access.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let routes = Arc::new(routes);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of fds, usually: back off instead of spinning on accept.
                tracing::warn!(error = %e, "HTTP endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let routes = routes.clone();
        let auth = access.auth.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = routes.respond(&request, &auth);
                async move { Ok::<_, Infallible>(response) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            let served = match acceptor {
                None => http.serve_connection(TokioIo::new(stream), service).await,
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls) => http.serve_connection(TokioIo::new(tls), service).await,
                    Err(e) => {
                        tracing::debug!(error = %e, "HTTP endpoint: TLS handshake failed");
                        return;
                    }
                },
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "HTTP endpoint: connection ended");
            }
        });
    }
}
