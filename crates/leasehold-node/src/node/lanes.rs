//! Lanes beside gRPC on a node's ports: the peer port's (see `raft::lane`) and the client
//! port's (see `client_lanes`). The accept loop tells a lane from a gRPC connection (by its
//! greeting without TLS, by its ALPN protocol with it), hands gRPC ones on to tonic, and serves
//! each lane in a task of its own, one request at a time: a peer lane's by the Raft service's
//! handler a gRPC call reaches, a client lane's by the typed API as a call on a `Batch` stream
//! is; behind the same checks either way. A peer lane under TLS passes the peer gate before
//! anything of it is read.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use super::peer::gate::PeerGate;
use super::peer::raft_service::RaftService;
use crate::connections::KeepAlive;
use crate::connections::{Connections, Counted};
use crate::limits::{ACCEPTED_QUEUE, HANDSHAKE_TIMEOUT, MAX_HANDSHAKES, MAX_PEER_LANES};
use crate::node::NodeError;
use crate::proto::raft_v1::raft_server::Raft as _;
use crate::proto::raft_v1::RaftMessage;
use crate::raft::lane::{
    dup_fd, metadata_map, peek, read_frame, write_frame, LaneIo, LaneReply, LaneRequest, LaneRpc,
    Peeked, ALPN, GREETING,
};

/// A TLS connection as the listener counted it.
type TlsStream = tokio_rustls::server::TlsStream<Counted<TcpStream>>;
use leasehold_core::InvalidInput;

/// What serves a lane: the peer plane's Raft service, behind its gate, until the node stops.
#[derive(Clone)]
pub(crate) struct LaneServer {
    pub service: Arc<RaftService>,
    pub gate: PeerGate,
    /// Turns true once the node stops.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

impl LaneServer {
    /// The connections on `listener` (no TLS) that are not lanes, for tonic; lanes are served
    /// here (see [`split_plain`]).
    pub fn split_plain(
        self,
        listener: TcpListener,
        connections: Connections,
        keepalive: KeepAlive,
    ) -> ReceiverStream<std::io::Result<Counted<TcpStream>>> {
        let serve = move |tcp, fd, from| self.clone().serve(tcp, fd, None, from);
        let bounds = (connections, MAX_PEER_LANES);
        split_plain::<PeerFrames, _, _>(listener, bounds, keepalive, serve)
    }

    /// The TLS connections of `incoming` that are not lanes (by their ALPN protocol), for
    /// tonic; lanes are served here, with the certificate their caller showed.
    pub fn split_tls<S>(self, incoming: S) -> ReceiverStream<std::io::Result<TlsStream>>
    where
        S: tokio_stream::Stream<Item = std::io::Result<TlsStream>> + Send + Unpin + 'static,
    {
        let (grpc, stream) = mpsc::channel(ACCEPTED_QUEUE);
        let mut incoming = incoming;
        let open = Arc::new(tokio::sync::Semaphore::new(MAX_PEER_LANES));
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    conn = incoming.next() => match conn {
                        Some(conn) => conn,
                        None => return,
                    },
                    // tonic stopped serving: let the listener go with it.
                    () = grpc.closed() => return,
                };
                let tls = match conn {
                    Ok(tls) if tls.get_ref().1.alpn_protocol() == Some(ALPN) => tls,
                    other => {
                        if grpc.send(other).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let (tcp, session) = tls.get_ref();
                let certs = session.peer_certificates().map(<[_]>::to_vec);
                let (Ok(from), Ok(fd)) = (tcp.peer_addr(), dup_fd(tcp)) else {
                    continue;
                };
                // The gate before anything of the lane is read, as gRPC's interceptor runs
                // before a call's body: a certificate of the cluster's CA that names no member
                // (a client's) is closed here, refused in the gate's log. Each call is let
                // through again (`answer`), so a member removed meanwhile is refused.
                if self.gate.admit(certs.as_deref(), Some(from)).is_err() {
                    continue;
                }
                // Past the bound, closed: its caller speaks gRPC to this node for a while.
                let Ok(lane) = open.clone().try_acquire_owned() else {
                    continue;
                };
                let lanes = self.clone();
                tokio::spawn(async move {
                    let _lane = lane;
                    let mut tls = tls;
                    let mut greeting = [0; GREETING.len()];
                    let read = tls.read_exact(&mut greeting);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, read).await {
                        Ok(Ok(_)) if greeting == *GREETING => {
                            lanes.serve(tls, fd, certs, from).await
                        }
                        _ => {}
                    }
                });
            }
        });
        ReceiverStream::new(stream)
    }

    /// Serves the lane on `io` (its TCP socket `tcp`, its caller's `certs`) until it ends
    /// or the node stops.
    async fn serve(
        self,
        io: impl LaneIo,
        tcp: OwnedFd,
        certs: Option<Vec<CertificateDer<'static>>>,
        from: SocketAddr,
    ) {
        let (lanes, certs) = (&self, certs.as_deref());
        let answer = |request| lanes.answer(request, certs, from);
        serve_lane::<PeerFrames, _>(io, &tcp, self.stopping.clone(), answer, from).await;
    }

    /// The handler's answer to `request`, as the gRPC call would have had it.
    async fn answer(
        &self,
        request: LaneRequest,
        certs: Option<&[CertificateDer<'static>]>,
        from: SocketAddr,
    ) -> LaneReply {
        // The gate first, as gRPC's interceptor runs before anything of the call is looked at.
        let member = match self.gate.admit(certs, Some(from)) {
            Ok(member) => member,
            Err(status) => return LaneReply::of(Err(status)),
        };
        let metadata = match metadata_map(request.metadata) {
            Ok(metadata) => metadata,
            Err(why) => {
                let refused = NodeError::Invalid(InvalidInput::new("lane metadata", why));
                return LaneReply::of(Err(refused.into()));
            }
        };
        let mut call = tonic::Request::from_parts(
            metadata,
            Default::default(),
            RaftMessage { data: request.data },
        );
        if let Some(member) = member {
            call.extensions_mut().insert(member);
        }
        LaneReply::of(match request.rpc {
            LaneRpc::AppendEntries => self.service.append_entries(call).await,
            LaneRpc::Propose => self.service.propose(call).await,
        })
    }
}

/// The connections on `listener` (no TLS) that are not lanes, for tonic; lanes go to `serve`,
/// their greeting read. A connection is told by its first bytes: a lane's greeting, or
/// anything else (an HTTP/2 preface). One that sends nothing within [`HANDSHAKE_TIMEOUT`] is
/// closed, as a TLS connection that does not finish its handshake is: every client speaks
/// first, and a silent connection would hold its place under the listener's bound for as long
/// as its caller liked (a flood of them took every place). At most [`MAX_HANDSHAKES`] are
/// looked at at once; accepting waits for one of them to end. Past `max_lanes` open lanes, a
/// lane's greeting goes to tonic, which refuses it, and its caller uses gRPC: each lane holds a
/// task and two descriptors.
pub(crate) fn split_plain<L, S, F>(
    listener: TcpListener,
    (connections, max_lanes): (Connections, usize),
    keepalive: KeepAlive,
    serve: S,
) -> ReceiverStream<std::io::Result<Counted<TcpStream>>>
where
    L: LaneFrames,
    S: Fn(TcpStream, OwnedFd, SocketAddr) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send,
{
    let (grpc, stream) = mpsc::channel(ACCEPTED_QUEUE);
    let looking = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    let open = Arc::new(tokio::sync::Semaphore::new(max_lanes));
    tokio::spawn(async move {
        loop {
            let (tcp, from) = tokio::select! {
                conn = connections.accept(&listener, keepalive) => conn,
                () = grpc.closed() => return,
            };
            let permit = looking.clone().acquire_owned().await;
            let permit = permit.expect("the semaphore is never closed");
            let (grpc, serve, open) = (grpc.clone(), serve.clone(), open.clone());
            tokio::spawn(async move {
                // The connection's place under the listener's bound goes with it: to tonic,
                // or held here while its lane is served.
                let (mut tcp, place) = tcp.into_parts();
                let offered = offers(&mut tcp, L::GREETING);
                let offered = tokio::time::timeout(HANDSHAKE_TIMEOUT, offered).await;
                drop(permit);
                // A lane's place is taken only once its greeting is whole: a connection that
                // is looked at (gRPC's, a health check's) holds none.
                let lane = match offered {
                    Ok(true) => open.try_acquire_owned().ok(),
                    Ok(false) => None,
                    // Silent: closed, its place given back.
                    Err(_) => return,
                };
                let Some(lane) = lane else {
                    let _ = grpc.send(Ok(Counted::holding(tcp, place))).await;
                    return;
                };
                let mut greeting = [0; 8];
                if tcp.read_exact(&mut greeting).await.is_ok() {
                    if let Ok(fd) = dup_fd(&tcp) {
                        serve(tcp, fd, from).await;
                    }
                }
                drop((lane, place));
            });
        }
    });
    ReceiverStream::new(stream)
}

/// What one kind of lane reads and writes: its greeting, its requests and its answers.
pub(crate) trait LaneFrames {
    type Request: Send;
    type Answer: Send + Sync;
    /// What its caller sends first, and its server answers back.
    const GREETING: &'static [u8; 8];
    /// The next request; `None` at a clean end of the connection.
    fn read(
        io: &mut (impl AsyncRead + Unpin + Send),
    ) -> impl Future<Output = std::io::Result<Option<Self::Request>>> + Send;
    fn write(
        io: &mut (impl AsyncWrite + Unpin + Send),
        answer: &Self::Answer,
    ) -> impl Future<Output = std::io::Result<()>> + Send;
}

/// The peer lane's frames (`raft::lane`).
pub(crate) struct PeerFrames;

impl LaneFrames for PeerFrames {
    type Request = LaneRequest;
    type Answer = LaneReply;
    const GREETING: &'static [u8; 8] = GREETING;

    async fn read(
        io: &mut (impl AsyncRead + Unpin + Send),
    ) -> std::io::Result<Option<LaneRequest>> {
        read_frame(io).await
    }

    async fn write(
        io: &mut (impl AsyncWrite + Unpin + Send),
        answer: &LaneReply,
    ) -> std::io::Result<()> {
        write_frame(io, answer).await
    }
}

/// Serves the lane from `from` on `io` (its TCP socket `tcp`) with `answer` until it ends or
/// the node stops (`stopping` turns true).
pub(crate) async fn serve_lane<L: LaneFrames, F: Future<Output = L::Answer>>(
    io: impl LaneIo,
    tcp: &OwnedFd,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    answer: impl Fn(L::Request) -> F,
    from: SocketAddr,
) {
    let stopped = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    if let Err(e) = serve_frames::<L, _>(io, tcp, stopped, answer).await {
        tracing::debug!(caller = %from, greeting = ?L::GREETING, error = %e, "a lane ended");
    }
}

/// Greets a lane's caller (its greeting has been read) and answers its requests with `answer`,
/// one at a time, until it closes the lane, sends what is not a request, or `until`.
///
/// A request whose caller closed the lane right behind it is not answered: the caller gave up
/// waiting (it closes a lane whose call timed out), and a request read only now was held up on
/// the way, by a node that was paused or a network that stalled. Its answer would reach nobody,
/// and its work is stale: an AppendEntries from a leader that may be gone, or forwarded writes
/// their client was already told may not have been done. (gRPC drops such a call too, when the
/// caller's cancel arrives before the server takes it.)
async fn serve_frames<L: LaneFrames, F: Future<Output = L::Answer>>(
    io: impl LaneIo,
    tcp: &OwnedFd,
    until: impl Future<Output = ()>,
    answer: impl Fn(L::Request) -> F,
) -> std::io::Result<()> {
    let mut io = BufReader::new(io);
    io.write_all(L::GREETING).await?;
    io.flush().await?;
    tokio::pin!(until);
    loop {
        let request = tokio::select! {
            request = L::read(&mut io) => request?,
            () = &mut until => return Ok(()),
        };
        let Some(request) = request else {
            return Ok(());
        };
        if io.buffer().is_empty() && peek(tcp) == Peeked::Closed {
            return Ok(());
        }
        let reply = answer(request).await;
        L::write(&mut io, &reply).await?;
    }
}

/// Whether the connection's first bytes are `greeting`, left unread either way; `false` as
/// soon as they cannot be.
async fn offers(tcp: &mut TcpStream, greeting: &[u8; 8]) -> bool {
    let mut first = [0; 8];
    let mut wait = std::time::Duration::from_millis(1);
    loop {
        let Ok(seen) = tcp.peek(&mut first).await else {
            return false;
        };
        if seen == 0 || first[..seen] != greeting[..seen] {
            return false;
        }
        if seen == greeting.len() {
            return true;
        }
        // Part of it so far: wait for the rest (peek returns at once while bytes are there),
        // longer each time, so that a caller that stalls mid-greeting costs few wakeups.
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_millis(64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `offers` makes of a connection whose caller sends `first`; it leaves all of it
    /// unread for whoever reads next.
    async fn told(first: &'static [u8]) -> (bool, Vec<u8>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let caller = tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            // In two pieces, as a slow network may deliver it.
            let (head, tail) = first.split_at(3);
            tcp.write_all(head).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tcp.write_all(tail).await.unwrap();
            tcp
        });
        let (mut tcp, _) = listener.accept().await.unwrap();
        let greeted = offers(&mut tcp, GREETING).await;
        drop(caller.await.unwrap());
        let mut rest = Vec::new();
        tcp.read_to_end(&mut rest).await.unwrap();
        (greeted, rest)
    }

    /// A lane whose caller sent one request, and then closed it if `closed`, served once all of
    /// that has arrived: the requests answered, and what the caller read back.
    async fn served(closed: bool) -> (usize, Vec<u8>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut caller = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let request = LaneRequest {
            rpc: LaneRpc::AppendEntries,
            metadata: crate::raft::lane::Metadata::default(),
            data: b"entries".to_vec(),
        };
        write_frame(&mut caller, &request).await.unwrap();
        if closed {
            caller.shutdown().await.unwrap();
        }
        // On loopback the kernel has queued the frame and the close on the server's side by
        // the time the calls return: the server is started only now, with both there.
        let fd = dup_fd(&tcp).unwrap();
        let answered = AtomicUsize::new(0);
        let answer = |request: LaneRequest| {
            answered.fetch_add(1, Ordering::SeqCst);
            std::future::ready(LaneReply::Ok {
                metadata: crate::raft::lane::Metadata::default(),
                data: request.data,
            })
        };
        let server = async {
            // Dropped with the lane: the copy keeps the socket open as long as it lives.
            let fd = fd;
            serve_frames::<PeerFrames, _>(tcp, &fd, std::future::pending(), answer).await
        };
        let client = async {
            let mut greeting = [0; GREETING.len()];
            caller.read_exact(&mut greeting).await.unwrap();
            assert_eq!(greeting, *GREETING);
            let reply = read_frame::<LaneReply>(&mut caller).await.unwrap();
            if !closed {
                caller.shutdown().await.unwrap();
            }
            reply
        };
        let (served, reply) = tokio::join!(server, client);
        served.unwrap();
        let data = match reply {
            Some(LaneReply::Ok { data, .. }) => data,
            None => Vec::new(),
            Some(other) => panic!("{other:?}"),
        };
        (answered.load(Ordering::SeqCst), data)
    }

    #[tokio::test]
    async fn a_request_is_answered_unless_its_caller_gave_up_before_it_was_read() {
        assert_eq!(served(false).await, (1, b"entries".to_vec()));
        assert_eq!(
            served(true).await,
            (0, Vec::new()),
            "a closed lane's last request"
        );
    }

    #[tokio::test]
    async fn a_lane_is_told_by_its_greeting_and_grpc_gets_its_bytes_untouched() {
        assert_eq!(
            told(b"LHLANE1\nframe").await,
            (true, b"LHLANE1\nframe".to_vec())
        );
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(told(preface).await, (false, preface.to_vec()));
        // A greeting's first bytes, then something else: gRPC's, whole.
        assert_eq!(told(b"LHLxxxxxxx").await, (false, b"LHLxxxxxxx".to_vec()));
    }
}
