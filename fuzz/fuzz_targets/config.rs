//! The config loader on arbitrary text: it never panics, and a config it
//! accepts keeps the ranges the rest of the appliance relies on.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Host checks off: the fuzzer's machine has other interfaces.
    if let Ok(c) = appliance::config::parse_with(text, "fuzz.toml", None, false) {
        assert!(!c.ports.is_empty() && !c.workers.is_empty());
        assert!((1..=pmd::MAX_BURST).contains(&c.run.burst));
        for p in &c.ports {
            assert!((1..=64).contains(&p.rxq) && (1..=64).contains(&p.txq));
            assert!(usize::from(p.peer) < c.ports.len());
        }
        for w in &c.workers {
            for &(p, q) in w.rx.iter().chain(&w.tx) {
                assert!(q < c.ports[usize::from(p)].rxq.max(c.ports[usize::from(p)].txq));
            }
        }
    }
});
