//! What checking an appended event costs (`event-check`): the append path
//! decodes each event with prost to read its directory and names; issue 36
//! asked to store only bytes every conformant decoder reads alike, either
//! by checking them strictly (`ringfeed_proto::strict`, then the decode) or
//! by re-encoding each event canonically (the decode, then an encode, whose
//! bytes are stored instead). Each round times the three over the same
//! events, in turn; the medians per event and the ratios to the decode alone
//! are printed. In memory, on one thread: no server, no disk.

use std::time::Instant;

use anyhow::Result;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::prost::Message;
use ringfeed_proto::{strict, v1};

use crate::util::median;

pub(crate) struct Args {
    pub events: usize,
    pub rounds: usize,
}

/// An event like a file system's: a create or an update with a chunk list
/// and two extended attributes.
fn event(i: usize) -> Bytes {
    let entry = |size: u64| v1::Entry {
        name: format!("file-{i:08}.dat"),
        size,
        mtime_ns: 1_700_000_000_000_000_000 + i as i64,
        mode: 0o100644,
        attributes: vec![(i % 251) as u8; 160].into(),
        extended: [
            ("user.owner".to_owned(), b"alice".to_vec().into()),
            (
                "user.etag".to_owned(),
                format!("{i:032x}").into_bytes().into(),
            ),
        ]
        .into(),
        ..Default::default()
    };
    let update = i % 2 == 1;
    v1::Event {
        directory: format!("/buckets/b{}/dir-{}", i % 7, i % 1000),
        old_entry: update.then(|| entry(1000)),
        new_entry: Some(entry(4096 + i as u64)),
        signatures: vec![17],
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

pub(crate) fn event_check(args: &Args) -> Result<()> {
    let events: Vec<Bytes> = (0..args.events).map(event).collect();
    let bytes: usize = events.iter().map(Bytes::len).sum();
    println!(
        "event-check: {} events, {} bytes each on average, {} rounds, one thread",
        args.events,
        bytes / args.events,
        args.rounds
    );
    type Variant = (&'static str, fn(&Bytes) -> usize);
    let variants: [Variant; 3] = [
        ("decode (before)", |b| {
            let e = v1::Event::decode(b.clone()).expect("valid");
            e.directory.len()
        }),
        ("strict check + decode", |b| {
            strict::check_event(b).expect("valid");
            let e = v1::Event::decode(b.clone()).expect("valid");
            e.directory.len()
        }),
        ("decode + re-encode", |b| {
            let e = v1::Event::decode(b.clone()).expect("valid");
            let canonical = Bytes::from(e.encode_to_vec());
            e.directory.len() + canonical.len()
        }),
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut sink = 0usize;
    for round in 0..args.rounds + 1 {
        for (i, (_, run)) in variants.iter().enumerate() {
            let started = Instant::now();
            for e in &events {
                sink = sink.wrapping_add(run(e));
            }
            // The first round warms the caches and the schema up.
            if round > 0 {
                ns[i].push(started.elapsed().as_nanos() as f64 / args.events as f64);
            }
        }
    }
    let base = median(ns[0].clone());
    for (i, (name, _)) in variants.iter().enumerate() {
        let m = median(ns[i].clone());
        println!(
            "{name:>24}: {m:7.0} ns/event median ({:.2}x the decode alone, +{:.0} ns)",
            m / base,
            m - base
        );
    }
    std::hint::black_box(sink);
    Ok(())
}
