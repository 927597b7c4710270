//! Differential: the router's burst path (`process_burst`, what the
//! workers run) against its per-packet path (`process`, the reference) on
//! the same burst of frames: the same verdict for every packet, the same
//! bytes out, the same events counted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::fwd::ForwardMode;
use pipeline::Verdict;

mod common;

use common::{frames, router};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let port = u16::from(first & 1);
    let input = frames(rest, 64);
    if input.is_empty() {
        return;
    }
    let (mut each, mut burst) = (router(), router());
    each.tick(1);
    burst.tick(1);
    let mut a = input.clone();
    let want: Vec<Verdict> = a.iter_mut().map(|f| each.process(f, port)).collect();
    let mut b = input;
    let mut got = vec![Verdict::Drop(pipeline::DropReason::Truncated); b.len()];
    if let Some(v) = burst.process_burst(&mut b, port, &mut got) {
        got.iter_mut().for_each(|g| *g = v);
    }
    assert_eq!(got, want, "verdicts");
    assert_eq!(b, a, "bytes");
    each.tick(2);
    burst.tick(2);
    assert_eq!(burst.events(), each.events(), "events");
});
