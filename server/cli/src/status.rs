//! `ringfeed status` and `ringfeed subscribers`: the server's shards and
//! connected subscription streams, as tables or JSON.

use std::io::{self};

use anyhow::{Context, Result};
use ringfeed_proto::tonic::Code;
use ringfeed_proto::v1::{
    ListNodesRequest, ListSubscribersRequest, Ordering, ShardStatus, StatusRequest, StatusResponse,
    SubscriberInfo,
};

use super::connection::{connect, Access};
use super::output::{format_ts, plural, table, write_out, Align};

/// List the connected subscription streams: client name, id and epoch, peer
/// address, mode (waiting for admission, chunks, backlog, live), lag in
/// events and seconds, events sent, connected since, filters and cursor.
#[derive(clap::Args, Debug)]
pub struct SubscribersArgs {
    #[command(flatten)]
    pub access: Access,
    /// Print the ListSubscribersResponse as one proto3-JSON object instead of
    /// a table (64-bit numbers are strings, the cursor is standard base64).
    #[arg(long)]
    pub json: bool,
}

/// Prints the server's subscribers per `args` on stdout.
pub async fn subscribers(args: SubscribersArgs) -> Result<()> {
    let mut client = connect(&args.access).await?;
    let list = client
        .list_subscribers(ListSubscribersRequest {})
        .await?
        .into_inner();
    let text = if args.json {
        full_json(&list, "ringfeed.v1.ListSubscribersResponse")?
    } else {
        subscribers_table(&list.subscribers)
    };
    write_out(&mut io::stdout(), &text).context("writing to stdout")
}

/// Show the server's per-shard watermarks, ring and flush state, and its
/// subscribers.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub access: Access,
    /// Print the StatusResponse as one proto3-JSON object instead of tables
    /// (64-bit numbers are strings there, as the mapping says), the object
    /// the status page's /api/status answers: with up to 1000 subscribers in
    /// `subscriberList`, the most lagging first. With
    /// --cluster: `{"nodes":[{"node":NodeInfo,"status":StatusResponse or null}]}`.
    #[arg(long)]
    pub json: bool,
    /// With --json: include the server's samples of the last five minutes
    /// (`history`, one a second: append rate and worst lag), as the status
    /// page draws them.
    #[arg(long, requires = "json")]
    pub history: bool,
    /// Every node of the cluster as this server lists them (`ringfeed
    /// nodes`): each reachable node's shards and watermarks, asked at its
    /// address, and which nodes are down and why.
    #[arg(long)]
    pub cluster: bool,
}

/// Prints the server's status per `args` on stdout.
pub async fn status(args: StatusArgs) -> Result<()> {
    if args.cluster {
        return cluster_status(&args).await;
    }
    let mut client = connect(&args.access).await?;
    let status = client
        .status(StatusRequest {
            // As many as the status page lists.
            subscriber_limit: if args.json {
                ringfeed_proto::wire::OVERVIEW_SUBSCRIBERS
            } else {
                0
            },
            history: args.history,
        })
        .await?
        .into_inner();
    let mut out = io::stdout();
    let text = if args.json {
        full_json(&status, "ringfeed.v1.StatusResponse")?
    } else {
        let subscribers = match client.list_subscribers(ListSubscribersRequest {}).await {
            Ok(response) => Some(response.into_inner().subscribers),
            // An older server: the count in the status is all there is.
            Err(status) if status.code() == Code::Unimplemented => None,
            Err(status) => return Err(status.into()),
        };
        render_status(&status, subscribers.as_deref())
    };
    write_out(&mut out, &text).context("writing to stdout")
}

/// `message` (of proto message `name`) as one line of proto3 JSON with every
/// field, zeros included (`ringfeed_proto::json`).
pub(super) fn full_json<M: serde::Serialize>(message: &M, name: &str) -> Result<String> {
    let value = ringfeed_proto::json::with_defaults(message, name)
        .with_context(|| format!("encoding the {name} as JSON"))?;
    Ok(value.to_string() + "\n")
}

/// How long `status --cluster` waits for each other node's answer.
const PEER_ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// `status --cluster`: the node list, then each node's status from its own
/// address (this node's from the server asked).
async fn cluster_status(args: &StatusArgs) -> Result<()> {
    let mut client = connect(&args.access).await?;
    let nodes = client
        .list_nodes(ListNodesRequest {})
        .await?
        .into_inner()
        .nodes;
    let mut found = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let status = if node.this_node {
            client
                .status(StatusRequest::default())
                .await
                .map_err(|s| s.to_string())
        } else if !node.up {
            Err(format!("down: {}", node.error))
        } else {
            // A stopped process still accepts connections: bound the wait.
            let ask = async {
                let access = Access {
                    server: node.address.clone(),
                    ..args.access.clone()
                };
                let mut peer = connect(&access).await.map_err(|e| format!("{e:#}"))?;
                peer.status(StatusRequest::default())
                    .await
                    .map_err(|s| format!("{}: {}", s.code(), s.message()))
            };
            match tokio::time::timeout(PEER_ANSWER_WITHIN, ask).await {
                Ok(answer) => answer.map_err(|e| format!("down: {e}")),
                Err(_) => Err(format!("down: no answer within {PEER_ANSWER_WITHIN:?}")),
            }
        };
        found.push(status.map(|r| r.into_inner()));
    }
    let text = if args.json {
        let entries: Vec<serde_json::Value> = nodes
            .iter()
            .zip(&found)
            .map(|(node, status)| {
                use ringfeed_proto::json::with_defaults;
                Ok(serde_json::json!({
                    "node": with_defaults(node, "ringfeed.v1.NodeInfo")?,
                    "status": match status {
                        Ok(status) => with_defaults(status, "ringfeed.v1.StatusResponse")?,
                        Err(_) => serde_json::Value::Null,
                    },
                }))
            })
            .collect::<serde_json::Result<_>>()
            .context("encoding the cluster status as JSON")?;
        serde_json::to_string(&serde_json::json!({ "nodes": entries }))
            .context("encoding the cluster status as JSON")?
            + "\n"
    } else {
        let mut text = String::new();
        for (node, status) in nodes.iter().zip(&found) {
            let id = match node.node_id {
                0 => "?".to_owned(),
                id => id.to_string(),
            };
            let at = if node.address.is_empty() {
                "-"
            } else {
                &node.address
            };
            match status {
                Ok(status) => {
                    let this = if node.this_node { " (this node)" } else { "" };
                    text.push_str(&format!("node {id} at {at}{this}\n"));
                    text.push_str(&render_status(status, None));
                }
                Err(why) => text.push_str(&format!("node {id} at {at}: {why}\n")),
            }
            text.push('\n');
        }
        text
    };
    write_out(&mut io::stdout(), &text).context("writing to stdout")
}

pub(super) fn render_status(
    status: &StatusResponse,
    subscribers: Option<&[SubscriberInfo]>,
) -> String {
    let mut text = format!(
        "ringfeed {}{} at {}: {} shard{}, {} subscriber{}\n\n",
        if status.version.is_empty() {
            "?"
        } else {
            &status.version
        },
        match status.node_id {
            0 => String::new(),
            node => format!(" (node {node})"),
        },
        format_ts(status.now_ns),
        status.shards.len(),
        plural(status.shards.len() as u64),
        status.subscribers,
        plural(status.subscribers),
    );
    if !status.feed_id.is_empty() {
        // Cursors carry it: a refused "made by another data dir" cursor
        // names the feed it was made on.
        text.insert_str(
            text.len() - 2,
            &format!("; feed {} in {}", status.feed_id, status.data_dir),
        );
    }
    let rows: Vec<Vec<String>> = status.shards.iter().map(shard_row).collect();
    text.push_str(&table(
        &[
            ("shard", Align::Right),
            ("committed", Align::Right),
            ("flushed", Align::Right),
            ("evicted", Align::Right),
            ("retained", Align::Right),
            ("ring bytes", Align::Right),
            ("unflushed bytes", Align::Right),
            ("segments", Align::Right),
            ("last committed", Align::Left),
            ("latched", Align::Left),
        ],
        &rows,
    ));
    text.push_str(
        "(committed/flushed = first offset not yet committed/durable; evicted = ring holds offsets from here; retained = oldest offset on disk)\n",
    );
    for shard in status.shards.iter().filter(|s| !s.disk_full.is_empty()) {
        text.push_str(&format!(
            "shard {} refuses appends: the disk is full ({}); free space on it and appends are taken again within a second\n",
            shard.shard, shard.disk_full
        ));
    }
    if !status.filers.is_empty() {
        text.push('\n');
        text.push_str(&filers_table(status));
    }
    if let Some(store) = &status.object_store {
        text.push('\n');
        text.push_str(&object_store_lines(store));
    }
    if let Some(subscribers) = subscribers {
        text.push('\n');
        text.push_str(&subscribers_table(subscribers));
    }
    text
}

/// The uploads to the object store: what went, what waits, what failed.
fn object_store_lines(store: &ringfeed_proto::v1::ObjectStoreStatus) -> String {
    let mut text = format!(
        "object store {}: {} segment(s), {} bytes uploaded since start; {} sealed segment(s) waiting{}\n",
        store.url,
        store.segments_uploaded,
        store.bytes_uploaded,
        store.lag_segments,
        if store.lag_segments > 0 {
            format!(
                " ({} bytes), the oldest sealed {:.1} s ago",
                store.lag_bytes, store.lag_seconds
            )
        } else {
            String::new()
        }
    );
    let below: Vec<String> = store
        .uploaded_below
        .iter()
        .enumerate()
        .map(|(shard, below)| match store.held_from.get(shard) {
            Some(from) if from < below => format!("shard {shard} {from}..{below}"),
            _ => format!("shard {shard} below {below}"),
        })
        .collect();
    text.push_str(&format!("  in the store: {}\n", below.join(", ")));
    text.push_str(&format!(
        "  read for subscribers below the local log: {} bytes fetched, {} cache hit(s), \
         {} miss(es), {} bytes cached\n",
        store.bytes_fetched, store.cache_hits, store.cache_misses, store.cache_bytes
    ));
    if !store.read_error.is_empty() {
        text.push_str(&format!(
            "  {} failed read(s) since start (retried); the last: {}\n",
            store.read_errors, store.read_error
        ));
    }
    if !store.error.is_empty() {
        text.push_str(&format!(
            "  the last upload pass failed ({} failed pass(es) since start, retried with backoff): {}\n",
            store.errors, store.error
        ));
    }
    text
}

/// The SeaweedFS filers followed, and why any is not streaming.
fn filers_table(status: &StatusResponse) -> String {
    let rows: Vec<Vec<String>> = status
        .filers
        .iter()
        .map(|f| {
            vec![
                f.filer.clone(),
                if f.connected { "streaming" } else { "down" }.to_owned(),
                format_ts(f.stored_ts_ns),
                match f.seen_ts_ns {
                    0 => "-".to_owned(),
                    seen => format!("{:.1}", (status.now_ns - seen).max(0) as f64 / 1e9),
                },
                f.events.to_string(),
                f.reconnects.to_string(),
                f.refused.to_string(),
            ]
        })
        .collect();
    let mut text = table(
        &[
            ("filer", Align::Left),
            ("state", Align::Left),
            ("stored through (filer time)", Align::Left),
            ("behind s", Align::Right),
            ("events", Align::Right),
            ("reconnects", Align::Right),
            ("refused", Align::Right),
        ],
        &rows,
    );
    for f in status.filers.iter().filter(|f| !f.error.is_empty()) {
        text.push_str(&format!("filer {}: {}\n", f.filer, f.error));
    }
    for f in status.filers.iter().filter(|f| !f.last_refused.is_empty()) {
        text.push_str(&format!(
            "filer {}: last refused: {}\n",
            f.filer, f.last_refused
        ));
    }
    text
}

/// The subscribers as a table, or "no subscribers".
pub(super) fn subscribers_table(subscribers: &[SubscriberInfo]) -> String {
    if subscribers.is_empty() {
        return "no subscribers\n".to_owned();
    }
    let rows: Vec<Vec<String>> = subscribers.iter().map(subscriber_row).collect();
    table(
        &[
            ("client", Align::Left),
            ("id", Align::Right),
            ("epoch", Align::Right),
            ("peer", Align::Left),
            ("mode", Align::Left),
            ("lag events", Align::Right),
            ("lag s", Align::Right),
            ("sent", Align::Right),
            ("connected since", Align::Left),
            ("filters", Align::Left),
            ("cursor", Align::Left),
        ],
        &rows,
    )
}

pub(super) fn shard_row(shard: &ShardStatus) -> Vec<String> {
    vec![
        shard.shard.to_string(),
        shard.committed_next.to_string(),
        shard.flushed_next.to_string(),
        shard.evicted_below.to_string(),
        shard.retained_from.to_string(),
        shard.ring_bytes.to_string(),
        shard.unflushed_bytes.to_string(),
        shard.segment_count.to_string(),
        format_ts(shard.committed_ts_ns),
        if shard.latched.is_empty() {
            "-".to_owned()
        } else {
            shard.latched.clone()
        },
    ]
}

pub(super) fn subscriber_row(s: &SubscriberInfo) -> Vec<String> {
    let mut filters = Vec::new();
    if !s.path_prefix.is_empty() {
        filters.push(format!("prefix={}", s.path_prefix));
    }
    filters.extend(s.path_prefixes.iter().map(|p| format!("prefix={p}")));
    filters.extend(s.directories.iter().map(|d| format!("dir={d}")));
    filters.extend(s.exclude_prefixes.iter().map(|p| format!("exclude={p}")));
    if s.signature != 0 {
        filters.push(format!("signature={}", s.signature));
    }
    if s.ordering == Ordering::PerShard as i32 {
        filters.push("per-shard".to_owned());
    }
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    vec![
        or_dash(&s.client_name),
        s.client_id.to_string(),
        s.client_epoch.to_string(),
        or_dash(&s.peer),
        or_dash(&s.mode),
        s.lag_events.to_string(),
        format!("{:.3}", s.lag_seconds),
        s.events_sent.to_string(),
        format_ts(s.connected_since_ns),
        if filters.is_empty() {
            "-".to_owned()
        } else {
            filters.join(" ")
        },
        or_dash(&ringfeed_client::cursor_text(&s.cursor)),
    ]
}
