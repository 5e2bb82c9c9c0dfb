//! `ringfeed token new`: a new random token, and the table that lets it in.

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Print a new random token on the first line, then the [[token]] table to add to the
    /// token file (it holds the token's SHA-256, never the token). Keep the token secret;
    /// send SIGHUP to the server after editing the file.
    New {
        /// A path prefix the token may append under (repeat for more).
        #[arg(long, value_name = "PREFIX")]
        append: Vec<String>,
        /// A path prefix the token may read ("/" for everything; repeat for more).
        #[arg(long, value_name = "PREFIX")]
        read: Vec<String>,
        /// The token may also ask for status, subscribers and nodes.
        #[arg(long)]
        admin: bool,
    },
}

pub fn run(what: TokenCommand) -> Result<()> {
    let TokenCommand::New {
        append,
        read,
        admin,
    } = what;
    let (token, table) = ringfeed_server::new_token(&append, &read, admin)?;
    println!("{token}");
    print!("{table}");
    Ok(())
}
