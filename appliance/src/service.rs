//! The service manager's protocol (systemd `Type=notify`, through the
//! `sd-notify` crate): `READY=1` once every port is open and every worker
//! polls, `WATCHDOG=1` from the management thread only while every worker
//! makes progress (so a wedged worker, not just a dead process, gets the
//! service restarted), `STATUS=` a one-line summary, `STOPPING=1` when the
//! stop begins. Without `NOTIFY_SOCKET` it does nothing.

use sd_notify::NotifyState;
use std::time::{Duration, Instant};

/// What the management thread tells the service manager.
pub struct Notifier {
    /// Half the watchdog's interval (systemd's advice), if one is set.
    every: Option<Duration>,
    last_ping: Instant,
    /// Each worker's poll count at the last ping.
    polls: Vec<u64>,
}

impl Notifier {
    /// A notifier when a service manager listens (`NOTIFY_SOCKET`).
    pub fn from_env() -> Option<Notifier> {
        std::env::var_os("NOTIFY_SOCKET")?;
        let mut usec = 0;
        let every =
            sd_notify::watchdog_enabled(false, &mut usec).then(|| Duration::from_micros(usec) / 2);
        Some(Notifier {
            every,
            last_ping: Instant::now(),
            polls: Vec::new(),
        })
    }

    fn send(states: &[NotifyState<'_>]) {
        // A manager that went away is not the router's problem.
        let _ = sd_notify::notify(false, states);
    }

    /// Every port is open and every worker polls (`polls`: each one's
    /// poll count now).
    pub fn ready(&mut self, status: &str, polls: Vec<u64>) {
        self.polls = polls;
        self.last_ping = Instant::now();
        Self::send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// A management turn: when a ping is due, `WATCHDOG=1` if every worker
    /// polled since the last one; otherwise no ping (the manager restarts
    /// the service when its interval runs out) and the stalled workers
    /// named in `STATUS=`. `cores[i]`: worker `i`'s core.
    pub fn turn(&mut self, polls: &[u64], cores: &[usize], status: impl FnOnce() -> String) {
        let Some(every) = self.every else {
            return;
        };
        if self.last_ping.elapsed() < every {
            return;
        }
        let stalled: Vec<String> = stalled(polls, &self.polls, cores)
            .iter()
            .map(usize::to_string)
            .collect();
        self.last_ping = Instant::now();
        if stalled.is_empty() {
            self.polls = polls.to_vec();
            Self::send(&[NotifyState::Watchdog, NotifyState::Status(&status())]);
        } else {
            let s = format!(
                "worker(s) on core {} made no progress for {:.1} s: no watchdog ping",
                stalled.join(", "),
                every.as_secs_f64()
            );
            Self::send(&[NotifyState::Status(&s)]);
        }
    }

    /// The stop begins.
    pub fn stopping(&self) {
        Self::send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    }
}

/// The cores of the workers whose poll count did not move from `before`
/// to `now` (`cores[i]`: worker `i`'s).
fn stalled(now: &[u64], before: &[u64], cores: &[usize]) -> Vec<usize> {
    now.iter()
        .zip(before)
        .zip(cores)
        .filter(|((n, b), _)| n == b)
        .map(|(_, c)| *c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker whose poll count stands still is named; one that moved is
    /// not; a watchdog ping goes only when none stands still.
    #[test]
    fn a_worker_that_makes_no_progress_is_named() {
        let cores = [2, 3, 5];
        assert!(stalled(&[10, 20, 30], &[9, 19, 29], &cores).is_empty());
        assert_eq!(stalled(&[10, 19, 30], &[9, 19, 29], &cores), [3]);
        assert_eq!(stalled(&[9, 19, 29], &[9, 19, 29], &cores), [2, 3, 5]);
        // The notifier keeps the counts of its last ping: a stall stays a
        // stall until the worker moves again.
        let mut n = Notifier {
            every: Some(Duration::ZERO),
            last_ping: Instant::now(),
            polls: vec![9, 19, 29],
        };
        n.turn(&[10, 19, 30], &cores, String::new);
        assert_eq!(n.polls, [9, 19, 29], "no ping: the counts kept");
        n.turn(&[11, 20, 31], &cores, String::new);
        assert_eq!(n.polls, [11, 20, 31], "pinged: the counts taken");
    }
}
