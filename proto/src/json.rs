//! Proto3 JSON with every field printed, zeros included, for the outputs
//! people read field by field (`ringfeed status --json`, `/api/status`).
//!
//! The generated pbjson serializers leave default values out, as the proto3
//! JSON mapping allows, so shard 0 had no `"shard"` key and an idle server no
//! `"subscribers"`. pbjson can print defaults only for every message at once,
//! which would change the events `ringfeed tail` prints too (they must stay
//! the generated serializer's text), so this fills the defaults in afterwards
//! from the schema itself ([`crate::FILE_DESCRIPTOR_SET`]): what protobuf's
//! own JSON printers do when asked to always print fields without presence.
//! Fields with presence (message fields, oneof members, `optional`) are left
//! out when unset, as those printers do.

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::FieldDescriptorProto;

use crate::schema::{schema, Schema};
use serde_json::{Map, Value};

/// Serializes `message` (the generated type of the proto message `name`,
/// e.g. `"ringfeed.v1.StatusResponse"`) as proto3 JSON with every field
/// without presence printed, zeros included.
pub fn with_defaults<M: serde::Serialize>(message: &M, name: &str) -> serde_json::Result<Value> {
    let mut value = serde_json::to_value(message)?;
    fill(&mut value, name.trim_start_matches('.'));
    Ok(value)
}

/// Fills `value` (an object of message `name`) with the defaults it leaves out.
fn fill(value: &mut Value, name: &str) {
    let schema = schema();
    let (Some(object), Some(message)) = (value.as_object_mut(), schema.messages.get(name)) else {
        return;
    };
    for field in &message.field {
        let key = json_name(field);
        let type_name = field.type_name().trim_start_matches('.');
        let entry = schema
            .messages
            .get(type_name)
            .filter(|m| m.options.as_ref().and_then(|o| o.map_entry) == Some(true));
        let repeated = field.label() == Label::Repeated;
        match object.get_mut(&key) {
            Some(present) => match (entry, repeated, field.r#type()) {
                (Some(entry), _, _) => {
                    let value_type = entry.field.get(1).filter(|f| f.r#type() == Type::Message);
                    if let (Some(value_type), Some(map)) = (value_type, present.as_object_mut()) {
                        let inner = value_type.type_name().trim_start_matches('.');
                        map.values_mut().for_each(|v| fill(v, inner));
                    }
                }
                (None, true, Type::Message) => {
                    if let Some(items) = present.as_array_mut() {
                        items.iter_mut().for_each(|v| fill(v, type_name));
                    }
                }
                (None, false, Type::Message) => fill(present, type_name),
                _ => {}
            },
            None => {
                let has_presence = field.oneof_index.is_some()
                    || field.proto3_optional == Some(true)
                    || (field.r#type() == Type::Message && !repeated);
                if has_presence {
                    continue;
                }
                let default = if entry.is_some() {
                    Value::Object(Map::new())
                } else if repeated {
                    Value::Array(Vec::new())
                } else {
                    scalar_default(field, schema)
                };
                object.insert(key, default);
            }
        }
    }
}

/// A singular field's default as proto3 JSON writes it.
fn scalar_default(field: &FieldDescriptorProto, schema: &Schema) -> Value {
    match field.r#type() {
        // 64-bit integers are strings in proto3 JSON.
        Type::Int64 | Type::Uint64 | Type::Sint64 | Type::Fixed64 | Type::Sfixed64 => {
            Value::String("0".into())
        }
        Type::Bool => Value::Bool(false),
        Type::String | Type::Bytes => Value::String(String::new()),
        Type::Enum => schema
            .enums
            .get(field.type_name().trim_start_matches('.'))
            .and_then(|e| e.value.iter().find(|v| v.number() == 0))
            .map_or(Value::from(0), |v| Value::String(v.name().to_owned())),
        _ => Value::from(0),
    }
}

/// The field's JSON name: protoc records it; lowerCamelCase of the name if not.
fn json_name(field: &FieldDescriptorProto) -> String {
    if let Some(name) = &field.json_name {
        return name.clone();
    }
    let mut out = String::new();
    let mut upper = false;
    for c in field.name().chars() {
        match (c, upper) {
            ('_', _) => upper = true,
            (c, true) => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            (c, false) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;

    #[test]
    fn every_field_without_presence_is_printed_zeros_included() {
        let status = v1::StatusResponse {
            shards: vec![v1::ShardStatus::default()],
            subscriber_list: vec![v1::SubscriberInfo::default()],
            ..Default::default()
        };
        let plain = serde_json::to_value(&status).unwrap();
        assert!(plain["shards"][0].get("shard").is_none(), "{plain}");
        let full = with_defaults(&status, "ringfeed.v1.StatusResponse").unwrap();
        let shard = &full["shards"][0];
        assert_eq!(shard["shard"], 0, "{full}");
        assert_eq!(shard["committedNext"], "0", "64-bit as a string: {full}");
        assert_eq!(shard["latched"], "", "{full}");
        assert_eq!(full["subscribers"], "0", "{full}");
        assert_eq!(full["history"], Value::Array(vec![]), "{full}");
        assert_eq!(full["version"], "", "{full}");
        // Nested messages in a list get their zeros too; enums their
        // zero value's name.
        let subscriber = &full["subscriberList"][0];
        assert_eq!(subscriber["clientId"], "0", "{full}");
        for (key, value) in subscriber.as_object().unwrap() {
            assert!(!value.is_null(), "{key} is null in {full}");
        }
        // Every key of every message is one the generated decoder reads back.
        let back: v1::StatusResponse = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(back, status);
    }
}
