//! `ringfeed-bench security` (issue 21): what TLS and tokens cost. Two real
//! servers, one plain and one with TLS (certificates made by rcgen at run
//! time) and a token file, measured in interleaved passes: appends (batches
//! of `--batch` events of `--payload` bytes, one unary Append after another,
//! events/s) and a catch-up of everything from the beginning by one
//! subscriber with batching (events/s, checked to be every event once).
//! Medians per side and the ratio secured / plain.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ringfeed_proto::tonic::service::interceptor::InterceptedService;
use ringfeed_proto::tonic::transport::{Certificate, Channel, ClientTlsConfig};
use ringfeed_proto::v1::{self, subscribe_request::Start, subscribe_response::Item};
use ringfeed_proto::RingFeedClient;
use ringfeed_server::client::Bearer;

use crate::systems::{free_ports, ringfeed_event as event, spawn_server_on, unstamp, Process};
use crate::util::{fresh_dir, machine, median, runtime};

#[derive(clap::Args)]
pub struct Args {
    /// Scratch directory for the servers' data dirs; removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: PathBuf,
    /// Events appended per pass (then read back).
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Events per Append request.
    #[arg(long, default_value_t = 1000)]
    pub batch: u64,
    /// Payload bytes per event.
    #[arg(long, default_value_t = 200)]
    pub payload: usize,
    /// Passes per side, interleaved; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub passes: usize,
}

/// A client: TLS or not, a token or not.
type Client = RingFeedClient<InterceptedService<Channel, Bearer>>;

/// One server under test and how to reach it.
struct Side {
    name: &'static str,
    addr: String,
    ca: Option<Vec<u8>>,
    token: Option<String>,
    _process: Process,
}

impl Side {
    async fn client(&self) -> Result<Client> {
        let channel = match &self.ca {
            Some(ca) => Channel::from_shared(format!("https://{}", self.addr))?
                .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)))?,
            None => Channel::from_shared(format!("http://{}", self.addr))?,
        }
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to {}", self.addr))?;
        let bearer = Bearer::new(self.token.as_deref()).context("the token")?;
        Ok(RingFeedClient::with_interceptor(channel, bearer).max_decoding_message_size(256 << 20))
    }
}

pub fn run(args: &Args) -> Result<()> {
    println!(
        "security: {} events of {} B payload per pass in batches of {}, {} pass(es) per side; {}",
        args.events,
        args.payload,
        args.batch,
        args.passes,
        machine()
    );
    let dir = args.dir.join("security");
    fresh_dir(&dir)?;
    let result = measure(args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(args: &Args, dir: &Path) -> Result<()> {
    let ports = free_ports(2)?;
    let plain = {
        let addr = format!("127.0.0.1:{}", ports[0]);
        let (process, _) = spawn_server_on(&dir.join("plain"), 1, &addr, &[])?;
        Side {
            name: "plain",
            addr,
            ca: None,
            token: None,
            _process: process,
        }
    };
    let secured = {
        let pki = Pki::new(dir)?;
        let token = "rf_bench-token-not-secret".to_owned();
        let hash: String = {
            use sha2::Digest;
            sha2::Sha256::digest(token.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let tokens = dir.join("tokens.toml");
        std::fs::write(
            &tokens,
            format!("[[token]]\nsha256 = \"{hash}\"\nappend = [\"/\"]\nread = [\"/\"]\n"),
        )?;
        let addr = format!("127.0.0.1:{}", ports[1]);
        let flags = [
            "--tls-cert",
            pki.cert.to_str().expect("utf-8 path"),
            "--tls-key",
            pki.key.to_str().expect("utf-8 path"),
            "--token-file",
            tokens.to_str().expect("utf-8 path"),
        ];
        let (process, _) = spawn_server_on(&dir.join("secured"), 1, &addr, &flags)?;
        Side {
            name: "TLS + token",
            addr,
            ca: Some(pki.ca_pem),
            token: Some(token),
            _process: process,
        }
    };
    let rt = runtime()?;
    let sides = [plain, secured];
    let mut appends = [Vec::new(), Vec::new()];
    let mut catchups = [Vec::new(), Vec::new()];
    for pass in 0..args.passes.max(1) {
        for (i, side) in sides.iter().enumerate() {
            let (append_eps, catchup_eps) = rt.block_on(one_pass(args, side, pass as u64))?;
            println!(
                "  pass {} {:<12} append {:>10.0} events/s   catch-up {:>10.0} events/s",
                pass + 1,
                side.name,
                append_eps,
                catchup_eps
            );
            appends[i].push(append_eps);
            catchups[i].push(catchup_eps);
        }
    }
    let (a0, a1) = (median(appends[0].clone()), median(appends[1].clone()));
    let (c0, c1) = (median(catchups[0].clone()), median(catchups[1].clone()));
    println!();
    println!(
        "{:<14} {:>16} {:>18}",
        "server", "append events/s", "catch-up events/s"
    );
    println!("{:<14} {:>16.0} {:>18.0}", "plain", a0, c0);
    println!("{:<14} {:>16.0} {:>18.0}", "TLS + token", a1, c1);
    println!("{:<14} {:>16.2} {:>18.2}", "ratio", a1 / a0, c1 / c0);
    Ok(())
}

/// Appends `events` more events to `side` (their indexes after the
/// previous passes'), then reads everything from the beginning.
async fn one_pass(args: &Args, side: &Side, pass: u64) -> Result<(f64, f64)> {
    let mut client = side.client().await?;
    let first = pass * args.events;
    let started = Instant::now();
    let mut i = first;
    while i < first + args.events {
        let n = args.batch.min(first + args.events - i);
        client
            .append(v1::AppendRequest {
                events: (i..i + n).map(|k| event(k, args.payload)).collect(),
                durability: v1::Durability::Memory as i32,
                ..Default::default()
            })
            .await?;
        i += n;
    }
    let append_eps = args.events as f64 / started.elapsed().as_secs_f64();
    let total = first + args.events;
    let started = Instant::now();
    let mut stream = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            batching: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut seen = HashSet::with_capacity(total as usize);
    while (seen.len() as u64) < total {
        let response = tokio::time::timeout(Duration::from_secs(60), stream.message())
            .await
            .context("catch-up: no response in 60 s")??
            .context("catch-up: the stream ended")?;
        let events = match response.item {
            Some(Item::Event(e)) => vec![e],
            Some(Item::Batch(b)) => b.events,
            _ => Vec::new(),
        };
        for e in events {
            let attributes = e
                .event
                .and_then(|e| e.new_entry)
                .map(|n| n.attributes)
                .unwrap_or_default();
            let index = unstamp(&attributes)
                .context("an event without a stamp")?
                .index;
            if !seen.insert(index) {
                bail!("{}: event {index} delivered twice", side.name);
            }
        }
    }
    Ok((append_eps, total as f64 / started.elapsed().as_secs_f64()))
}

/// A CA and a server certificate for 127.0.0.1 it signed, in `dir`.
struct Pki {
    ca_pem: Vec<u8>,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Result<Pki> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "ringfeed bench CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
        let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
        std::fs::write(&cert_path, cert.pem())?;
        std::fs::write(&key_path, key.serialize_pem())?;
        Ok(Pki {
            ca_pem: ca_cert.pem().into_bytes(),
            cert: cert_path,
            key: key_path,
        })
    }
}
