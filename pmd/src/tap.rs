//! Linux TAP interfaces: the kernel's side of a port (the control-plane
//! mirror, as VPP's linux-cp makes one per interface). A TAP made here has
//! the port's MAC and MTU and is up; frames written to it are received by
//! the kernel as if from the wire, frames the kernel sends on it are read
//! here. It lives as long as the [`Tap`] (the descriptor is its only
//! owner: closing it removes the interface).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One TAP interface.
pub struct Tap {
    fd: OwnedFd,
    name: String,
}

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const TUNSETIFF: libc::c_ulong = 0x400454ca;
/// `_IOW('T', 226, int)`: carrier on or off (Linux 5.0 and later).
const TUNSETCARRIER: libc::c_ulong = 0x400454e2;

/// `struct ifreq` with the name and one union member as bytes.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not an interface name"),
            ));
        }
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: [0; 24],
        };
        r.name[..name.len()].copy_from_slice(name.as_bytes());
        Ok(r)
    }
}

/// An ioctl on `fd` with `req`; the error names what failed.
fn ioctl(fd: RawFd, op: libc::c_ulong, req: &mut IfReq, what: &str) -> io::Result<()> {
    // SAFETY: `req` is a live, properly sized `struct ifreq` (name plus a
    // 24-byte union) that the kernel reads and writes within its size.
    let r = unsafe { libc::ioctl(fd, op as _, std::ptr::from_mut(req)) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

impl Tap {
    /// Creates TAP interface `name` with `mac` and `mtu`, up, non-blocking.
    pub fn create(name: &str, mac: [u8; 6], mtu: u16) -> io::Result<Tap> {
        let path: &CStr = c"/dev/net/tun";
        // SAFETY: a constant NUL-terminated path; the result is checked.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("/dev/net/tun: {e}")));
        }
        // SAFETY: `raw` is a descriptor just opened and owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq::new(name)?;
        req.data[..2].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
        ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req, "TUNSETIFF")?;
        // Address, MTU and flags go through any socket.
        // SAFETY: a plain socket call; the result is checked.
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `s` was just created and is owned here only.
        let sock = unsafe { OwnedFd::from_raw_fd(s) };
        let mut req = IfReq::new(name)?;
        req.data[..2].copy_from_slice(&(libc::ARPHRD_ETHER).to_ne_bytes());
        req.data[2..8].copy_from_slice(&mac);
        ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFHWADDR,
            &mut req,
            "setting the MAC",
        )?;
        let mut req = IfReq::new(name)?;
        req.data[..4].copy_from_slice(&i32::from(mtu).to_ne_bytes());
        ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFMTU,
            &mut req,
            "setting the MTU",
        )?;
        let mut req = IfReq::new(name)?;
        ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            &mut req,
            "reading the flags",
        )?;
        let flags = i16::from_ne_bytes([req.data[0], req.data[1]]) | libc::IFF_UP as i16;
        req.data[..2].copy_from_slice(&flags.to_ne_bytes());
        ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS,
            &mut req,
            "setting it up",
        )?;
        Ok(Tap {
            fd,
            name: name.to_string(),
        })
    }

    /// Sets the TAP's carrier: off, the kernel sees the link down (routes
    /// through it flushed, daemons told), as when the port's own link
    /// goes down.
    pub fn set_carrier(&self, on: bool) -> io::Result<()> {
        let v: libc::c_int = on.into();
        // SAFETY: TUNSETCARRIER reads one int through the pointer, which
        // points at a live local.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), TUNSETCARRIER as _, &v) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETCARRIER: {e}")));
        }
        Ok(())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The descriptor (readable when the kernel sent a frame).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads one frame the kernel sent into `buf`: its length, or `None`
    /// when there is none now.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: reading at most `buf.len()` bytes into `buf`, which we
        // hold exclusively.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(e);
        }
        Ok(Some(n as usize))
    }

    /// Hands `frame` to the kernel, as received on the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: writing `frame.len()` bytes from `frame`.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Waits on several TAPs at once.
pub struct Poller {
    fds: Vec<libc::pollfd>,
}

impl Poller {
    /// A poller over `taps` (in that order).
    pub fn new(taps: &[&Tap]) -> Poller {
        Poller {
            fds: taps
                .iter()
                .map(|t| libc::pollfd {
                    fd: t.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }

    /// Also waits on `fd` (a doorbell): `ready(n)` for it, `n` being the
    /// number of TAPs.
    pub fn also(mut self, fd: RawFd) -> Poller {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        self
    }

    /// Waits up to `timeout` for one to be readable; true when one is
    /// (then [`Poller::ready`] says which).
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        crate::sys::poll_readable(&mut self.fds, timeout)
    }

    /// Whether the `i`th TAP was readable at the last wait.
    pub fn ready(&self, i: usize) -> bool {
        self.fds.get(i).is_some_and(|f| f.revents != 0)
    }
}
