//! The token a client sends as `authorization: Bearer TOKEN`.

use ringfeed_proto::tonic::{self, Status};

/// A token sent as `authorization: Bearer TOKEN` with every request, for a
/// server started with --token-file (none: nothing is sent). Also a tonic
/// interceptor, for clients made with `with_interceptor`.
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// `None` when `token` is not a valid header value (printable ASCII only).
    pub fn new(token: Option<&str>) -> Option<Bearer> {
        match token {
            None => Some(Bearer(None)),
            Some(t) => format!("Bearer {t}").parse().ok().map(|v| Bearer(Some(v))),
        }
    }

    /// Adds the token, if any, to `request`.
    pub fn apply<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        self.apply(&mut request);
        Ok(request)
    }
}
