//! A real browser for page tests: Debian's headless Chromium, driven over
//! the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands in
//! on fd 3, answers out on fd 4, each a JSON message ended by a NUL byte),
//! so no WebSocket client and no port are needed.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one DevTools command may take before the test fails.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// The browser's executable: `$CHROMIUM`, else `chromium` on the PATH.
/// `None` when there is none (the test then says it is skipped; under
/// `CI=true` it fails instead, as `.ci/run` installs Chromium).
pub fn chromium() -> Option<String> {
    if let Ok(path) = std::env::var("CHROMIUM") {
        return Some(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|p| p.is_file())
    });
    match found {
        Some(path) => Some(path.display().to_string()),
        None if ringfeed_testkit::under_ci() => {
            panic!("chromium is not installed: .ci/run installs Debian's chromium package")
        }
        None => None,
    }
}

/// One headless Chromium and one page in it.
pub struct Browser {
    child: Child,
    to_browser: std::io::PipeWriter,
    answers: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromium` with a fresh profile and opens a page of
    /// `width` x `height` pixels at `url`.
    pub fn open(chromium: &str, url: &str, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let (browser_reads, to_browser) = std::io::pipe().expect("pipe");
        let (from_browser, browser_writes) = std::io::pipe().expect("pipe");
        let (r, w) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
        let mut command = Command::new(chromium);
        command
            .args([
                // Root in a container: no user namespaces for the sandbox.
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: between fork and exec only async-signal-safe calls
        // (fcntl, dup2). The pipe ends are first moved above fd 10 so
        // placing one on 3 cannot close the other before it is placed.
        unsafe {
            command.pre_exec(move || {
                let r = libc::fcntl(r, libc::F_DUPFD, 10);
                let w = libc::fcntl(w, libc::F_DUPFD, 10);
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("starting chromium");
        drop((browser_reads, browser_writes));
        // Chromium's own complaints (no D-Bus in a container) go to the
        // test's output, where a failing test shows them.
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("chromium: {line}");
            }
        });
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            let mut from_browser = BufReader::new(from_browser);
            let mut message = Vec::new();
            while from_browser.read_until(0, &mut message).unwrap_or(0) > 0 {
                message.pop_if(|b| *b == 0);
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    // Events (no id) are not waited for.
                    if value.get("id").is_some() && tx.send(value).is_err() {
                        return;
                    }
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            to_browser,
            answers,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = browser.command(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().expect("targetId").to_owned();
        let attached = browser.command(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        browser.page(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        browser.page("Page.navigate", json!({ "url": url }));
        // Until the navigation commits, expressions run in about:blank.
        browser.wait_for(
            "the page loaded",
            "location.protocol.startsWith('http') && document.readyState === 'complete'",
            ANSWER_WITHIN,
            |v| v == true,
        );
        browser
    }

    /// Sends one command (to the page's session if `session`) and waits for
    /// its answer's `result`; an `error` answer fails the test.
    fn command(&mut self, session: Option<String>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = Value::String(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("json");
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("sending {method} to chromium: {e}"));
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self.answers.recv_timeout(left).unwrap_or_else(|e| {
                panic!("chromium did not answer {method} within {ANSWER_WITHIN:?}: {e}")
            });
            if answer["id"].as_u64() != Some(id) {
                continue;
            }
            if let Some(error) = answer.get("error") {
                panic!("chromium answered {method} with an error: {error}");
            }
            return answer["result"].clone();
        }
    }

    /// A command to the page.
    pub fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.command(Some(session), method, params)
    }

    /// The value of the JavaScript `expression` in the page (awaited if a
    /// promise; JSON-serialisable). A thrown exception fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.page(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("{expression}\nthrew: {exception}");
        }
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` every 100 ms until `done` holds for its value,
    /// and returns that value; fails the test with the last value after
    /// `within` (what the page shows is wrong or stuck, not slow: the page
    /// polls once a second).
    pub fn wait_for(
        &mut self,
        what: &str,
        expression: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let value = self.eval(expression);
            if done(&value) {
                return value;
            }
            if Instant::now() > deadline {
                panic!("the page did not show {what} within {within:?}; it shows {value}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the whole page.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let shot = self.page(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
