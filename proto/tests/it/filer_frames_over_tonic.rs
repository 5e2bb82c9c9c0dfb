//! The generated filer server, serving `RawFilerResponse`s over a real tonic
//! transport, talks to the generated filer client: responses encoded by
//! the codec, one frame, and several frames in one item all decode as the
//! messages they hold, in order; an item whose frames do not add up ends the
//! stream with an error instead of sending bytes a client would misread.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use ringfeed_proto::filer_pb::seaweed_filer_client::SeaweedFilerClient;
use ringfeed_proto::filer_pb::seaweed_filer_server::{SeaweedFiler, SeaweedFilerServer};
use ringfeed_proto::filer_pb::{SubscribeMetadataRequest, SubscribeMetadataResponse};
use ringfeed_proto::raw::RawFilerResponse;
use ringfeed_proto::tonic::{self, Code, Request, Response, Status};

fn response(i: i64) -> SubscribeMetadataResponse {
    SubscribeMetadataResponse {
        directory: format!("/d/{i}"),
        ts_ns: i,
        ..Default::default()
    }
}

struct Filer;

#[tonic::async_trait]
impl SeaweedFiler for Filer {
    async fn subscribe_metadata(
        &self,
        request: Request<SubscribeMetadataRequest>,
    ) -> Result<Response<tonic::codegen::BoxStream<RawFilerResponse>>, Status> {
        let mut three = BytesMut::new();
        for i in 2..5 {
            three.extend_from_slice(&RawFilerResponse::frame(&response(i)));
        }
        let mut items = vec![
            RawFilerResponse::Fields(Box::new(response(0))),
            RawFilerResponse::Frames(RawFilerResponse::frame(&response(1))),
            RawFilerResponse::Frames(three.freeze()),
            RawFilerResponse::Fields(Box::new(response(5))),
        ];
        if request.into_inner().since_ns == 1 {
            // A frame, then one whose prefix says more than follows.
            let mut broken = BytesMut::new();
            broken.extend_from_slice(&RawFilerResponse::frame(&response(6)));
            broken.put_u8(0);
            broken.put_u32(100);
            broken.extend_from_slice(&[0x1a, 0x01]);
            items.push(RawFilerResponse::Frames(broken.freeze()));
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(
            items.into_iter().map(Ok),
        ))))
    }
}

async fn read(
    client: &mut SeaweedFilerClient<tonic::transport::Channel>,
    since_ns: i64,
) -> (Vec<SubscribeMetadataResponse>, Option<Status>) {
    let mut stream = client
        .subscribe_metadata(SubscribeMetadataRequest {
            since_ns,
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let mut got = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(r)) => got.push(r),
            Ok(None) => return (got, None),
            Err(status) => return (got, Some(status)),
        }
    }
}

#[tokio::test]
async fn frames_back_to_back_reach_the_generated_client_as_messages() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SeaweedFilerServer::new(Filer))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let checked = async {
        let mut client = SeaweedFilerClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let (got, ended) = read(&mut client, 0).await;
        assert!(ended.is_none(), "{ended:?}");
        assert_eq!(got, (0..6).map(response).collect::<Vec<_>>());

        let (got, ended) = read(&mut client, 1).await;
        let status = ended.expect("the broken item ends the stream with a status");
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        // Nothing of the broken item reaches the client, its whole frame
        // before the broken one included.
        assert_eq!(got, (0..6).map(response).collect::<Vec<_>>());
    };
    tokio::time::timeout(Duration::from_secs(20), checked)
        .await
        .expect("test timed out");
    server.abort();
}

#[test]
fn messages_splits_frames_and_refuses_a_short_one() {
    let one = RawFilerResponse::frame(&response(1));
    let mut two = BytesMut::from(&one[..]);
    two.extend_from_slice(&RawFilerResponse::frame(&response(2)));
    let two: Bytes = two.freeze();
    assert_eq!(RawFilerResponse::messages(&two).map(|m| m.len()), Some(2));
    assert_eq!(RawFilerResponse::messages(&two[..two.len() - 1]), None);
    assert_eq!(RawFilerResponse::messages(&[]), Some(vec![]));
}
