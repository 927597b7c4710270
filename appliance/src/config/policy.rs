//! `[worker.poll]` checks: the poll-mode policy and the knobs each mode
//! takes.

use super::*;

pub(super) fn check_poll(cx: &mut Ctx<'_>, wi: usize, p: &RawPoll) -> Policy {
    use PollKind::*;
    let kind = *p.mode.get_ref();
    let k = |f: &str| format!("worker[{wi}].poll.{f}");
    // Which knobs each mode takes.
    let knobs: [(&str, bool, &[PollKind]); 20] = [
        ("predict", p.predict.is_some(), &[Adaptive]),
        ("budget", p.budget.is_some(), &[Interrupt, Adaptive, Auto]),
        (
            "fallback_sleep_us",
            p.fallback_sleep_us.is_some(),
            &[Interrupt, Adaptive, Auto],
        ),
        (
            "busy_poll_us",
            p.busy_poll_us.is_some(),
            &[Interrupt, Adaptive, Auto],
        ),
        ("spin_polls", p.spin_polls.is_some(), &[Adaptive]),
        ("pause_polls", p.pause_polls.is_some(), &[Adaptive]),
        ("pause_spins", p.pause_spins.is_some(), &[Adaptive]),
        ("sleep_polls", p.sleep_polls.is_some(), &[Adaptive]),
        ("sleep_min_us", p.sleep_min_us.is_some(), &[Adaptive]),
        ("sleep_max_us", p.sleep_max_us.is_some(), &[Adaptive]),
        ("hz", p.hz.is_some(), &[Timer]),
        ("burst", p.burst.is_some(), &[Timer]),
        ("each_burst", p.each_burst.is_some(), &[Timer]),
        ("burst_max", p.burst_max.is_some(), &[Timer]),
        ("user_frac", p.user_frac.is_some(), &[Timer]),
        ("idle_poll", p.idle_poll.is_some(), &[Timer]),
        ("up_pps", p.up_pps.is_some(), &[Auto]),
        ("down_pps", p.down_pps.is_some(), &[Auto]),
        ("window_ms", p.window_ms.is_some(), &[Auto]),
        ("hold", p.hold.is_some(), &[Auto]),
    ];
    for (name, set, modes) in knobs {
        if set && !modes.contains(&kind) {
            let modes: Vec<&str> = modes.iter().map(|m| poll_name(*m)).collect();
            cx.err(
                &p.mode,
                k(name),
                format!(
                    "`{name}` applies to poll mode {}, not `{}`",
                    modes.join("/"),
                    poll_name(kind)
                ),
            );
        }
    }
    let mut napi = poll::Napi::default();
    if let Some(v) = &p.budget {
        if !(1..=65536).contains(v.get_ref()) {
            cx.err(v, k("budget"), "must be 1..=65536 packets");
        }
        napi.budget = *v.get_ref();
    }
    if let Some(v) = &p.fallback_sleep_us {
        if !(1..=1_000_000).contains(v.get_ref()) {
            cx.err(v, k("fallback_sleep_us"), "must be 1..=1000000 µs");
        }
        napi.fallback_sleep = Duration::from_micros(*v.get_ref());
    }
    if let Some(v) = &p.busy_poll_us {
        if *v.get_ref() > 1_000_000 {
            cx.err(v, k("busy_poll_us"), "must be 0..=1000000 µs");
        }
        napi.busy_poll = Duration::from_micros(*v.get_ref());
    }
    match kind {
        Busy => Policy::Busy,
        Interrupt => Policy::Interrupt(napi),
        Adaptive => {
            let mut a = poll::Adaptive {
                napi,
                ..poll::Adaptive::default()
            };
            for (v, slot) in [
                (&p.spin_polls, &mut a.spin_polls),
                (&p.pause_polls, &mut a.pause_polls),
                (&p.pause_spins, &mut a.pause_spins),
                (&p.sleep_polls, &mut a.sleep_polls),
            ] {
                if let Some(v) = v {
                    *slot = *v.get_ref();
                }
            }
            if let Some(v) = &p.sleep_min_us {
                a.sleep_min = Duration::from_micros(*v.get_ref());
            }
            if let Some(v) = &p.sleep_max_us {
                a.sleep_max = Duration::from_micros(*v.get_ref());
            }
            if let Some(v) = &p.predict {
                if !(v.get_ref().is_finite() && *v.get_ref() >= 0.0) {
                    cx.err(
                        v,
                        k("predict"),
                        "must be a factor >= 0 (0 disables prediction)",
                    );
                }
                a.predict = *v.get_ref();
            }
            if a.sleep_max < a.sleep_min || a.sleep_max > Duration::from_secs(1) {
                let at = p.sleep_max_us.as_ref().map_or(p.mode.span(), |v| v.span());
                cx.err(
                    &Spanned::new(at, ()),
                    k("sleep_max_us"),
                    "must be at least sleep_min_us and at most 1000000",
                );
            }
            Policy::Adaptive(a)
        }
        Timer => {
            let mut t = poll::Timer::default();
            if let Some(v) = &p.hz {
                if !(1..=100_000).contains(v.get_ref()) {
                    cx.err(v, k("hz"), "must be 1..=100000");
                }
                t.hz = *v.get_ref();
            }
            if let Some(v) = &p.each_burst {
                if !(1..=pmd::MAX_BURST as u32).contains(v.get_ref()) {
                    cx.err(
                        v,
                        k("each_burst"),
                        format!("must be 1..={}", pmd::MAX_BURST),
                    );
                }
                t.each_burst = *v.get_ref();
            }
            if let Some(v) = &p.burst_max {
                if *v.get_ref() == 0 {
                    cx.err(v, k("burst_max"), "must be at least 1");
                }
                t.burst_max = *v.get_ref();
            }
            if let Some(v) = &p.burst {
                if *v.get_ref() == 0 || *v.get_ref() > t.burst_max {
                    cx.err(v, k("burst"), "must be 1..=burst_max");
                }
                t.burst = *v.get_ref();
            }
            if let Some(v) = &p.user_frac {
                if *v.get_ref() > 99 {
                    cx.err(v, k("user_frac"), "must be a percentage 0..=99");
                }
                t.user_frac = *v.get_ref();
            }
            if let Some(v) = &p.idle_poll {
                t.idle_poll = *v.get_ref();
            }
            Policy::Timer(t)
        }
        Auto => {
            let mut a = poll::Auto {
                napi,
                ..poll::Auto::default()
            };
            if let Some(v) = &p.up_pps {
                a.up_pps = *v.get_ref();
            }
            if let Some(v) = &p.down_pps {
                a.down_pps = *v.get_ref();
            }
            if !(a.down_pps >= 0.0 && a.down_pps < a.up_pps) {
                let at = p
                    .down_pps
                    .as_ref()
                    .or(p.up_pps.as_ref())
                    .map_or(p.mode.span(), |v| v.span());
                cx.err(
                    &Spanned::new(at, ()),
                    k("down_pps"),
                    "must be below up_pps (hysteresis)",
                );
            }
            if let Some(v) = &p.window_ms {
                if !(1..=10_000).contains(v.get_ref()) {
                    cx.err(v, k("window_ms"), "must be 1..=10000");
                }
                a.window = Duration::from_millis(*v.get_ref());
            }
            if let Some(v) = &p.hold {
                if *v.get_ref() == 0 {
                    cx.err(v, k("hold"), "must be at least 1");
                }
                a.hold = *v.get_ref();
            }
            Policy::Auto(a)
        }
    }
}

pub(super) fn poll_name(k: PollKind) -> &'static str {
    match k {
        PollKind::Busy => "busy",
        PollKind::Interrupt => "interrupt",
        PollKind::Adaptive => "adaptive",
        PollKind::Timer => "timer",
        PollKind::Auto => "auto",
    }
}

/// A poll policy as `sluice ctl set poll` gives it: a mode and `KEY=VALUE`
/// knobs, the keys and values of a `[worker.poll]` table (for the worker
/// `wi`, named in errors), checked as the config file's are. An error says
/// what is wrong with which knob.
pub fn parse_poll(wi: usize, mode: &str, knobs: &[&str]) -> Result<Policy, String> {
    let mut text = String::new();
    text.push_str(&format!(
        "mode = {}\n",
        toml::Value::String(mode.to_string())
    ));
    for kv in knobs {
        let Some((key, value)) = kv.split_once('=') else {
            return Err(format!("`{kv}`: a knob is KEY=VALUE (busy_poll_us=50)"));
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return Err(format!("`{key}` is not a poll knob"));
        }
        // A number or a boolean, as the config file writes them.
        let value: toml::Value = value
            .parse::<i64>()
            .map(toml::Value::Integer)
            .or_else(|_| value.parse::<f64>().map(toml::Value::Float))
            .or_else(|_| value.parse::<bool>().map(toml::Value::Boolean))
            .map_err(|_| format!("`{kv}`: the value is a number or true/false"))?;
        text.push_str(&format!("{key} = {value}\n"));
    }
    let raw: RawPoll = toml::from_str(&text).map_err(|e| e.message().trim().to_string())?;
    let mut cx = Ctx::new("set poll", &text);
    let p = check_poll(&mut cx, wi, &raw);
    match cx.errs.first() {
        Some(e) => Err(format!("{}: {}", e.key, e.msg)),
        None => Ok(p),
    }
}
