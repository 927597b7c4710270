//! The control socket (`[management] socket`) and `sluice ctl`, its client.
//!
//! A Unix stream socket, mode 0600 (its owner only), one per running
//! instance: the path is locked (`PATH.lock`, the instance locks' `flock`),
//! so a second instance configured with the same path is refused with the
//! first one's PID. The socket is bound under a temporary name, restricted
//! to 0600, then renamed into place, so it is never reachable with looser
//! permissions.
//!
//! The protocol: one request per connection, a JSON line
//! `{"args": ["show", "ports"]}`; one JSON line back,
//! `{"ok": true, "text": "…", "data": …}` (`text` for people, `data` for
//! scripts; `sluice ctl --json` prints `data`) or
//! `{"ok": false, "error": "…"}`. A request over [`MAX_REQUEST`] bytes,
//! not JSON, or not answered within the timeouts gets an error; none of it
//! reaches the workers. Requests are answered by the management thread,
//! which owns the telemetry ([`commands`]); the socket's one thread only
//! carries them, within [`LIMITS`] ([`crate::serve`]: at most
//! [`MAX_CLIENTS`] connections, a deadline per request).

pub mod client;
pub mod commands;
pub mod edit;

pub use client::request;

use crate::serve::{serve, Limits, Listener, Parsed, Peer, Protocol, Reply};
use anyhow::{bail, Context, Result};
use crossbeam_channel::{Receiver, Sender};
use mio::Waker;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Where `sluice ctl` looks when not told (and what configs usually name).
pub const DEFAULT_SOCKET: &str = "/run/sluice/sluice.sock";

/// The longest request line.
pub const MAX_REQUEST: u64 = 64 * 1024;

/// Connections served at once; more are told to retry.
pub const MAX_CLIENTS: usize = 16;

/// How long a client may take to send its request, and the management
/// thread to answer it.
const TIMEOUT: Duration = Duration::from_secs(5);

/// How long the answer to a command that rebuilds the tables may take: a
/// reload, or a route or neighbour change that cannot go into the FIB in
/// place, is answered once its tables are built (seconds for a full
/// Internet table) and installed.
const BUILD_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the management thread may take to answer `args`.
fn answer_within(args: &[String]) -> Duration {
    if args == ["reload"] || edit::is_edit(args) {
        BUILD_TIMEOUT
    } else {
        TIMEOUT
    }
}

/// A request: the command's words.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The command and its arguments (`["set", "poll", "1", "busy"]`).
    pub args: Vec<String>,
}

/// An answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Response {
    /// Whether the command did what was asked.
    pub ok: bool,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// For scripts.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// Success with `text` for people and `data` for scripts.
    pub fn ok(text: String, data: serde_json::Value) -> Self {
        Response {
            ok: true,
            text,
            data,
            error: None,
        }
    }

    /// Failure.
    pub fn error(msg: impl Into<String>) -> Self {
        Response {
            ok: false,
            error: Some(msg.into()),
            ..Response::default()
        }
    }
}

/// A request on its way to the management thread, with where its answer
/// goes.
pub struct Command {
    /// The command's words.
    pub args: Vec<String>,
    /// The answer's way back (sending wakes the socket's thread).
    pub reply: Reply<Response>,
    /// Who asked: `pid P uid U` of the client process (`SO_PEERCRED`),
    /// for the log of changes.
    pub who: String,
}

/// Whether `args` changes the running appliance (and is logged): route,
/// neighbour and policy changes, reloads, captures, generators, cleared
/// counters. `show`, `stats`, `top` and `help` are not.
pub fn changes(args: &[String]) -> bool {
    !matches!(
        args.first().map(String::as_str),
        None | Some("show" | "stats" | "top" | "help")
    ) && !matches!(
        args.get(..2),
        Some([a, b]) if a == "capture" && b == "status"
    )
}

/// The log line for `args` from `who`, answered `r`.
pub fn log_line(who: &str, args: &[String], r: &Response) -> String {
    let outcome = if r.ok {
        r.text.trim_end().replace('\n', "; ")
    } else {
        format!(
            "refused: {}",
            r.error
                .as_deref()
                .unwrap_or("")
                .trim_end()
                .replace('\n', "; ")
        )
    };
    let cmd = args.join(" ");
    // Answers that name their command already do not repeat it.
    let outcome = outcome
        .strip_prefix(&format!("{cmd}: "))
        .unwrap_or(&outcome);
    // What a client sent is printed safely (no control characters into
    // the log, no line of unbounded length).
    format!(
        "ctl ({who}): {}: {}",
        crate::config::shown(&cmd, 512),
        crate::config::shown(outcome, 4096)
    )
}

/// The running control socket; removed when dropped.
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _lock: crate::lock::LockFile,
}

impl Server {
    /// Locks `path`, binds it (mode 0600) and serves it; the management
    /// thread answers what arrives on the returned channel.
    pub fn start(path: &Path) -> Result<(Server, Receiver<Command>)> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("control socket: creating {}", dir.display()))?;
        }
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let lock = crate::lock::take(&lock_path).map_err(|e| match e {
            crate::lock::Held::By(pid) => anyhow::anyhow!(
                "control socket {} is in use by another sluice (pid {pid}; lock {}): stop that instance first, or give this one another [management] socket",
                path.display(),
                lock_path.display()
            ),
            crate::lock::Held::Io(e) => anyhow::anyhow!(
                "control socket {}: cannot take the lock {}: {e}",
                path.display(),
                lock_path.display()
            ),
            crate::lock::Held::Planted(why) => anyhow::anyhow!(
                "control socket {}: {why}: not a lock file of this user's; left alone (remove it if it is yours)",
                path.display()
            ),
        })?;
        // Ours: whatever is there is a previous instance's leftover.
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!(
                "control socket {}: removing the old one: {e}",
                path.display()
            ),
        }
        let tmp = PathBuf::from(format!("{}.{}.new", path.display(), std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let listener = UnixListener::bind(&tmp)
            .with_context(|| format!("control socket: binding {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("control socket: chmod 0600 {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("control socket: moving it to {}", path.display()))?;
        let (tx, rx) = crossbeam_channel::bounded::<Command>(MAX_CLIENTS);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ctl".into())
            .spawn(move || {
                crate::privilege::shed_thread();
                if let Err(e) = serve(Listener::Unix(listener), Lines { commands: tx }, LIMITS, &s)
                {
                    eprintln!("control socket: stopped: {e}");
                }
            })
            .context("spawning the control socket thread")?;
        Ok((
            Server {
                path: path.to_path_buf(),
                stop,
                thread: Some(thread),
                _lock: lock,
            },
            rx,
        ))
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What one client may hold (see [`crate::serve`]): [`MAX_CLIENTS`]
/// connections, a request of [`MAX_REQUEST`] bytes sent whole within
/// 5 s of connecting (a deadline per request: a client trickling a
/// byte at a time is closed, and evicted sooner by a client with a whole
/// request), 5 s to take the answer.
pub const LIMITS: Limits = Limits {
    max_conns: MAX_CLIENTS,
    max_request: MAX_REQUEST as usize,
    read_within: TIMEOUT,
    write_within: TIMEOUT,
};

/// The control socket's protocol: a JSON line in, a JSON line out.
struct Lines {
    commands: Sender<Command>,
}

fn line_of(r: &Response) -> Vec<u8> {
    let mut line = serde_json::to_string(r).unwrap_or_else(|_| r#"{"ok":false}"#.into());
    line.push('\n');
    line.into_bytes()
}

impl Protocol for Lines {
    type Answer = Response;

    fn parse(&mut self, buf: &[u8], peer: Peer, waker: &Arc<Waker>) -> Parsed<Response> {
        let now = |r: Response| Parsed::Now(line_of(&r));
        let Some(end) = buf.iter().position(|&b| b == b'\n') else {
            return Parsed::More;
        };
        let Ok(line) = std::str::from_utf8(&buf[..end]) else {
            return now(Response::error(
                "malformed request (not UTF-8); send one JSON line such as {\"args\": [\"stats\"]}",
            ));
        };
        let req = match serde_json::from_str::<Request>(line.trim()) {
            Err(e) => {
                return now(Response::error(format!(
                    "malformed request ({e}); send one JSON line such as {{\"args\": [\"stats\"]}}"
                )))
            }
            Ok(req) if req.args.is_empty() => {
                return now(Response::error("empty command; try `help`"))
            }
            Ok(req) => req,
        };
        let (reply, rx) = Reply::new(waker);
        let within = answer_within(&req.args);
        let who = match peer {
            Some((pid, uid)) => format!("pid {pid} uid {uid}"),
            None => "an unknown client".into(),
        };
        let cmd = Command {
            args: req.args,
            reply,
            who,
        };
        match self.commands.try_send(cmd) {
            Err(_) => now(Response::error(
                "the appliance is not answering (busy or stopping)",
            )),
            Ok(()) => Parsed::Later {
                rx,
                within,
                late: line_of(&Response::error(
                    "no answer from the management thread in time",
                )),
            },
        }
    }

    fn encode(&self, r: Response) -> Vec<u8> {
        line_of(&r)
    }

    fn too_long(&self) -> Vec<u8> {
        line_of(&Response::error(format!(
            "request longer than {MAX_REQUEST} bytes"
        )))
    }

    fn too_slow(&self) -> Vec<u8> {
        line_of(&Response::error(format!(
            "request not sent whole within {} s",
            TIMEOUT.as_secs()
        )))
    }

    fn busy(&self) -> Vec<u8> {
        line_of(&Response::error("too many clients at once; try again"))
    }
}
