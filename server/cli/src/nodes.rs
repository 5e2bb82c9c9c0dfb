//! `ringfeed nodes`: the nodes of the cluster as the server sees them.

use std::io;

use anyhow::{Context, Result};
use ringfeed_proto::v1::{ListNodesRequest, NodeInfo};

use super::connection::{connect, Access};
use super::output::{format_ts, table, write_out, Align};

/// List the nodes of the cluster as this server sees them: itself, then its
/// peers, each with its node id, address, state (this node, up or down), when
/// it was last reached, its shard count and version, and why the last try
/// failed.
#[derive(clap::Args, Debug)]
pub struct NodesArgs {
    #[command(flatten)]
    pub access: Access,
    /// Print the ListNodesResponse as one proto3-JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Prints the server's view of the cluster per `args` on stdout.
pub async fn nodes(args: NodesArgs) -> Result<()> {
    let mut client = connect(&args.access).await?;
    let list = client.list_nodes(ListNodesRequest {}).await?.into_inner();
    let text = if args.json {
        super::status::full_json(&list, "ringfeed.v1.ListNodesResponse")?
    } else {
        nodes_table(&list.nodes)
    };
    write_out(&mut io::stdout(), &text).context("writing to stdout")
}

pub(super) fn nodes_table(nodes: &[NodeInfo]) -> String {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                match n.node_id {
                    0 => "-".to_owned(),
                    id => id.to_string(),
                },
                if n.address.is_empty() {
                    "-".to_owned()
                } else {
                    n.address.clone()
                },
                match (n.this_node, n.up) {
                    (true, _) => "this node",
                    (false, true) => "up",
                    (false, false) => "down",
                }
                .to_owned(),
                format_ts(n.last_seen_ns),
                n.shards.to_string(),
                if n.version.is_empty() {
                    "-".to_owned()
                } else {
                    n.version.clone()
                },
                if n.error.is_empty() {
                    "-".to_owned()
                } else {
                    n.error.clone()
                },
            ]
        })
        .collect();
    table(
        &[
            ("node", Align::Right),
            ("address", Align::Left),
            ("state", Align::Left),
            ("last seen", Align::Left),
            ("shards", Align::Right),
            ("version", Align::Left),
            ("error", Align::Left),
        ],
        &rows,
    )
}
