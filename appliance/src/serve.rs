//! The bounded server under the metrics endpoint and the control socket.
//!
//! One thread and one `epoll` set (`mio`) hold the listener and every
//! connection: no thread per connection, and nothing a client does can
//! block the thread, grow it without bound or make it panic.
//!
//! - **Connections**: at most [`Limits::max_conns`]. One more evicts the
//!   connection that has been sending its request the longest (a slowloris
//!   holds its place only until a newer client comes); when every
//!   connection has a whole request in hand, the newcomer is told
//!   [`Protocol::busy`] and closed. A client that sends its request at once
//!   is therefore always served.
//! - **A request**: at most [`Limits::max_request`] bytes, all of it within
//!   [`Limits::read_within`] of the accept (a deadline per request, not per
//!   read: a byte every second does not keep it open).
//! - **An answer**: written without blocking, all of it within
//!   [`Limits::write_within`]; a client that never reads is closed, and the
//!   others are served meanwhile.
//! - **Descriptors**: when `accept` fails (out of descriptors, `EMFILE` or
//!   `ENFILE`), accepting pauses for [`ACCEPT_PAUSE`] and resumes; the
//!   listener's backlog waits. Never a panic.
//!
//! The protocol ([`Protocol`]: HTTP for `/metrics`, a JSON line for
//! `sluice ctl`) only says when a request is whole and what to answer, now
//! or later from the management thread (through a [`Reply`], which wakes
//! this thread).

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long accepting pauses after `accept` failed (out of descriptors).
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Connections accepted in one turn before the others are served again.
const ACCEPTS_PER_TURN: usize = 256;

/// The longest the thread sleeps before it looks at its stop flag.
const NAP: Duration = Duration::from_millis(100);

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX);

/// What a client may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub max_conns: usize,
    /// Bytes of one request.
    pub max_request: usize,
    /// From accept to the request's last byte.
    pub read_within: Duration,
    /// From the answer to its last byte written.
    pub write_within: Duration,
}

/// An answer's way back from the management thread: a channel, and a
/// wake-up for the server's poll. Sending never blocks.
pub struct Reply<T> {
    tx: Sender<T>,
    waker: Option<Arc<Waker>>,
}

impl<T> Clone for Reply<T> {
    fn clone(&self) -> Self {
        Reply {
            tx: self.tx.clone(),
            waker: self.waker.clone(),
        }
    }
}

impl<T> Reply<T> {
    /// A reply for a request the server holds (`waker` is its poll's).
    pub fn new(waker: &Arc<Waker>) -> (Reply<T>, Receiver<T>) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        (
            Reply {
                tx,
                waker: Some(waker.clone()),
            },
            rx,
        )
    }

    /// A reply read from its receiver directly (tests, callers outside a
    /// server).
    pub fn detached() -> (Reply<T>, Receiver<T>) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        (Reply { tx, waker: None }, rx)
    }

    /// Answers; false when the asker is gone (its connection closed, its
    /// deadline passed) or has its answer already.
    pub fn send(&self, answer: T) -> bool {
        let sent = self.tx.try_send(answer).is_ok();
        if let Some(w) = &self.waker {
            let _ = w.wake();
        }
        sent
    }
}

/// What a protocol makes of a request's bytes so far.
pub enum Parsed<A> {
    /// Not whole yet.
    More,
    /// Answer these bytes, then close.
    Now(Vec<u8>),
    /// The answer comes on `rx` within `within`; `late` is written if it
    /// does not.
    Later {
        /// Where the answer comes.
        rx: Receiver<A>,
        /// How long it may take.
        within: Duration,
        /// What to say if it does not come.
        late: Vec<u8>,
    },
}

/// The client of a Unix socket: `(pid, uid)` from `SO_PEERCRED`.
pub type Peer = Option<(i32, u32)>;

/// A request/answer protocol over one connection per request.
pub trait Protocol: Send + 'static {
    /// What the management thread answers with.
    type Answer: Send + 'static;
    /// Looks at the request's bytes so far (at most `max_request + 1` of
    /// them); `waker` makes [`Reply`]s.
    fn parse(&mut self, buf: &[u8], peer: Peer, waker: &Arc<Waker>) -> Parsed<Self::Answer>;
    /// The bytes of an answer.
    fn encode(&self, answer: Self::Answer) -> Vec<u8>;
    /// To a request longer than `max_request`.
    fn too_long(&self) -> Vec<u8>;
    /// To a request not whole within `read_within`.
    fn too_slow(&self) -> Vec<u8>;
    /// To a client turned away at the connection limit.
    fn busy(&self) -> Vec<u8>;
}

/// A listening socket the server takes.
pub enum Listener {
    /// The metrics endpoint.
    Tcp(std::net::TcpListener),
    /// The control socket.
    Unix(std::os::unix::net::UnixListener),
}

enum MioListener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }

    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }

    fn register(&mut self, r: &Registry, t: Token) -> io::Result<()> {
        let i = Interest::READABLE | Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => r.register(s, t, i),
            Stream::Unix(s) => r.register(s, t, i),
        }
    }

    fn close(mut self, r: &Registry) {
        let _ = match &mut self {
            Stream::Tcp(s) => r.deregister(s),
            Stream::Unix(s) => r.deregister(s),
        };
    }

    fn peer(&self) -> Peer {
        match self {
            Stream::Tcp(_) => None,
            Stream::Unix(s) => pmd::sys::peer_cred(s.as_raw_fd()),
        }
    }
}

enum State<A> {
    /// Taking the request in.
    Reading,
    /// Waiting for the management thread.
    Waiting { rx: Receiver<A>, late: Vec<u8> },
    /// Writing the answer (`at` bytes of it written).
    Writing { out: Vec<u8>, at: usize },
}

struct Conn<A> {
    stream: Stream,
    peer: Peer,
    /// When it was accepted (the eviction order).
    since: Instant,
    /// When its current state must be over.
    deadline: Instant,
    buf: Vec<u8>,
    state: State<A>,
}

/// Whether a connection goes on.
#[derive(PartialEq)]
enum Next {
    Open,
    Close,
}

impl<A> Conn<A> {
    fn write_out(&mut self, now: Instant, out: Vec<u8>, limits: &Limits) -> Next {
        self.state = State::Writing { out, at: 0 };
        self.deadline = now + limits.write_within;
        self.flush()
    }

    /// Writes what the socket takes; Close when all is written or it
    /// failed.
    fn flush(&mut self) -> Next {
        let State::Writing { out, at } = &mut self.state else {
            return Next::Open;
        };
        while *at < out.len() {
            match self.stream.write(&out[*at..]) {
                Ok(0) => return Next::Close,
                Ok(n) => *at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        Next::Close
    }

    /// Reads what has arrived and looks at it.
    fn take_in<P: Protocol<Answer = A>>(
        &mut self,
        now: Instant,
        proto: &mut P,
        limits: &Limits,
        waker: &Arc<Waker>,
    ) -> Next {
        let mut chunk = [0u8; 4096];
        loop {
            let room = (limits.max_request + 1).saturating_sub(self.buf.len());
            if room == 0 {
                break;
            }
            let want = room.min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    // The client stopped sending: what it sent is all.
                    if self.buf.is_empty() {
                        return Next::Close;
                    }
                    break;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        match proto.parse(&self.buf, self.peer, waker) {
            Parsed::More if self.buf.len() > limits.max_request => {
                self.write_out(now, proto.too_long(), limits)
            }
            Parsed::More => Next::Open,
            Parsed::Now(out) => self.write_out(now, out, limits),
            Parsed::Later { rx, within, late } => {
                self.state = State::Waiting { rx, late };
                self.deadline = now + within;
                Next::Open
            }
        }
    }

    /// An answer that came, or a deadline that passed.
    fn tick<P: Protocol<Answer = A>>(&mut self, now: Instant, proto: &P, limits: &Limits) -> Next {
        match &mut self.state {
            State::Waiting { rx, late } => match rx.try_recv() {
                Ok(a) => {
                    let out = proto.encode(a);
                    self.write_out(now, out, limits)
                }
                Err(TryRecvError::Empty) if now < self.deadline => Next::Open,
                Err(_) => {
                    let late = std::mem::take(late);
                    self.write_out(now, late, limits)
                }
            },
            State::Reading if now >= self.deadline => {
                // Said once, without waiting; then closed.
                let _ = self.stream.write(&proto.too_slow());
                Next::Close
            }
            State::Writing { .. } if now >= self.deadline => Next::Close,
            _ => Next::Open,
        }
    }
}

/// Serves `listener` with `proto` within `limits` until `stop` is set.
/// Fails only when the poll cannot be set up.
pub fn serve<P: Protocol>(
    listener: Listener,
    proto: P,
    limits: Limits,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let mut listener = match listener {
        Listener::Tcp(l) => {
            l.set_nonblocking(true)?;
            MioListener::Tcp(TcpListener::from_std(l))
        }
        Listener::Unix(l) => {
            l.set_nonblocking(true)?;
            MioListener::Unix(UnixListener::from_std(l))
        }
    };
    match &mut listener {
        MioListener::Tcp(l) => poll.registry().register(l, LISTENER, Interest::READABLE)?,
        MioListener::Unix(l) => poll.registry().register(l, LISTENER, Interest::READABLE)?,
    }
    let mut server = Server {
        proto,
        limits,
        conns: (0..limits.max_conns.max(1)).map(|_| None).collect(),
        accept_at: None,
    };
    let mut events = Events::with_capacity(256);
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let mut nap = NAP;
        for c in server.conns.iter().flatten() {
            nap = nap.min(c.deadline.saturating_duration_since(now));
        }
        if let Some(t) = server.accept_at {
            nap = nap.min(t.saturating_duration_since(now));
        }
        if let Err(e) = poll.poll(&mut events, Some(nap)) {
            if e.kind() != io::ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        let now = Instant::now();
        let mut accept = false;
        for ev in events.iter() {
            match ev.token() {
                LISTENER => accept = true,
                WAKER => {}
                Token(i) => server.ready(i, now, poll.registry(), &waker),
            }
        }
        if accept || server.accept_at.is_some_and(|t| now >= t) {
            server.accept(&listener, now, poll.registry(), &waker);
        }
        server.tick(Instant::now(), poll.registry());
    }
    Ok(())
}

struct Server<P: Protocol> {
    proto: P,
    limits: Limits,
    /// The connections, by token.
    conns: Vec<Option<Conn<P::Answer>>>,
    /// When to try `accept` again after it failed.
    accept_at: Option<Instant>,
}

impl<P: Protocol> Server<P> {
    fn close(&mut self, i: usize, r: &Registry) {
        if let Some(c) = self.conns.get_mut(i).and_then(Option::take) {
            c.stream.close(r);
        }
    }

    /// Connection `i` is readable or writable.
    fn ready(&mut self, i: usize, now: Instant, r: &Registry, waker: &Arc<Waker>) {
        let Some(Some(c)) = self.conns.get_mut(i) else {
            return;
        };
        let next = match c.state {
            State::Reading => c.take_in(now, &mut self.proto, &self.limits, waker),
            State::Writing { .. } => c.flush(),
            // What it sends meanwhile waits in the socket.
            State::Waiting { .. } => Next::Open,
        };
        if next == Next::Close {
            self.close(i, r);
        }
    }

    /// Answers that came and deadlines that passed.
    fn tick(&mut self, now: Instant, r: &Registry) {
        for i in 0..self.conns.len() {
            let Some(c) = self.conns[i].as_mut() else {
                continue;
            };
            if c.tick(now, &self.proto, &self.limits) == Next::Close {
                self.close(i, r);
            }
        }
    }

    /// Accepts what waits, within the connection limit.
    fn accept(&mut self, l: &MioListener, now: Instant, r: &Registry, waker: &Arc<Waker>) {
        self.accept_at = None;
        for _ in 0..ACCEPTS_PER_TURN {
            let got = match l {
                MioListener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
                MioListener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            };
            match got {
                Ok(s) => self.place(s, now, r, waker),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Out of descriptors (or memory): the backlog waits.
                    self.accept_at = Some(now + ACCEPT_PAUSE);
                    return;
                }
            }
        }
        // More waiting: after the others have had their turn.
        self.accept_at = Some(now);
    }

    /// Gives `s` a place: a free one, or the one of the connection that
    /// has been sending its request the longest; else turns it away.
    fn place(&mut self, mut s: Stream, now: Instant, r: &Registry, waker: &Arc<Waker>) {
        let free = self.conns.iter().position(Option::is_none);
        let slot = free.or_else(|| {
            let victim = self
                .conns
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
                .filter(|(_, c)| matches!(c.state, State::Reading))
                .min_by_key(|(_, c)| c.since)
                .map(|(i, _)| i)?;
            if let Some(c) = self.conns[victim].as_mut() {
                let _ = c.stream.write(&self.proto.busy());
            }
            self.close(victim, r);
            Some(victim)
        });
        let Some(i) = slot else {
            let _ = s.write(&self.proto.busy());
            return;
        };
        if s.register(r, Token(i)).is_err() {
            return;
        }
        let peer = s.peer();
        let mut c = Conn {
            stream: s,
            peer,
            since: now,
            deadline: now + self.limits.read_within,
            buf: Vec::new(),
            state: State::Reading,
        };
        // The request may be there already.
        let next = c.take_in(now, &mut self.proto, &self.limits, waker);
        if next == Next::Close {
            c.stream.close(r);
        } else {
            self.conns[i] = Some(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpStream as Tcp;

    /// A line protocol: "now X\n" answers X at once, "ask X\n" has the
    /// test's "management thread" answer X.
    struct Lines {
        asks: Sender<(String, Reply<String>)>,
    }

    impl Protocol for Lines {
        type Answer = String;
        fn parse(&mut self, buf: &[u8], _: Peer, waker: &Arc<Waker>) -> Parsed<String> {
            let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                return Parsed::More;
            };
            let line = String::from_utf8_lossy(&buf[..end]).to_string();
            if let Some(x) = line.strip_prefix("ask ") {
                let (reply, rx) = Reply::new(waker);
                let _ = self.asks.send((x.to_string(), reply));
                return Parsed::Later {
                    rx,
                    within: Duration::from_secs(2),
                    late: b"late\n".to_vec(),
                };
            }
            let said = line.strip_prefix("now ").unwrap_or(&line);
            Parsed::Now(format!("{said}\n").into_bytes())
        }
        fn encode(&self, a: String) -> Vec<u8> {
            a.into_bytes()
        }
        fn too_long(&self) -> Vec<u8> {
            b"too long\n".to_vec()
        }
        fn too_slow(&self) -> Vec<u8> {
            b"too slow\n".to_vec()
        }
        fn busy(&self) -> Vec<u8> {
            b"busy\n".to_vec()
        }
    }

    struct Running {
        addr: std::net::SocketAddr,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
        asks: Receiver<(String, Reply<String>)>,
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Release);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    fn start(limits: Limits) -> Running {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, asks) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            serve(Listener::Tcp(l), Lines { asks: tx }, limits, &s).unwrap();
        });
        Running {
            addr,
            stop,
            thread: Some(thread),
            asks,
        }
    }

    const LIMITS: Limits = Limits {
        max_conns: 8,
        max_request: 1024,
        read_within: Duration::from_secs(3),
        write_within: Duration::from_secs(3),
    };

    fn ask(addr: std::net::SocketAddr, line: &str) -> String {
        let mut c = Tcp::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(line.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = BufReader::new(c).read_line(&mut out);
        out
    }

    /// A connection limit's worth of clients that never finish their
    /// request do not keep a client that sends its request out: it takes
    /// the oldest one's place, which is told it was turned away.
    #[test]
    fn slow_senders_at_the_limit_give_way_to_a_whole_request() {
        let r = start(LIMITS);
        let mut slow: Vec<Tcp> = (0..LIMITS.max_conns)
            .map(|_| {
                let mut c = Tcp::connect(r.addr).unwrap();
                c.write_all(b"no end").unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        assert_eq!(ask(r.addr, "now hello\n"), "hello\n");
        assert!(t.elapsed() < LIMITS.read_within, "{:?}", t.elapsed());
        // The oldest was evicted and told so.
        slow[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut out = String::new();
        let _ = BufReader::new(&mut slow[0]).read_line(&mut out);
        assert_eq!(out, "busy\n");
    }

    /// A request that trickles in a byte at a time is closed at its
    /// deadline, however often it sends.
    #[test]
    fn the_deadline_is_per_request_not_per_read() {
        let r = start(Limits {
            read_within: Duration::from_millis(500),
            ..LIMITS
        });
        let mut c = Tcp::connect(r.addr).unwrap();
        let t = Instant::now();
        let mut closed = false;
        for _ in 0..40 {
            if c.write_all(b"x").is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut out = String::new();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = BufReader::new(&mut c).read_line(&mut out);
        assert!(closed || out == "too slow\n", "{out:?}");
        assert!(t.elapsed() < Duration::from_secs(4));
    }

    /// An endless request is cut at the limit: answered `too long` after
    /// at most `max_request + 1` bytes kept.
    #[test]
    fn an_endless_request_is_cut_at_the_limit() {
        let r = start(LIMITS);
        let mut c = Tcp::connect(r.addr).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let junk = vec![b'a'; 64 * 1024];
        let mut sent = 0;
        for _ in 0..64 {
            match c.write(&junk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(sent > LIMITS.max_request);
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        assert!(
            out.is_empty() || out == b"too long\n",
            "{:?}",
            String::from_utf8_lossy(&out)
        );
        // And the server still answers.
        assert_eq!(ask(r.addr, "now ok\n"), "ok\n");
    }

    /// A client that never reads a long answer does not hold up another
    /// client's; it is closed at the write deadline.
    #[test]
    fn a_client_that_never_reads_blocks_no_one() {
        let r = start(LIMITS);
        let asks = r.asks.clone();
        let answerer = std::thread::spawn(move || {
            for (what, reply) in asks.iter().take(2) {
                let n: usize = what.parse().unwrap_or(3);
                reply.send("y".repeat(n) + "\n");
            }
        });
        let mut stuck = Tcp::connect(r.addr).unwrap();
        stuck.write_all(b"ask 33554432\n").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        assert_eq!(ask(r.addr, "ask 3\n"), "yyy\n");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        answerer.join().unwrap();
    }

    /// An answer that does not come in time gets the `late` text.
    #[test]
    fn an_unanswered_request_is_told_so_at_its_deadline() {
        let r = start(LIMITS);
        let t = Instant::now();
        assert_eq!(ask(r.addr, "ask nobody\n"), "late\n");
        assert!(t.elapsed() >= Duration::from_secs(2));
        drop(r.asks.try_recv());
    }
}
