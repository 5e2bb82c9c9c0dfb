//! Generates the Rust bindings of `ringfeed.proto`: prost messages (with
//! `bytes::Bytes` for every `bytes` field), pbjson serde impls (proto3 JSON),
//! a tonic client, and a tonic server whose zero-copy methods use the
//! hand-written wire-compatible types of `src/raw.rs`.
//!
//! protoc comes from `protoc-bin-vendored`, so building needs no system protoc.
//! The .proto stays the single source of truth: the server trait is generated
//! from the same service descriptor as the client, with only the Rust type of
//! the methods listed in `RAW_SERVER_TYPES` swapped (see `RawServerGenerator`).

use std::env;
use std::error::Error;
use std::fs;
use std::path::PathBuf;

use prost_build::{Config, Method, Service, ServiceGenerator};

const PROTO: &str = "ringfeed.proto";
const DESCRIPTOR: &str = "ringfeed_descriptor.bin";
/// SeaweedFS's filer API, as `weed` 4.48 embeds it (`seaweedfs/extract.py`).
const FILER_PROTO: &str = "seaweedfs/filer.proto";
const FILER_DESCRIPTOR: &str = "filer_descriptor.bin";

/// Which side of a method gets a raw type on the server.
#[derive(Clone, Copy)]
enum Side {
    Request,
    Response,
}

/// Server-side type substitutions: (rpc, side, generated type it replaces, raw
/// type). Each raw type encodes/decodes exactly like the generated one, so the
/// wire contract is unchanged; the build fails if the .proto stops matching.
const RAW_SERVER_TYPES: &[(&str, Side, &str, &str)] = &[
    (
        "Subscribe",
        Side::Response,
        "SubscribeResponse",
        "crate::raw::RawSubscribeResponse",
    ),
    (
        "Append",
        Side::Request,
        "AppendRequest",
        "crate::raw::RawAppendRequest",
    ),
    (
        "AppendStream",
        Side::Request,
        "AppendRequest",
        "crate::raw::RawAppendRequest",
    ),
];

/// The same for SeaweedFS's filer API: the feed's responses go out as
/// frames encoded once for every stream (`src/raw.rs`, `RawFilerResponse`).
const RAW_FILER_SERVER_TYPES: &[(&str, Side, &str, &str)] = &[
    (
        "SubscribeMetadata",
        Side::Response,
        "SubscribeMetadataResponse",
        "crate::raw::RawFilerResponse",
    ),
    (
        "SubscribeLocalMetadata",
        Side::Response,
        "SubscribeMetadataResponse",
        "crate::raw::RawFilerResponse",
    ),
];

/// Runs tonic's client generator on the service as declared, and tonic's
/// server generator on a copy whose methods in `types` name the raw
/// types. tonic-build uses a `crate::`-prefixed type path verbatim, so the
/// generated server's codec becomes e.g.
/// `ServerCodec<RawSubscribeResponse, SubscribeRequest>`.
struct RawServerGenerator {
    proto: &'static str,
    types: &'static [(&'static str, Side, &'static str, &'static str)],
    client: Box<dyn ServiceGenerator>,
    server: Box<dyn ServiceGenerator>,
}

impl ServiceGenerator for RawServerGenerator {
    fn generate(&mut self, service: Service, buf: &mut String) {
        self.client.generate(service.clone(), buf);
        let mut server = service;
        let proto = self.proto;
        for &(rpc, side, generated, raw) in self.types {
            let method: &mut Method = server
                .methods
                .iter_mut()
                .find(|m| m.proto_name == rpc)
                .unwrap_or_else(|| panic!("{proto}: rpc {rpc} not found"));
            let ty = match side {
                Side::Request => &mut method.input_type,
                Side::Response => &mut method.output_type,
            };
            assert_eq!(
                ty, generated,
                "{proto}: rpc {rpc} no longer uses {generated}; update the raw types and src/raw.rs"
            );
            *ty = raw.to_owned();
        }
        self.server.generate(server, buf);
    }

    fn finalize(&mut self, buf: &mut String) {
        self.client.finalize(buf);
        self.server.finalize(buf);
    }

    fn finalize_package(&mut self, package: &str, buf: &mut String) {
        self.client.finalize_package(package, buf);
        self.server.finalize_package(package, buf);
    }
}

/// The generators of `proto`'s client (as declared) and server (with the
/// raw `types`, through `codec`; `default_stubs`: unimplemented methods
/// answer UNIMPLEMENTED).
fn generator(
    proto: &'static str,
    types: &'static [(&'static str, Side, &'static str, &'static str)],
    codec: &str,
    default_stubs: bool,
) -> Box<dyn ServiceGenerator> {
    Box::new(RawServerGenerator {
        proto,
        types,
        client: tonic_build::configure()
            .build_client(true)
            .build_server(false)
            .service_generator(),
        server: tonic_build::configure()
            .build_client(false)
            .build_server(true)
            .generate_default_stubs(default_stubs)
            .codec_path(codec)
            .service_generator(),
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let descriptor_path = out_dir.join(DESCRIPTOR);

    let mut config = Config::new();
    config
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        .bytes(["."])
        .file_descriptor_set_path(&descriptor_path)
        // The server's codec sends framed responses as they are
        // (src/raw.rs, ServerCodec).
        .service_generator(generator(
            PROTO,
            RAW_SERVER_TYPES,
            "crate::raw::ServerCodec",
            false,
        ));
    config.compile_protos(&[PROTO], &["."])?;

    // The filer API: prost messages, a client (following filers) and a
    // server (serving SeaweedFS clients), with its own descriptor set so
    // the RingFeed port's reflection lists only RingFeed. Default stubs:
    // ringfeed serves the metadata feed's RPCs only, and answers the rest
    // UNIMPLEMENTED (server/src/seaweedfs/filer_api.rs says why).
    println!("cargo:rerun-if-changed={FILER_PROTO}");
    let mut filer = Config::new();
    filer
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        .bytes(["."])
        .file_descriptor_set_path(out_dir.join(FILER_DESCRIPTOR))
        .service_generator(generator(
            FILER_PROTO,
            RAW_FILER_SERVER_TYPES,
            "crate::raw::FilerServerCodec",
            true,
        ));
    filer.compile_protos(&[FILER_PROTO], &["seaweedfs"])?;

    let descriptors = fs::read(&descriptor_path)?;
    pbjson_build::Builder::new()
        .register_descriptors(&descriptors)?
        .out_dir(&out_dir)
        .build(&[".ringfeed.v1"])?;
    Ok(())
}
