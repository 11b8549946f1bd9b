//! What a client connection opens with, and the time it has to open, on
//! the proxy's listener and the admin's alike.
//!
//! One port serves HTTP/1.1 and cleartext HTTP/2 with prior knowledge.
//! hyper-util's `auto` builder tells them apart by reading the first bytes
//! and replaying them to hyper through a rewinding reader; hyper's read
//! buffer then starts at those few bytes and, when the rest of the head
//! arrives, doubles from 8 KiB to 16 KiB, for the connection's life
//! (heaptrack, 1,000 slow streams: 16.4 MB of 41.6 MB). Here the first
//! bytes are *peeked*: nothing is consumed, and an HTTP/1 connection goes
//! to hyper's HTTP/1 server directly, whose first read takes the whole head
//! into one 8 KiB buffer; one that opens with HTTP/2's preface goes to
//! hyper's HTTP/2 server.
//!
//! Every connection has `header_read_timeout_ms` from its accept to say
//! which it is and what it asks, whatever it sends or does not send: an
//! HTTP/1 connection its first request head, an HTTP/2 one its preface and
//! the SETTINGS frame that must follow it (RFC 9113 §3.4). hyper times
//! neither the bytes before its own first read nor an HTTP/2 handshake, so
//! the peek waits until the opening is whole (a client that sends `P` and
//! stops is a byte of POST and of the preface alike) and [`headed_by`]
//! bounds the first head from the accept, not from hyper's first read.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::TcpStream;
use tokio::time::Instant;

/// HTTP/2's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame's header: length (3), type, flags, stream id (4).
const FRAME_HEAD: usize = 9;

/// The SETTINGS frame's type.
const SETTINGS: u8 = 0x4;

/// The largest frame a peer may send before SETTINGS are agreed
/// (`SETTINGS_MAX_FRAME_SIZE`'s initial value): a longer one is hyper's to
/// refuse, not the peek's to wait for.
const INITIAL_MAX_FRAME: usize = 16_384;

/// What a connection's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// Not HTTP/2's preface: an HTTP/1 request (or garbage hyper refuses).
    Http1,
    /// The whole preface and the frame after it (hyper judges that frame).
    Http2,
}

/// What the bytes seen so far decide.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Is(Opening),
    /// At least this many bytes are needed to decide.
    Needs(usize),
}

/// Waits, until `by`, for enough of a client's first bytes to tell its
/// protocol. `None`: it closed, failed, or had not said in time.
pub(crate) async fn opening(stream: &TcpStream, by: Instant) -> Option<Opening> {
    let mut seen = vec![0u8; PREFACE.len() + FRAME_HEAD];
    let mut have = 0;
    loop {
        let (n, closed) = tokio::time::timeout_at(by, peek_past(stream, &mut seen, have))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        have = n;
        match decide(seen.get(..n).unwrap_or_default()) {
            Decision::Is(opening) => return Some(opening),
            // Half a preface and then the end: hyper's HTTP/1 server reads
            // it and closes the connection.
            Decision::Needs(_) if closed => return Some(Opening::Http1),
            Decision::Needs(more) => seen.resize(more.max(seen.len()), 0),
        }
    }
}

/// The opening that `first` (a connection's first bytes) shows.
fn decide(first: &[u8]) -> Decision {
    let prefix = first.get(..PREFACE.len()).unwrap_or(first);
    if !PREFACE.starts_with(prefix) {
        return Decision::Is(Opening::Http1);
    }
    let Some(head) = first.get(PREFACE.len()..PREFACE.len() + FRAME_HEAD) else {
        return Decision::Needs(PREFACE.len() + FRAME_HEAD);
    };
    let length = match head {
        [a, b, c, kind, ..] if *kind == SETTINGS => {
            usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c)
        }
        // Not SETTINGS: a protocol error, which hyper's server answers.
        _ => return Decision::Is(Opening::Http2),
    };
    let whole = PREFACE.len() + FRAME_HEAD + length;
    if length > INITIAL_MAX_FRAME || first.len() >= whole {
        Decision::Is(Opening::Http2)
    } else {
        Decision::Needs(whole)
    }
}

/// Peeks into `buf` once more than `have` bytes are waiting (or the
/// buffer is full, or the peer closed): the count, and whether the peer
/// has closed its side.
#[cfg(unix)]
async fn peek_past(
    stream: &TcpStream,
    buf: &mut [u8],
    have: usize,
) -> std::io::Result<(usize, bool)> {
    use std::io::ErrorKind::WouldBlock;
    use tokio::io::Interest;
    loop {
        let ready = stream.ready(Interest::READABLE).await?;
        let closed = ready.is_read_closed();
        // Inside try_io, a peek that finds nothing new clears the readiness
        // it was polled under, so the next wait is for bytes not yet seen
        // (a peek alone leaves the socket readable, and would spin).
        let peeked = stream.try_io(Interest::READABLE, || {
            let n = peek(stream, buf)?;
            if n > have || n == 0 || n == buf.len() || closed {
                Ok(n)
            } else {
                Err(WouldBlock.into())
            }
        });
        match peeked {
            Ok(n) => return Ok((n, closed)),
            Err(err) if err.kind() == WouldBlock => continue,
            Err(err) => return Err(err),
        }
    }
}

/// The bytes waiting on `stream`, copied into `buf` and left there.
#[cfg(unix)]
fn peek(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `recv` writes at most `buf.len()` bytes into `buf`, a live
    // exclusive slice, from a socket the borrowed stream keeps open.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Elsewhere, tokio's own peek, again every few milliseconds until more
/// bytes are there (no readiness to clear without a peek of our own).
#[cfg(not(unix))]
async fn peek_past(
    stream: &TcpStream,
    buf: &mut [u8],
    have: usize,
) -> std::io::Result<(usize, bool)> {
    loop {
        let n = stream.peek(buf).await?;
        if n > have || n == 0 || n == buf.len() {
            return Ok((n, false));
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Resolves at `by` if no request head has arrived by then (`headed` is
/// set by the connection's service at its first request); never, once one
/// has. Raced against an HTTP/1 connection, it closes a client that is
/// slow to send its first head however it paces its bytes.
pub(crate) async fn headed_by(by: Instant, headed: &AtomicBool) {
    tokio::time::sleep_until(by).await;
    if headed.load(Ordering::Relaxed) {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(payload: &[u8]) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        let len = payload.len();
        bytes.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, SETTINGS, 0]);
        bytes.extend_from_slice(&[0, 0, 0, 0]);
        bytes.extend_from_slice(payload);
        bytes
    }

    #[test]
    fn one_byte_off_the_preface_is_http1() {
        for http1 in [
            &b"G"[..],
            b"POS",
            b"PUT",
            b"PAT",
            b"OPT",
            b"\x16\x03\x01",
            b"pri",
            b"PRI * HTTP/1.1",
        ] {
            assert_eq!(decide(http1), Decision::Is(Opening::Http1), "{http1:?}");
        }
    }

    #[test]
    fn the_preface_waits_for_its_settings_frame() {
        let whole = settings(&[0, 3, 0, 0, 0, 100]);
        for cut in [1, 2, 3, 16, 23, 24, 30] {
            assert_eq!(decide(&whole[..cut]), Decision::Needs(33), "{cut}");
        }
        assert_eq!(decide(&whole[..33]), Decision::Needs(39));
        assert_eq!(decide(&whole), Decision::Is(Opening::Http2));
        assert_eq!(decide(&settings(&[])), Decision::Is(Opening::Http2));
    }

    #[test]
    fn a_frame_hyper_refuses_is_handed_to_it() {
        let mut ping = settings(&[]);
        ping[PREFACE.len() + 3] = 0x6;
        assert_eq!(decide(&ping), Decision::Is(Opening::Http2));
        let mut huge = settings(&[]);
        huge[PREFACE.len()] = 0x01;
        assert_eq!(decide(&huge), Decision::Is(Opening::Http2));
    }
}
