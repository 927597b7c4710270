//! `sluice ctl`, the client: a command sent to a running instance's
//! socket and its answer printed (text for people, `--json` for scripts);
//! `top` refreshed; `capture` started, waited on and, with `-w -`,
//! streamed; `--batch` files of commands run in order. The server side
//! (what the management thread answers) is [`super::commands`] and
//! [`super::edit`].

use super::{answer_within, Request, Response, TIMEOUT};
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

/// Sends `args` to the instance at `path` and returns its answer
/// (`sluice ctl`).
pub fn request(path: &Path, args: &[String]) -> Result<Response> {
    let mut conn = UnixStream::connect(path).with_context(|| {
        format!(
            "connecting to {} (is sluice running with [management] socket = \"{}\"? as its user?)",
            path.display(),
            path.display()
        )
    })?;
    conn.set_read_timeout(Some(answer_within(args) + TIMEOUT * 2))?;
    let mut line = serde_json::to_string(&Request {
        args: args.to_vec(),
    })?;
    line.push('\n');
    conn.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(conn)
        .read_line(&mut reply)
        .context("reading the answer")?;
    serde_json::from_str(reply.trim()).with_context(|| format!("a malformed answer: {reply:?}"))
}

/// Writes to stdout; false when it is closed (a reader that went away).
pub fn out(s: &str) -> bool {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes()).and_then(|()| o.flush()).is_ok()
}

/// `sluice ctl`: 0 when the command did what was asked, 1 when the
/// appliance refused it, 2 when it could not be reached.
pub fn run(
    socket: &std::path::Path,
    json: bool,
    interval: f64,
    count: u64,
    args: &[String],
) -> ExitCode {
    let ask = |args: &[String]| match request(socket, args) {
        Ok(r) => Ok(r),
        Err(e) => {
            eprintln!("sluice ctl: {e:#}");
            Err(ExitCode::from(2))
        }
    };
    if args == ["top"] {
        if !(0.05..=3600.0).contains(&interval) {
            eprintln!("sluice ctl: --interval must be 0.05..=3600 seconds");
            return ExitCode::from(1);
        }
        let mut n = 0;
        loop {
            let mut screen = String::from("\x1b[H\x1b[2J");
            for cmd in [["show", "cores"], ["show", "ports"]] {
                let words: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
                match ask(&words) {
                    Ok(r) if r.ok => screen += &(r.text + "\n"),
                    Ok(r) => {
                        eprintln!("sluice ctl: {}", r.error.unwrap_or_default());
                        return ExitCode::from(1);
                    }
                    Err(code) => return code,
                }
            }
            if !out(&screen) {
                return ExitCode::SUCCESS;
            }
            n += 1;
            if count > 0 && n >= count {
                return ExitCode::SUCCESS;
            }
            std::thread::sleep(std::time::Duration::from_secs_f64(interval));
        }
    }
    if starts_capture(args) {
        return capture(socket, &args[1..], &ask);
    }
    match ask(args) {
        Err(code) => code,
        Ok(r) if r.ok => {
            let text = if json {
                serde_json::to_string_pretty(&r.data).unwrap_or_default() + "\n"
            } else {
                r.text
            };
            let _ = out(&text);
            ExitCode::SUCCESS
        }
        Ok(r) => {
            eprintln!("sluice ctl: {}", r.error.unwrap_or_else(|| "failed".into()));
            ExitCode::from(1)
        }
    }
}

/// Whether `args` starts a capture (which the client waits on and
/// writes out), not `capture status` or `capture stop`.
fn starts_capture(args: &[String]) -> bool {
    args.first().is_some_and(|a| a == "capture")
        && !matches!(args.get(1).map(String::as_str), Some("status" | "stop"))
}

/// `sluice ctl capture ...`: starts it (with `-w` made absolute: the
/// appliance may run elsewhere in the file system), then, when it has a
/// count or a duration, waits for it to finish and says what it wrote.
/// `-w -` streams the pcapng to stdout (for `| tshark -r -` or Wireshark):
/// the appliance writes a file in the temporary directory, flushed at
/// every turn, and this follows it to the end; it needs a count or a
/// duration, so that it ends.
fn capture(
    socket: &std::path::Path,
    args: &[String],
    ask: &dyn Fn(&[String]) -> Result<super::Response, ExitCode>,
) -> ExitCode {
    let mut req = vec!["capture".to_string(), "start".to_string()];
    let start = usize::from(args.first().is_some_and(|a| a == "start"));
    let mut it = args[start..].iter();
    let mut bounded = false;
    let mut stream: Option<std::path::PathBuf> = None;
    while let Some(a) = it.next() {
        req.push(a.clone());
        bounded |= matches!(a.as_str(), "--count" | "-c" | "--duration");
        if matches!(a.as_str(), "-w" | "--write") {
            if let Some(f) = it.next() {
                let abs = if f == "-" {
                    // Beside the control socket: a directory the appliance
                    // writes (its RuntimeDirectory under systemd, whose
                    // /tmp is private to it) and this client reads.
                    let dir = socket
                        .parent()
                        .filter(|d| !d.as_os_str().is_empty())
                        .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
                    let t = dir.join(format!("sluice-capture-{}.pcapng", std::process::id()));
                    stream = Some(t.clone());
                    t
                } else if std::path::Path::new(f).is_absolute() {
                    std::path::PathBuf::from(f)
                } else {
                    std::env::current_dir().unwrap_or_default().join(f)
                };
                req.push(abs.display().to_string());
            }
        }
    }
    if stream.is_some() && !bounded {
        eprintln!("sluice ctl: -w - needs --count or --duration");
        return ExitCode::from(1);
    }
    let r = match ask(&req) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if !r.ok {
        eprintln!("sluice ctl: {}", r.error.unwrap_or_default());
        return ExitCode::from(1);
    }
    if !bounded {
        let _ = out(&format!(
            "{}stop it with `sluice ctl -s {} capture stop`\n",
            r.text,
            socket.display()
        ));
        return ExitCode::SUCCESS;
    }
    let status = vec!["capture".to_string(), "status".to_string()];
    // `-w -`: copy what the appliance has written so far, each turn.
    let mut follow = stream.as_ref().and_then(|p| std::fs::File::open(p).ok());
    let copy = |f: &mut Option<std::fs::File>| {
        if let Some(f) = f {
            let mut o = std::io::stdout().lock();
            let _ = std::io::copy(f, &mut o);
            let _ = std::io::Write::flush(&mut o);
        }
    };
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        copy(&mut follow);
        match ask(&status) {
            Ok(r) if r.ok && r.data["running"] == false => {
                if let Some(p) = &stream {
                    copy(&mut follow);
                    let _ = std::fs::remove_file(p);
                    // The file was a relay, gone now: say where it went.
                    eprint!(
                        "{}",
                        r.text.replace(&p.display().to_string(), "standard output")
                    );
                } else {
                    let _ = out(&r.text);
                }
                return ExitCode::SUCCESS;
            }
            Ok(r) if r.ok => {}
            Ok(r) => {
                eprintln!("sluice ctl: {}", r.error.unwrap_or_default());
                return ExitCode::from(1);
            }
            Err(code) => return code,
        }
    }
}

/// `sluice ctl --batch FILE`: each line of FILE a command, in order, one
/// connection each (the protocol's), as `ip -batch` runs them.
pub fn batch(
    socket: &std::path::Path,
    json: bool,
    force: bool,
    file: &std::path::Path,
) -> ExitCode {
    let text = if file == std::path::Path::new("-") {
        let mut t = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut t).map(|_| t)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice ctl: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for (n, line) in text.lines().enumerate() {
        let words: Vec<String> = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if words.is_empty() {
            continue;
        }
        let at = format!("{}:{}", file.display(), n + 1);
        // What waits or streams has no place in a batch.
        let refused = if words[0] == "top" {
            Some("`top` is interactive")
        } else if starts_capture(&words) {
            Some("`capture` writes a file: run it on its own")
        } else {
            None
        };
        let answer = match refused {
            Some(why) => Err(why.to_string()),
            None => match request(socket, &words) {
                Ok(r) if r.ok => Ok(if json {
                    serde_json::to_string(&r.data).unwrap_or_default() + "\n"
                } else {
                    r.text
                }),
                Ok(r) => Err(r.error.unwrap_or_else(|| "failed".into())),
                Err(e) => {
                    eprintln!("sluice ctl: {at}: {e:#}");
                    return ExitCode::from(2);
                }
            },
        };
        match answer {
            Ok(text) => {
                if !out(&text) {
                    return ExitCode::SUCCESS;
                }
            }
            Err(e) => {
                eprintln!("sluice ctl: {at}: {}: {e}", words.join(" "));
                failed = true;
                if !force {
                    return ExitCode::from(1);
                }
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
