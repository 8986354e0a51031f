//! A bound on each listener's established connections (safety review 161302a, finding 3).
//!
//! Every connection holds a file descriptor (a lane two), and a node out of descriptors fails
//! where it cannot afford to: opening a log segment or the state file. So each listener (the
//! client and peer planes, the HTTP API, the metrics endpoint) holds at most its share of the
//! open-files limit, with room kept for the data dir, the peers' channels and the rest. At the
//! bound the listener stops accepting: new connections wait in the kernel's backlog, costing
//! the node nothing, and are taken as places free up. A connection holds its place for as
//! long as it lives: [`Counted`] gives it back when dropped.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::{
    FDS_KEPT, GREETING_BYTES, HANDSHAKE_TIMEOUT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL,
    KEEPALIVE_PROBES, LISTENERS, MAX_CONNECTIONS,
};

/// One listener's bound, shared by its accept loop and the connections it accepted.
#[derive(Clone)]
pub(crate) struct Connections {
    places: Arc<Semaphore>,
    limit: usize,
    plane: &'static str,
    /// Whether the listener waits at its bound: logged once each time it gets there.
    at_bound: Arc<std::sync::atomic::AtomicBool>,
}

impl Connections {
    /// At most `limit` connections at once on the `plane` listener.
    pub fn new(plane: &'static str, limit: usize) -> Self {
        Connections {
            places: Arc::new(Semaphore::new(limit)),
            limit,
            plane,
            at_bound: Arc::default(),
        }
    }

    /// The listener's name in the log: `client`, `peer`, `http`, `metrics`.
    pub fn plane(&self) -> &'static str {
        self.plane
    }

    /// The next connection on `listener`, once a place is free, with TCP keepalive and no
    /// Nagle delay. A failed accept (out of descriptors after all, say) is logged and tried
    /// again shortly: never fatal.
    pub async fn accept(
        &self,
        listener: &TcpListener,
        keepalive: KeepAlive,
    ) -> (Counted<TcpStream>, SocketAddr) {
        use std::sync::atomic::Ordering::Relaxed;
        let place = match self.places.clone().try_acquire_owned() {
            Ok(place) => {
                self.at_bound.store(false, Relaxed);
                place
            }
            Err(_) => {
                if !self.at_bound.swap(true, Relaxed) {
                    tracing::warn!(
                        plane = self.plane,
                        limit = self.limit,
                        "connections at their bound; new ones wait until some close"
                    );
                }
                let waited = self.places.clone().acquire_owned().await;
                waited.expect("the semaphore is never closed")
            }
        };
        loop {
            match listener.accept().await {
                Ok((tcp, from)) => {
                    let _ = tcp.set_nodelay(true);
                    let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive.to_socket2());
                    let counted = Counted {
                        io: tcp,
                        _place: place,
                    };
                    return (counted, from);
                }
                Err(e) => {
                    tracing::warn!(plane = self.plane, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// TCP keepalive for accepted connections, so that the connections of peers and clients that
/// died without closing them are found and dropped instead of piling up. (Not HTTP/2 pings:
/// those cost the peer plane 12 to 20 % of its throughput here.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeepAlive {
    /// Silence before the first probe.
    pub idle: Duration,
    /// Between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub retries: u32,
}

/// TCP keepalive on both planes' connections and on the peer lanes a node dials, from the limits.
pub(crate) const KEEPALIVE: KeepAlive = KeepAlive {
    idle: KEEPALIVE_IDLE,
    interval: KEEPALIVE_INTERVAL,
    retries: KEEPALIVE_PROBES,
};

impl KeepAlive {
    pub(crate) fn to_socket2(self) -> socket2::TcpKeepalive {
        socket2::TcpKeepalive::new()
            .with_time(self.idle)
            .with_interval(self.interval)
            .with_retries(self.retries)
    }
}

/// A plain listener under its bound, as axum serves it (the metrics endpoint).
pub(crate) struct Bounded {
    pub listener: TcpListener,
    pub connections: Connections,
    pub keepalive: KeepAlive,
}

impl axum::serve::Listener for Bounded {
    type Io = Counted<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Counted<TcpStream>, SocketAddr) {
        self.connections
            .accept(&self.listener, self.keepalive)
            .await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Each listener's bound under `open_files`, the process's limit on descriptors: what is left
/// after [`FDS_KEPT`] (or a quarter, if more), shared by the [`LISTENERS`], two descriptors a
/// connection (a lane dups its socket); at most [`MAX_CONNECTIONS`], at least 16.
pub(crate) fn bound(open_files: u64) -> usize {
    let kept = FDS_KEPT.max(open_files / 4);
    let share = open_files.saturating_sub(kept) / (LISTENERS * 2);
    (share as usize).clamp(16, MAX_CONNECTIONS)
}

/// Each listener's bound in this process: [`bound`] of its open-files limit, read once.
pub(crate) fn listener_bound() -> usize {
    static BOUND: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BOUND.get_or_init(|| bound(open_files_limit()))
}

/// This process's limit on open descriptors (its soft limit), as `serve` raised it.
fn open_files_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// A connection that holds its listener's place until it is dropped.
pub(crate) struct Counted<T> {
    io: T,
    _place: OwnedSemaphorePermit,
}

impl<T> Counted<T> {
    /// The connection and its place, to be held apart (a lane's task holds the place while
    /// it serves the socket).
    pub fn into_parts(self) -> (T, OwnedSemaphorePermit) {
        (self.io, self._place)
    }

    /// `io` holding `place` again.
    pub fn holding(io: T, place: OwnedSemaphorePermit) -> Self {
        Counted { io, _place: place }
    }
}

impl<T> std::ops::Deref for Counted<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.io
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

/// `AsyncWrite` for a wrapper of a connection in its field `io`, passed through: the wrappers
/// here watch or count reads and places, never writes.
macro_rules! writes_pass_through {
    ($wrapper:ident) => {
        impl<T: AsyncWrite + Unpin> AsyncWrite for $wrapper<T> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.get_mut().io).poll_flush(cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
            }
        }
    };
}

writes_pass_through!(Counted);

impl tonic::transport::server::Connected for Counted<TcpStream> {
    type ConnectInfo = <TcpStream as tonic::transport::server::Connected>::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// A connection that must send its first [`GREETING_BYTES`] within [`HANDSHAKE_TIMEOUT`] of
/// being handed to its server, or be closed: a client that connects (or finishes a TLS
/// handshake) and then says nothing, or one byte, would otherwise hold its place under the
/// listener's bound for as long as it likes, since nothing in tonic times out an HTTP/2
/// connection before its preface. (Once greeted, a gRPC connection is kept honest by HTTP/2
/// pings: one whose peer stops answering them is closed.)
pub(crate) struct Greeted<T> {
    io: T,
    /// Bytes still to come before the connection counts as greeted.
    want: usize,
    /// Until then, when it is closed.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Greeted<T> {
    pub fn new(io: T) -> Self {
        Greeted {
            io,
            want: GREETING_BYTES,
            deadline: Some(Box::pin(tokio::time::sleep(HANDSHAKE_TIMEOUT))),
        }
    }
}

impl<T> std::ops::Deref for Greeted<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.io
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Greeted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let Some(deadline) = this.deadline.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) => {
                this.want = this.want.saturating_sub(buf.filled().len() - before);
                if this.want == 0 {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no request within {} s of connecting",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                )))
            }
            other => other,
        }
    }
}

writes_pass_through!(Greeted);

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for Greeted<T> {
    type ConnectInfo = T::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_listener_takes_its_share_of_the_open_files_limit_with_room_kept() {
        // Under systemd's 524,288: the ceiling.
        assert_eq!(bound(524_288), MAX_CONNECTIONS);
        // 65,536: three quarters of it, shared by four listeners, two descriptors each.
        assert_eq!(bound(65_536), 6_144);
        // Linux's default soft limit: 256 kept.
        assert_eq!(bound(1_024), 96);
        assert_eq!(bound(64), 16);
        for limit in [1_024, 4_096, 65_536, 1 << 20] {
            let held = bound(limit) as u64 * LISTENERS * 2;
            assert!(held + limit / 4 <= limit, "{limit}: {held} held");
        }
    }

    #[tokio::test]
    async fn past_its_bound_a_listener_takes_no_connection_until_one_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Connections::new("test", 2);
        let keepalive = KEEPALIVE;
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        let first = connections.accept(&listener, keepalive).await;
        let _second = connections.accept(&listener, keepalive).await;
        let third = tokio::time::timeout(
            Duration::from_millis(200),
            connections.accept(&listener, keepalive),
        );
        assert!(third.await.is_err(), "a third connection was taken past 2");
        drop(first);
        let third = tokio::time::timeout(
            Duration::from_secs(5),
            connections.accept(&listener, keepalive),
        );
        assert!(third.await.is_ok(), "the place given back was not taken");
    }
}
