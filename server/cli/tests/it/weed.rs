//! A real SeaweedFS (`weed` 4.48, installed by `bench/peers/install.sh`): a
//! master, a volume server and a filer as three processes on free loopback
//! ports, their data in a scratch dir, killed on drop. Each can be stopped
//! and started again on the same ports and data.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster_nodes::free_ports;
use ringfeed_proto::filer_pb;
use ringfeed_proto::filer_pb::seaweed_filer_client::SeaweedFilerClient;
use ringfeed_proto::tonic::transport::Channel;

/// The longest the three processes may take to serve a create.
const START: Duration = Duration::from_secs(40);

pub struct Weed {
    dir: tempfile::TempDir,
    weed: PathBuf,
    /// Master, volume server, filer: (name, arguments, the running process).
    processes: Vec<(&'static str, Vec<String>, Option<Child>)>,
    /// Each running process's guard: the watchdog kills it if the test
    /// hangs (it exits the binary at once, and no `Drop` here would run).
    owned: Vec<Option<ringfeed_testkit::OwnedChild>>,
    /// The filer as `weed` commands and `--follow-filer` name it: `127.0.0.1:PORT.GRPCPORT`.
    pub filer: String,
    /// The filer's gRPC address.
    pub filer_grpc: String,
}

/// `weed` on the PATH, resolved to the binary (a pyenv shim is a script).
fn weed_binary() -> Option<PathBuf> {
    let output = Command::new("weed").arg("version").output().ok()?;
    if !output.status.success() {
        return None;
    }
    let shim = Command::new("pyenv").args(["which", "weed"]).output();
    match shim {
        Ok(o) if o.status.success() => {
            Some(PathBuf::from(String::from_utf8(o.stdout).ok()?.trim()))
        }
        _ => Some(PathBuf::from("weed")),
    }
}

impl Weed {
    /// Starts the three and waits until the filer stores an entry. `None`
    /// when `weed` is not installed and this is not CI (`.ci/run` installs
    /// it, so under CI a missing `weed` fails the test).
    pub async fn start() -> Option<Weed> {
        let Some(weed) = weed_binary() else {
            assert!(
                !ringfeed_testkit::under_ci(),
                "weed is missing: .ci/run installs it (bench/peers/install.sh), so CI must have it"
            );
            eprintln!("weed not installed: skipped (bench/peers/install.sh installs it; CI does)");
            return None;
        };
        let dir = tempfile::Builder::new().prefix("weed-").tempdir().unwrap();
        let ports: Vec<u16> = free_ports(6)
            .iter()
            .map(|a| a.rsplit_once(':').unwrap().1.parse().unwrap())
            .collect();
        let master = format!("127.0.0.1:{}.{}", ports[0], ports[1]);
        let data = |name: &str| dir.path().join(name).display().to_string();
        let processes = vec![
            (
                "master",
                vec![
                    format!("-port={}", ports[0]),
                    format!("-port.grpc={}", ports[1]),
                    format!("-mdir={}", data("master")),
                    "-telemetry=false".into(),
                    "-volumeSizeLimitMB=64".into(),
                ],
                None,
            ),
            (
                "volume",
                vec![
                    format!("-port={}", ports[2]),
                    format!("-port.grpc={}", ports[3]),
                    format!("-dir={}", data("volume")),
                    "-max=20".into(),
                    format!("-master={master}"),
                    "-preStopSeconds=0".into(),
                ],
                None,
            ),
            (
                "filer",
                vec![
                    format!("-port={}", ports[4]),
                    format!("-port.grpc={}", ports[5]),
                    format!("-master={master}"),
                    format!("-defaultStoreDir={}", data("filer")),
                    format!("-localSocket={}", data("filer.sock")),
                    "-s3=false".into(),
                    "-webdav=false".into(),
                    "-sftp=false".into(),
                    "-iam=false".into(),
                ],
                None,
            ),
        ];
        let mut weed = Weed {
            filer: format!("127.0.0.1:{}.{}", ports[4], ports[5]),
            filer_grpc: format!("127.0.0.1:{}", ports[5]),
            dir,
            weed,
            processes,
            owned: vec![None, None, None],
        };
        for i in 0..3 {
            weed.spawn(i);
        }
        weed.wait_ready().await;
        Some(weed)
    }

    /// Starts SeaweedFS's S3 gateway on the filer, with anonymous access (no
    /// identities configured), and makes `bucket` in it; its endpoint URL.
    pub async fn start_s3(&mut self, bucket: &str) -> String {
        self.start_s3_with(bucket, None).await
    }

    /// [`Weed::start_s3`] with the gateway's identities (`-config`, its JSON)
    /// if given: they must let anonymous requests make the bucket.
    pub async fn start_s3_with(&mut self, bucket: &str, identities: Option<&str>) -> String {
        let config = identities.map(|json| {
            let path = self.dir.path().join("s3-identities.json");
            std::fs::write(&path, json).unwrap();
            format!("-config={}", path.display())
        });
        let ports: Vec<String> = free_ports(2)
            .iter()
            .map(|a| a.rsplit_once(':').unwrap().1.to_owned())
            .collect();
        let endpoint = format!("127.0.0.1:{}", ports[0]);
        self.processes.push((
            "s3",
            vec![
                format!("-port={}", ports[0]),
                format!("-port.grpc={}", ports[1]),
                "-port.iceberg=0".into(),
                "-port.lance=0".into(),
                format!("-filer={}", self.filer),
            ]
            .into_iter()
            .chain(config)
            .collect(),
            None,
        ));
        self.owned.push(None);
        self.spawn(self.processes.len() - 1);
        // Ready once it makes the bucket (PUT /BUCKET).
        let deadline = Instant::now() + START;
        loop {
            let made = std::net::TcpStream::connect(&endpoint).and_then(|mut conn| {
                use std::io::{Read as _, Write as _};
                write!(
                    conn,
                    "PUT /{bucket} HTTP/1.1\r\nhost: {endpoint}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )?;
                let mut response = String::new();
                conn.read_to_string(&mut response)?;
                Ok(response)
            });
            match made {
                Ok(r) if r.starts_with("HTTP/1.1 200") => return format!("http://{endpoint}"),
                other => assert!(
                    Instant::now() < deadline,
                    "the S3 gateway made no bucket within {START:?}: {other:?}\n{}",
                    self.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn spawn(&mut self, i: usize) {
        let (name, args, child) = &mut self.processes[i];
        std::fs::create_dir_all(self.dir.path().join(*name)).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .unwrap();
        // In the scratch dir: weed reads filer.toml and master.toml from the
        // working directory first.
        *child = Some(
            Command::new(&self.weed)
                .current_dir(self.dir.path())
                .arg("-logtostderr")
                .arg(*name)
                .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
                .args(args.iter())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("starting weed {name}: {e}")),
        );
        self.owned[i] = child.as_ref().map(|c| ringfeed_testkit::own_child(c.id()));
    }

    /// Waits until the filer stores an entry (the volume server registered).
    async fn wait_ready(&self) {
        let deadline = Instant::now() + START;
        loop {
            let tried = async {
                let mut filer = self.client().await.map_err(|e| e.to_string())?;
                create(&mut filer, "/", "ready", true).await
            };
            match tokio::time::timeout(Duration::from_secs(5), tried).await {
                Ok(Ok(())) => return,
                failed => assert!(
                    Instant::now() < deadline,
                    "weed did not store an entry within {START:?}: {failed:?}\n{}",
                    self.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of each process's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for (name, _, _) in &self.processes {
            let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            all += &format!("--- weed {name}:\n");
            for line in tail.into_iter().rev() {
                all += line;
                all.push('\n');
            }
        }
        all
    }

    pub async fn client(
        &self,
    ) -> Result<SeaweedFilerClient<Channel>, ringfeed_proto::tonic::transport::Error> {
        SeaweedFilerClient::connect(format!("http://{}", self.filer_grpc)).await
    }

    /// A `weed` client command (`filer.meta.tail`, ...), run in the scratch dir.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.weed);
        command.current_dir(self.dir.path()).args(args);
        command
    }

    /// A connection to the filer's HTTP port (reads time out after 20 s),
    /// and its address.
    fn http(&self) -> (std::net::TcpStream, &str) {
        let http = self
            .filer
            .rsplit_once('.')
            .map_or(&self.filer[..], |(h, _)| h);
        let conn = std::net::TcpStream::connect(http).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        (conn, http)
    }

    /// Writes `body` as the file `path` through the filer's HTTP API.
    pub fn put_file(&self, path: &str, body: &[u8]) {
        use std::io::{Read as _, Write as _};
        let (mut conn, http) = self.http();
        write!(
            conn,
            "PUT {path} HTTP/1.1\r\nhost: {http}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        conn.write_all(body).unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 2"), "PUT {path}: {response}");
    }

    /// The file `path` read through the filer's HTTP API: `None` when the
    /// filer has no such file.
    pub fn get_file(&self, path: &str) -> Option<Vec<u8>> {
        use std::io::{Read as _, Write as _};
        let (mut conn, http) = self.http();
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nhost: {http}\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = Vec::new();
        conn.read_to_end(&mut response).unwrap();
        let split = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an HTTP response");
        let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
        assert!(
            !head.contains("transfer-encoding: chunked"),
            "GET {path}: {head}"
        );
        match &head[..12] {
            "http/1.1 200" => Some(response[split + 4..].to_vec()),
            "http/1.1 404" => None,
            _ => panic!("GET {path}: {head}"),
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the filer process.
    pub fn signal_filer(&self, signal: &str) {
        let (_, _, child) = &self.processes[2];
        let pid = child.as_ref().expect("the filer runs").id();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// SIGKILLs the S3 gateway ([`Weed::start_s3`]).
    pub fn kill_s3(&mut self) {
        let i = self.processes.len() - 1;
        assert_eq!(self.processes[i].0, "s3", "start_s3 first");
        if let Some(mut child) = self.processes[i].2.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.owned[i] = None;
    }

    /// Starts the S3 gateway again on its ports.
    pub fn restart_s3(&mut self) {
        let i = self.processes.len() - 1;
        assert_eq!(self.processes[i].0, "s3", "start_s3 first");
        self.spawn(i);
    }

    /// SIGKILLs the filer and starts it again on the same ports and store.
    pub async fn restart_filer(&mut self) {
        let (_, _, child) = &mut self.processes[2];
        if let Some(mut child) = child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.owned[2] = None;
        self.spawn(2);
        self.wait_ready().await;
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        for (_, _, child) in self.processes.iter_mut().rev() {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn attributes(mode: u32) -> filer_pb::FuseAttributes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    filer_pb::FuseAttributes {
        mtime: now,
        crtime: now,
        file_mode: mode,
        ..Default::default()
    }
}

/// Creates an entry through the filer (a directory, or an empty file).
pub async fn create(
    filer: &mut SeaweedFilerClient<Channel>,
    directory: &str,
    name: &str,
    is_directory: bool,
) -> Result<(), String> {
    let mode = if is_directory {
        (1 << 31) | 0o755
    } else {
        0o644
    };
    let response = filer
        .create_entry(filer_pb::CreateEntryRequest {
            directory: directory.into(),
            entry: Some(filer_pb::Entry {
                name: name.into(),
                is_directory,
                attributes: Some(attributes(mode)),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map_err(|s| format!("CreateEntry {directory}/{name}: {s}"))?
        .into_inner();
    match response.error.as_str() {
        "" => Ok(()),
        e => Err(format!("CreateEntry {directory}/{name}: {e}")),
    }
}

/// Renames (moves) an entry through the filer.
pub async fn rename(
    filer: &mut SeaweedFilerClient<Channel>,
    (old_directory, old_name): (&str, &str),
    (new_directory, new_name): (&str, &str),
) {
    filer
        .atomic_rename_entry(filer_pb::AtomicRenameEntryRequest {
            old_directory: old_directory.into(),
            old_name: old_name.into(),
            new_directory: new_directory.into(),
            new_name: new_name.into(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|s| panic!("AtomicRenameEntry {old_directory}/{old_name}: {s}"));
}

/// Deletes an entry through the filer.
pub async fn delete(filer: &mut SeaweedFilerClient<Channel>, directory: &str, name: &str) {
    let response = filer
        .delete_entry(filer_pb::DeleteEntryRequest {
            directory: directory.into(),
            name: name.into(),
            is_delete_data: true,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|s| panic!("DeleteEntry {directory}/{name}: {s}"))
        .into_inner();
    assert_eq!(response.error, "", "DeleteEntry {directory}/{name}");
}

/// One event of a filer's metadata log as compared here: its timestamp,
/// directory and notification.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEvent {
    pub ts_ns: i64,
    pub directory: String,
    pub notification: filer_pb::EventNotification,
}

/// The filer's own log, from the start through `until_ns`: what
/// `SubscribeLocalMetadata` sends (heartbeats and empty markers left out).
pub async fn filer_log(weed: &Weed, until_ns: i64) -> Vec<LogEvent> {
    let mut filer = weed.client().await.unwrap();
    let mut stream = filer
        .subscribe_local_metadata(filer_pb::SubscribeMetadataRequest {
            client_name: "ringfeed-test".into(),
            path_prefix: "/".into(),
            since_ns: 0,
            until_ns,
            client_id: 7,
            client_epoch: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(response) = stream.message().await.unwrap() {
        let mut all = vec![response.clone()];
        all.extend(response.events);
        for r in all {
            let Some(notification) = r.event_notification else {
                continue;
            };
            if notification.old_entry.is_none() && notification.new_entry.is_none() {
                continue;
            }
            events.push(LogEvent {
                ts_ns: r.ts_ns,
                directory: r.directory,
                notification,
            });
        }
    }
    events
}
