//! gRPC server reflection (`grpc.reflection.v1` and `v1alpha`): grpcurl,
//! evans and Postman list and call the API without the `.proto` at hand. It
//! describes `ringfeed.v1` and the health service, and asks for a token as
//! every other call does: with `--token-file`, any known token (the schema is
//! no secret, but an open door on a closed server is a surprise).

use std::sync::Arc;

use ringfeed_proto::tonic::{Request, Status};

use crate::auth::Auth;

/// Lets a request through when the server is open or its token is known.
#[derive(Clone)]
pub struct KnownToken(Arc<Auth>);

impl ringfeed_proto::tonic::service::Interceptor for KnownToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.0.grant(request.metadata())?;
        Ok(request)
    }
}

impl KnownToken {
    pub fn new(auth: Arc<Auth>) -> KnownToken {
        KnownToken(auth)
    }
}

/// Reflection over `ringfeed.v1` and the health service; build it with
/// `build_v1()` and `build_v1alpha()` (grpcurl asks v1 first, Python's
/// grpcio-reflection and older tools v1alpha) and put each behind a
/// [`KnownToken`].
pub fn builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(ringfeed_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}
