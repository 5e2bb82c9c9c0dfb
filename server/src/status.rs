//! Engine errors as gRPC statuses: which code each failure is, and the
//! message in the protocol's terms (field names as the proto spells them).
//! Shared by the unary/stream append handlers and the subscription sender.

use ringfeed_engine::{AppendError, SubscribeError};
use ringfeed_proto::tonic::Status;

/// The engine's field names in the protocol's terms.
fn proto_field(field: &str) -> &str {
    match field {
        "old_name" => "old_entry.name",
        "new_name" => "new_entry.name",
        "new_parent" => "new_parent_path",
        other => other,
    }
}

pub(crate) fn append_status(e: AppendError) -> Status {
    match &e {
        AppendError::Invalid {
            index,
            field,
            reason,
        } => Status::invalid_argument(format!("events[{index}].{}: {reason}", proto_field(field))),
        AppendError::Frame(_) | AppendError::BatchTooLarge { .. } => {
            Status::invalid_argument(e.to_string())
        }
        AppendError::ResourceExhausted { .. }
        | AppendError::QueueFull { .. }
        | AppendError::DiskFull { .. } => Status::resource_exhausted(e.to_string()),
        AppendError::Latched { .. } | AppendError::ShutDown => Status::unavailable(e.to_string()),
        AppendError::SequenceGap { .. } | AppendError::StaleSequence { .. } => {
            Status::failed_precondition(e.to_string())
        }
    }
}

pub(crate) fn subscribe_status(e: SubscribeError) -> Status {
    match &e {
        SubscribeError::Cursor(_) | SubscribeError::Filter(_) => {
            Status::invalid_argument(e.to_string())
        }
        SubscribeError::BelowRetention { .. } => Status::out_of_range(e.to_string()),
        &SubscribeError::Truncated {
            shard,
            generation,
            surviving_end,
            next,
        } => {
            let mut status = Status::failed_precondition(e.to_string());
            let value = ringfeed_client::Truncation {
                shard,
                generation,
                surviving_end,
                next,
            }
            .metadata_value();
            if let Ok(value) = value.parse() {
                status
                    .metadata_mut()
                    .insert(ringfeed_proto::wire::TRUNCATION_METADATA, value);
            }
            status
        }
        SubscribeError::Corrupt { .. }
        | SubscribeError::Io { .. }
        | SubscribeError::Record { .. } => Status::data_loss(e.to_string()),
        SubscribeError::Latched { .. } | SubscribeError::ColdUnavailable { .. } => {
            Status::unavailable(e.to_string())
        }
    }
}
