//! The response budget's lifetime through the outbox and queue, and stalls.

use std::sync::Arc;
use std::time::Duration;

use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::{v1, RawItem, RawSubscribeResponse};
use tokio::sync::Semaphore;
use tokio_stream::StreamExt;

use super::{Outbox, Responses, SubscriberLimits};

fn heartbeat() -> RawSubscribeResponse {
    RawSubscribeResponse::new(Bytes::new(), RawItem::Heartbeat(v1::Heartbeat::default()))
}

/// A budget of 8 units and an outbox with two responses queued, of 3
/// and 4 units.
async fn two_queued() -> (Arc<Semaphore>, Outbox, Responses) {
    let budget = Arc::new(Semaphore::new(8));
    let (outbox, responses) = Outbox::new(&SubscriberLimits::default());
    for n in [3, 4] {
        let permit = budget.clone().try_acquire_many_owned(n).unwrap();
        outbox.send(heartbeat(), Some(permit)).await.unwrap();
    }
    (budget, outbox, responses)
}

/// A response's budget lasts exactly as long as the frame the transport
/// took, whatever else happens on its stream: not waiting for the next
/// response to be built (a sender waiting for budget must never wait on
/// what its own stream holds, issue 41), and every part of a frame
/// (HTTP/2 splits them) keeps it.
#[tokio::test]
async fn a_response_holds_its_budget_until_its_frame_is_dropped() {
    // The outbox lives on: the stream is open, nothing more queued.
    let (budget, _outbox, mut responses) = two_queued().await;
    let frame = |r: Option<Result<RawSubscribeResponse, Status>>| match r {
        // A heartbeat's frame is one part.
        Some(Ok(RawSubscribeResponse::Framed(frames))) => frames.into_parts()[0].clone(),
        other => panic!("not a frame: {other:?}"),
    };
    let first = frame(responses.next().await);
    let part = first.slice(2..);
    drop(first);
    let second = frame(responses.next().await);
    assert_eq!(budget.available_permits(), 1, "both held while taken");
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(responses.as_mut().poll_next(&mut cx).is_pending());
    assert_eq!(
        budget.available_permits(),
        1,
        "an empty poll changes nothing"
    );
    drop(second);
    assert_eq!(
        budget.available_permits(),
        5,
        "the second's back when dropped"
    );
    drop(part);
    assert_eq!(
        budget.available_permits(),
        8,
        "the first's with its last part"
    );
}

/// A stream given back (its client stopped reading) gives back what its
/// transport holds too: HTTP/2 may keep those frames for as long as the
/// connection lives.
#[tokio::test]
async fn a_stream_given_back_gives_back_its_frames_budget() {
    let (budget, outbox, mut responses) = two_queued().await;
    let taken = responses.next().await;
    assert_eq!(budget.available_permits(), 1);
    outbox.stalls().queue.upgrade().unwrap().give_back();
    assert_eq!(budget.available_permits(), 8);
    drop(taken);
    assert_eq!(budget.available_permits(), 8, "given back once");
}

/// A stall is counted from when responses started waiting, not from the
/// transport's last take: a client quiet for longer than the timeout
/// that is sent a response is not given back before it could take it.
#[tokio::test(start_paused = true)]
async fn a_quiet_spell_is_not_a_stall() {
    let timeout = Duration::from_secs(4);
    let (outbox, mut responses) = Outbox::new(&SubscriberLimits::default());
    let stalls = outbox.stalls();
    let stalled = tokio::spawn(async move { stalls.stalled(timeout).await });
    // Quiet for 10 timeouts: nothing queued, nothing taken.
    tokio::time::sleep(timeout * 10).await;
    outbox.send(heartbeat(), None).await.unwrap();
    // It counts from the first check that saw it waiting (within a
    // quarter timeout), so not before `timeout` from now.
    tokio::time::sleep(timeout - Duration::from_millis(1)).await;
    assert!(!stalled.is_finished(), "given back after a quiet spell");
    // Taken: no stall. Then one left untaken is, within 1.25 timeouts.
    assert!(responses.next().await.is_some());
    outbox.send(heartbeat(), None).await.unwrap();
    let since = tokio::time::Instant::now();
    let stall = stalled.await.unwrap();
    assert!(stall >= timeout, "{stall:?}");
    assert!(
        since.elapsed() <= timeout + timeout / 4,
        "{:?}",
        since.elapsed()
    );
}
