//! The client half of the `ringfeed` command line: `append`, `tail`,
//! `status`, `subscribers` and `nodes`, each a clap `Args` struct and an async function that talks to a
//! server through the generated `RingFeedClient`.
//!
//! Output is made for pipes: `append` and `tail` print one JSON object per
//! line and flush every line; diagnostics go to stderr. The printed forms are
//! a contract (scripts parse them): `{"shard":..,"offset":..,"ts":..}` per
//! acknowledged event, `{"ts":..,"shard":..,"offset":..,"cursor":"..","event":{..}}`
//! per delivered event, numbers as JSON numbers and the event in the proto3
//! JSON mapping. A tail line's cursor never skips an event when resumed from
//! (see [`TailArgs`] for the one case where it may repeat some).

mod append;
mod connection;
mod nodes;
mod output;
mod status;
mod tail;
#[cfg(test)]
mod tests;
mod time;

pub use append::{append, AppendArgs, Op};
pub use connection::{exit_code, Access};
pub use nodes::{nodes, NodesArgs};
pub use status::{status, subscribers, StatusArgs, SubscribersArgs};
pub use tail::{tail, TailArgs};
