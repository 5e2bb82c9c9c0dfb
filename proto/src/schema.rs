//! The schema read at run time from [`crate::FILE_DESCRIPTOR_SET`] and
//! [`crate::FILER_DESCRIPTOR_SET`]: every message and enum of
//! `ringfeed.proto` and SeaweedFS's `filer.proto` by full name, for what needs the
//! field list rather than the generated types (JSON with every field,
//! strict wire checks).

use std::collections::HashMap;
use std::sync::OnceLock;

use prost::Message as _;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

/// The messages and enums of the schema, by full name without the leading dot.
pub(crate) struct Schema {
    pub(crate) messages: HashMap<String, DescriptorProto>,
    pub(crate) enums: HashMap<String, EnumDescriptorProto>,
}

pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut schema = Schema {
            messages: HashMap::new(),
            enums: HashMap::new(),
        };
        let files = [crate::FILE_DESCRIPTOR_SET, crate::FILER_DESCRIPTOR_SET]
            .into_iter()
            .flat_map(|set| {
                FileDescriptorSet::decode(set)
                    .expect("the descriptor sets protoc wrote at build time decode")
                    .file
            });
        for file in files {
            let package = file.package.unwrap_or_default();
            for e in file.enum_type {
                schema.enums.insert(format!("{package}.{}", e.name()), e);
            }
            for m in file.message_type {
                schema.add(&package, m);
            }
        }
        schema
    })
}

impl Schema {
    fn add(&mut self, scope: &str, message: DescriptorProto) {
        let name = format!("{scope}.{}", message.name());
        for e in &message.enum_type {
            self.enums.insert(format!("{name}.{}", e.name()), e.clone());
        }
        for nested in message.nested_type.clone() {
            self.add(&name, nested);
        }
        self.messages.insert(name, message);
    }
}
