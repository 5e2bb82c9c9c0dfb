//! `ringfeed tune profile --write x.toml` writes a file that
//! `ringfeed serve --config x.toml` accepts and serves with; a config with an
//! unknown key is refused with the key named.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn a_written_profile_is_accepted_by_serve_and_typos_are_named() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let toml = dir.path().join("x.toml");
    let bin = env!("CARGO_BIN_EXE_ringfeed");
    let out = Command::new(bin)
        .args(["tune", "profile", "--data-dir"])
        .arg(&data)
        .arg("--write")
        .arg(&toml)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&toml).unwrap();
    assert!(text.contains("window_bytes"), "{text}");

    // Serve with it (flags override the data dir and address).
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&toml)
        .arg("--data-dir")
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let listening = lines.any(|l| l.starts_with("listening on "));
    // Keep reading, so the server's last lines do not meet a closed pipe.
    let drain = std::thread::spawn(move || lines.count());
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    drain.join().unwrap();
    assert!(listening, "serve did not start with the profile:\n{text}");
    assert!(status.success(), "graceful stop: {status:?}");

    std::fs::write(&toml, format!("{text}\nwindw_bytes = 4096\n")).unwrap();
    let out = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&toml)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("windw_bytes"),
        "the unknown key is named: {err}"
    );
}
