//! `[export]`: flow records to IPFIX collectors (RFC 7011 over UDP).
//!
//! ```toml
//! [export]
//! collectors = ["192.0.2.9:4739"]  # one or more, each gets every message
//! active_timeout = 60              # s: a long flow's record every so often
//! template_interval = 60           # s: templates sent again (UDP)
//! domain = 1                       # the observation domain ID
//! max_message = 1400               # bytes: an IPFIX message, under the path MTU
//! denied = true                    # a record for each first packet the rules refuse
//! ring = 4096                      # records a worker's ring holds
//! nat_events = false               # NAT44 session create/delete, ports exhausted
//! syslog = "192.0.2.9:514"         # NAT events as syslog lines too (UDP)
//! ```
//!
//! `collectors` may be left out when `syslog` is given (NAT events to
//! syslog only: no flow is accounted then).

use super::source::Ctx;
use serde::Deserialize;
use toml::Spanned;

/// `[export]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExport {
    pub(super) collectors: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) active_timeout: Option<Spanned<i64>>,
    pub(super) template_interval: Option<Spanned<i64>>,
    pub(super) domain: Option<Spanned<i64>>,
    pub(super) max_message: Option<Spanned<i64>>,
    pub(super) denied: Option<Spanned<bool>>,
    pub(super) ring: Option<Spanned<i64>>,
    pub(super) nat_events: Option<Spanned<bool>>,
    pub(super) syslog: Option<Spanned<String>>,
}

/// `[export]` checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportConfig {
    /// Where every message goes.
    pub collectors: Vec<std::net::SocketAddr>,
    /// A long flow's record every so often (seconds).
    pub active_timeout_s: u64,
    /// Templates sent again every so often (seconds).
    pub template_interval_s: u64,
    /// The observation domain ID.
    pub domain: u32,
    /// The largest IPFIX message (bytes).
    pub max_message: usize,
    /// Whether refused first packets are recorded.
    pub denied: bool,
    /// Records a worker's ring holds.
    pub ring: usize,
    /// Whether NAT44 session events (and port exhaustion) are written.
    pub nat_events: bool,
    /// Where NAT events go as syslog lines (UDP), if anywhere.
    pub syslog: Option<std::net::SocketAddr>,
}

/// The smallest `max_message`: a message header, a set header and the
/// largest record (IPv6), with room to spare.
pub const MIN_MESSAGE: i64 = 256;

/// Checks `[export]`; `None` when absent (or wrong: the errors are in
/// `cx`).
pub(super) fn check(
    cx: &mut Ctx<'_>,
    raw: Option<&RawExport>,
    gateway: bool,
) -> Option<ExportConfig> {
    let e = raw?;
    let mut ok = true;
    let mut collectors = Vec::new();
    let parse = |s: &Spanned<String>| match s.get_ref().parse::<std::net::SocketAddr>() {
        Ok(a) if a.port() != 0 && !a.ip().is_unspecified() => Some(a),
        _ => None,
    };
    let nat_events = e.nat_events.as_ref().is_some_and(|n| *n.get_ref());
    let syslog = match &e.syslog {
        None => None,
        Some(s) => match parse(s) {
            Some(a) if nat_events => Some(a),
            Some(_) => {
                cx.err(
                    s,
                    "export.syslog",
                    "syslog carries the NAT events: set `nat_events = true`",
                );
                ok = false;
                None
            }
            None => {
                cx.err(
                    s,
                    "export.syslog",
                    format!(
                        "`{}` is not ADDR:PORT with a port (such as \"192.0.2.9:514\")",
                        s.get_ref()
                    ),
                );
                ok = false;
                None
            }
        },
    };
    match &e.collectors {
        None if e.syslog.is_some() => {}
        None => {
            cx.err_whole(
                "export.collectors",
                "[export] needs `collectors` (the IPFIX collectors' ADDR:PORT, such as [\"192.0.2.9:4739\"]) or `syslog` (for NAT events)",
            );
            ok = false;
        }
        Some(list) if list.get_ref().is_empty() => {
            cx.err(list, "export.collectors", "no collector given");
            ok = false;
        }
        Some(list) => {
            for (i, c) in list.get_ref().iter().enumerate() {
                match parse(c) {
                    Some(a) => collectors.push(a),
                    None => {
                        cx.err(
                            c,
                            format!("export.collectors[{i}]"),
                            format!(
                                "`{}` is not ADDR:PORT with a port (such as \"192.0.2.9:4739\")",
                                c.get_ref()
                            ),
                        );
                        ok = false;
                    }
                }
            }
        }
    }
    let mut int = |v: &Option<Spanned<i64>>, key: &str, lo: i64, hi: i64, default: i64| -> i64 {
        match v {
            None => default,
            Some(s) if (lo..=hi).contains(s.get_ref()) => *s.get_ref(),
            Some(s) => {
                cx.err(s, key, format!("must be {lo}..={hi}; got {}", s.get_ref()));
                ok = false;
                default
            }
        }
    };
    let active = int(&e.active_timeout, "export.active_timeout", 1, 86_400, 60);
    let templates = int(
        &e.template_interval,
        "export.template_interval",
        1,
        86_400,
        60,
    );
    let domain = int(&e.domain, "export.domain", 0, i64::from(u32::MAX), 1);
    let max_message = int(
        &e.max_message,
        "export.max_message",
        MIN_MESSAGE,
        65_000,
        1400,
    );
    let ring = int(&e.ring, "export.ring", 16, 1 << 20, 4096);
    if !gateway {
        if let Some(c) = &e.collectors {
            cx.warn(
                c,
                "export.collectors",
                "there are no flows to export: the config has no [firewall], [conntrack] or [nat]",
            );
        }
    }
    ok.then(|| ExportConfig {
        collectors,
        active_timeout_s: active as u64,
        template_interval_s: templates as u64,
        domain: domain as u32,
        max_message: max_message as usize,
        denied: e.denied.as_ref().is_none_or(|d| *d.get_ref()),
        ring: ring as usize,
        nat_events,
        syslog,
    })
}
