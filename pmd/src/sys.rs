//! The small set of OS and CPU primitives Sluice needs that the standard
//! library does not offer: the TSC, eventfds, per-thread CPU time and timer
//! slack. Every `unsafe` block here is a plain FFI call with a `// SAFETY:`
//! note; the rest of the workspace uses these safe wrappers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Reads the time-stamp counter. Constant and invariant on the machines we
/// run on (`constant_tsc`); one read costs about 20 cycles.
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64; it only reads a counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// TSC frequency, measured once against the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Tsc {
    /// Cycles per second.
    pub hz: u64,
}

impl Tsc {
    /// Calibrates over `window` (50 ms gives about 0.01 % accuracy).
    pub fn calibrate(window: Duration) -> Tsc {
        let t0 = Instant::now();
        let c0 = rdtsc();
        std::thread::sleep(window);
        let c1 = rdtsc();
        let dt = t0.elapsed();
        let hz = ((c1 - c0) as f64 / dt.as_secs_f64()) as u64;
        Tsc { hz: hz.max(1) }
    }

    /// Cycles in a duration.
    pub fn cycles(&self, d: Duration) -> u64 {
        (d.as_nanos() * self.hz as u128 / 1_000_000_000) as u64
    }

    /// Nanoseconds in a number of cycles.
    pub fn ns(&self, cycles: u64) -> f64 {
        cycles as f64 * 1e9 / self.hz as f64
    }
}

/// An eventfd: the interrupt line of a software queue.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd with counter 0.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own exclusively.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter, waking any poller ("raise the interrupt").
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own fd. A full
        // counter (EAGAIN) means a wake-up is already pending, which is fine.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Reads and clears the counter; returns how many signals were pending.
    pub fn clear(&self) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own fd; EAGAIN
        // (nothing pending) leaves v at 0.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            v
        } else {
            0
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Waits until `fd` is readable or `timeout` passes (`None`: forever).
/// Returns true when readable.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: one valid pollfd, count 1.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// Waits until one of `fds` is readable or `timeout` passes; their
/// `revents` say which. True when one is.
pub fn poll_readable(fds: &mut [libc::pollfd], timeout: Duration) -> bool {
    for f in fds.iter_mut() {
        f.revents = 0;
    }
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid slice of pollfds, its length the count.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    n > 0
}

/// Sets socket `fd`'s receive buffer to `bytes`, above
/// `net.core.rmem_max` too (`SO_RCVBUFFORCE`, which needs CAP_NET_ADMIN;
/// without it `SO_RCVBUF`, which the kernel caps at `rmem_max`). Returns
/// the size the kernel then reports (twice what it accounts for data).
pub fn set_rcvbuf(fd: RawFd, bytes: usize) -> io::Result<usize> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a live int and its size, for the caller's socket.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                std::ptr::from_ref(&v).cast(),
                len,
            )
        };
        if r == 0 {
            let mut got: libc::c_int = 0;
            let mut l = len;
            // SAFETY: room for one int, its size passed.
            unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    std::ptr::from_mut(&mut got).cast(),
                    &mut l,
                )
            };
            return Ok(got.max(0) as usize);
        }
    }
    Err(io::Error::last_os_error())
}

/// Opens `path` for reading, only if it is a regular file: the open does
/// not block (`O_NONBLOCK`: a FIFO put at the path, even after a check,
/// is opened at once and then refused, not waited on), and the check is
/// made on the open file, so what is read is what was checked. The error
/// for anything else (a FIFO, a device, a directory) is `InvalidInput`.
pub fn open_regular(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let m = f.metadata()?;
    if m.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a directory, not a file",
        ));
    }
    if !m.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a device or a pipe)",
        ));
    }
    Ok(f)
}

/// The effective user ID of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

/// Raises this process's soft limit of open files to its hard limit (as
/// servers do: systemd's default soft limit is 1,024, its hard limit far
/// higher); returns the soft limit now in force.
pub fn raise_nofile() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a pointer to a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return 0;
    }
    if l.rlim_cur < l.rlim_max {
        let want = libc::rlimit {
            rlim_cur: l.rlim_max,
            rlim_max: l.rlim_max,
        };
        // SAFETY: a pointer to a live rlimit; raising the soft limit up
        // to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return want.rlim_cur;
        }
    }
    l.rlim_cur
}

/// The process and user at the other end of connected Unix socket `fd`
/// (`SO_PEERCRED`: as they were when it connected), or `None`.
pub fn peer_cred(fd: RawFd) -> Option<(i32, u32)> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut l = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: room for one `ucred`, its size passed.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::from_mut(&mut c).cast(),
            &mut l,
        )
    };
    (r == 0 && l as usize == std::mem::size_of::<libc::ucred>()).then_some((c.pid, c.uid))
}

/// An epoll set: a worker blocks on the interrupt lines of all its queues
/// at once (NAPI's wait).
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// An empty set that reports up to `max_events` ready descriptors per
    /// wait (allocates once, here).
    pub fn new(max_events: usize) -> io::Result<Self> {
        // SAFETY: epoll_create1 takes only flags; a negative return is an error.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: fd is a fresh descriptor we own exclusively.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; max_events.max(1)],
        })
    }

    /// Watches `fd` for readability, reporting `token` when it is.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: valid epoll fd, a descriptor the caller keeps open while it
        // is in the set, and a pointer to a live epoll_event.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Blocks until a watched descriptor is readable or `timeout_ms` passes
    /// (-1: forever); returns the tokens of the ready ones.
    pub fn wait(&mut self, timeout_ms: i32) -> impl Iterator<Item = u64> + '_ {
        // SAFETY: the events buffer is live and its length is passed as the
        // maximum; the kernel writes at most that many entries.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                timeout_ms,
            )
        };
        let n = n.max(0) as usize;
        self.events[..n].iter().map(|e| e.u64)
    }
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sets the calling thread's timer slack, so that short sleeps end when asked
/// instead of up to 50 µs late (the Linux default).
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// Whether a hugetlbfs is mounted.
pub fn hugetlbfs_mounted() -> bool {
    std::fs::read_to_string("/proc/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.contains("hugetlbfs")))
}

/// Free 2 MiB huge pages (`HugePages_Free` in /proc/meminfo) when a
/// hugetlbfs is mounted, else 0: what DPDK's EAL can use.
pub fn free_hugepages() -> u64 {
    let mounted = hugetlbfs_mounted();
    let free = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("HugePages_Free:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
    });
    if mounted {
        free.unwrap_or(0)
    } else {
        0
    }
}

/// Asks the kernel to back `mem` with transparent huge pages (fewer TLB
/// misses on buffer pools); harmless where THP is off.
pub fn advise_hugepages(mem: &mut [u8]) {
    // Miri (which checks the buffer code in CI) has no madvise; the advice
    // never changes what the memory holds.
    if cfg!(miri) {
        return;
    }
    // SAFETY: madvise on a range we own and hold exclusively; MADV_HUGEPAGE
    // changes only how the kernel backs it, never its contents.
    unsafe { libc::madvise(mem.as_mut_ptr().cast(), mem.len(), libc::MADV_HUGEPAGE) };
}

/// The transparent huge page mode (`always`, `madvise` or `never`, from
/// /sys/kernel/mm/transparent_hugepage/enabled), if the kernel has THP.
pub fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let a = s.find('[')?;
    let b = s[a..].find(']')?;
    Some(s[a + 1..a + b].to_string())
}

/// Bytes of this process's memory on transparent huge pages
/// (`AnonHugePages` of /proc/self/smaps_rollup): whether the large tables
/// [`crate::alloc::HugeAlloc`] advised got them, or fell back to 4 KiB
/// pages (no free 2 MiB blocks, THP `never`).
pub fn anon_huge_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let l = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    Some(l.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Starts loading the cache line at `p` (a hint: any address is fine,
/// nothing is read architecturally and nothing faults).
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint that never faults or reads memory
    // architecturally, whatever the address; SSE is baseline on x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Spin-loop hint (PAUSE on x86).
#[inline(always)]
pub fn cpu_relax() {
    std::hint::spin_loop();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The THP mode and the huge-page share read back (where the kernel
    /// has them, as every Linux here does).
    #[test]
    fn huge_page_reports() {
        if let Some(m) = thp_mode() {
            assert!(["always", "madvise", "never"].contains(&m.as_str()), "{m}");
        }
        if std::path::Path::new("/proc/self/smaps_rollup").exists() {
            assert!(anon_huge_bytes().is_some());
        }
    }

    #[test]
    fn eventfd_signal_and_clear() {
        let e = EventFd::new().unwrap();
        assert!(!wait_readable(e.as_raw_fd(), Some(Duration::ZERO)));
        e.signal();
        e.signal();
        assert!(wait_readable(e.as_raw_fd(), Some(Duration::ZERO)));
        assert_eq!(e.clear(), 2);
        assert_eq!(e.clear(), 0);
    }

    /// A FIFO (with no writer, where a plain open blocks for good) is
    /// refused at once; a regular file opens.
    #[test]
    fn open_regular_refuses_a_fifo_without_blocking() {
        let dir = std::env::temp_dir().join(format!("pmd-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert_eq!(
            open_regular(std::path::Path::new("/dev/null"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
        std::fs::write(dir.join("f"), "x").unwrap();
        assert!(open_regular(&dir.join("f")).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn epoll_reports_ready_tokens() {
        let a = EventFd::new().unwrap();
        let b = EventFd::new().unwrap();
        let mut ep = Epoll::new(4).unwrap();
        ep.add(a.as_raw_fd(), 10).unwrap();
        ep.add(b.as_raw_fd(), 20).unwrap();
        assert_eq!(ep.wait(0).count(), 0);
        b.signal();
        assert_eq!(ep.wait(1000).collect::<Vec<_>>(), vec![20]);
        b.clear();
        assert_eq!(ep.wait(0).count(), 0);
    }

    #[test]
    fn tsc_is_monotonic_and_calibrates() {
        let a = rdtsc();
        let t = Tsc::calibrate(Duration::from_millis(20));
        assert!(rdtsc() > a);
        assert!(t.hz > 100_000_000, "TSC below 100 MHz: {}", t.hz);
        // The calibrated rate measures time as the OS clock does: over an
        // interval timed by both, they agree within 5% (both are wall
        // clocks, so a busy machine delays both alike).
        let (c0, i0) = (rdtsc(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (c1, wall) = (rdtsc(), i0.elapsed().as_nanos() as f64);
        let tsc_ns = t.ns(c1 - c0);
        assert!(
            (tsc_ns / wall - 1.0).abs() < 0.05,
            "TSC says {tsc_ns} ns, the OS clock {wall} ns"
        );
    }

    #[test]
    fn thread_cpu_time_advances() {
        let a = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > a);
    }
}
