//! The peer lane: the peer plane's hot calls (AppendEntries, forwarded writes) as length-framed
//! messages on a plain TCP (or TLS) connection that one caller at a time owns, beside gRPC on
//! the same port.
//!
//! Why: a gRPC call between two nodes on loopback cost 225 to 260 µs of transport at the median
//! here (the request through tonic's buffer task, hyper's connection task, a task spawned per
//! call on the server, and back), where a framed round trip between two tokio processes costs
//! 35 to 45 µs; every write pays two such calls
//! to be committed (AppendEntries out and back) and a write sent to a follower pays a third (the
//! forward). On a lane the caller writes its frame itself and reads the answer itself.
//!
//! What travels is what gRPC carried: the call's metadata (clock mode, incarnations) and its
//! `RaftMessage` bytes, and back the reply's metadata and bytes, or its status. The server
//! hands each request to the same service handler a gRPC call reaches, with the same checks, so
//! the lane changes how bytes move and nothing else. A peer that answers the lane's greeting
//! with anything but the greeting (a node of an earlier version) is spoken to over gRPC.
//!
//! Framing: a big-endian `u32` length, then that many bytes of [`codec`](super::codec)
//! encoding. A frame over the peer plane's message limit ends the connection before anything
//! of it is allocated.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

use super::codec::{decode, encode};
use crate::limits::{
    CONNECT_TIMEOUT, LANE_UNSUPPORTED_RETRY, MAX_IDLE_LANES, MAX_PEER_MESSAGE_BYTES,
};
use crate::proto::raft_v1::RaftMessage;
use crate::NodeId;
use leasehold_proto::lane::{metadata_pairs, MAX_METADATA};

pub use leasehold_proto::wire::{PEER_LANE_ALPN as ALPN, PEER_LANE_GREETING as GREETING};

/// The largest frame either side reads: a peer message and room for its envelope.
pub const MAX_FRAME_BYTES: usize = MAX_PEER_MESSAGE_BYTES + 64 * 1024;

/// Which handler a request is for: the peer plane's calls that every write waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaneRpc {
    /// Raft's AppendEntries (and heartbeats), leader to follower.
    AppendEntries,
    /// Writes a follower forwards to the leader.
    Propose,
}

/// A call's or an answer's metadata (ASCII keys and values, as gRPC carried them): at most
/// [`MAX_METADATA`] pairs, refused while the frame is decoded, before more are allocated (a
/// frame of 8 MiB holds millions of empty pairs, 48 bytes each once decoded). The same
/// encoding as a `Vec` of pairs, so lanes of earlier versions read it.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(crate) struct Metadata(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bounded;
        impl<'de> serde::de::Visitor<'de> for Bounded {
            type Value = Metadata;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "at most {MAX_METADATA} metadata pairs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Metadata, A::Error> {
                if seq.size_hint().is_some_and(|n| n > MAX_METADATA) {
                    return Err(serde::de::Error::invalid_length(
                        seq.size_hint().unwrap_or(0),
                        &self,
                    ));
                }
                let mut pairs = Vec::new();
                while let Some(pair) = seq.next_element()? {
                    if pairs.len() == MAX_METADATA {
                        return Err(serde::de::Error::invalid_length(MAX_METADATA + 1, &self));
                    }
                    pairs.push(pair);
                }
                Ok(Metadata(pairs))
            }
        }
        d.deserialize_seq(Bounded)
    }
}

/// A call: its metadata and its message.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LaneRequest {
    pub rpc: LaneRpc,
    pub metadata: Metadata,
    pub data: Vec<u8>,
}

/// The answer: the handler's reply with its metadata, or its status.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum LaneReply {
    Ok {
        metadata: Metadata,
        data: Vec<u8>,
    },
    Err {
        code: i32,
        message: String,
        metadata: Metadata,
    },
}

/// `pairs` as gRPC metadata, refused past the lane's metadata limit or where not metadata.
pub(crate) fn metadata_map(pairs: Metadata) -> Result<tonic::metadata::MetadataMap, String> {
    leasehold_proto::lane::metadata_map(pairs.0.into_iter())
}

impl LaneReply {
    /// What a handler answered, as a lane carries it.
    pub fn of(answer: Result<tonic::Response<RaftMessage>, tonic::Status>) -> Self {
        match answer {
            Ok(response) => LaneReply::Ok {
                metadata: Metadata(metadata_pairs(response.metadata())),
                data: response.into_inner().data,
            },
            Err(status) => LaneReply::Err {
                code: status.code() as i32,
                message: status.message().to_owned(),
                metadata: Metadata(metadata_pairs(status.metadata())),
            },
        }
    }

    /// The answer as a gRPC call would have given it: the reply with its metadata, or the
    /// handler's refusal.
    fn into_response(self) -> Result<tonic::Response<RaftMessage>, LaneFailure> {
        match self {
            LaneReply::Ok { metadata, data } => {
                let metadata = metadata_map(metadata).map_err(|why| {
                    LaneFailure::Lost(format!("the peer's reply carried bad metadata: {why}"))
                })?;
                Ok(tonic::Response::from_parts(
                    metadata,
                    RaftMessage { data },
                    Default::default(),
                ))
            }
            LaneReply::Err { code, message, .. } => Err(LaneFailure::Refused {
                code: code.into(),
                message,
            }),
        }
    }
}

/// Why a call on a lane has no reply: the peer's handler refused it, or the call did not get
/// there and back. The peer plane's callers read it as they read a gRPC call's status, without
/// making one (a status is the node's own words to a client: see `node::error`).
#[derive(Debug)]
pub enum LaneFailure {
    /// The peer's handler refused it, as its gRPC call would have been refused.
    Refused { code: tonic::Code, message: String },
    /// No lane could be had: the call was not sent.
    Unreachable(String),
    /// The lane failed with the call on it: it may have been handled.
    Lost(String),
    /// The caller's time ran out with the call on it, as a gRPC call's timeout does
    /// (`CANCELLED`, which the peer network does not take for an unreachable peer).
    TimedOut(String),
}

impl LaneFailure {
    /// The gRPC code the same failure of a gRPC call would have.
    pub fn code(&self) -> tonic::Code {
        match self {
            LaneFailure::Refused { code, .. } => *code,
            LaneFailure::Unreachable(_) => tonic::Code::Unavailable,
            LaneFailure::Lost(_) => tonic::Code::Unavailable,
            LaneFailure::TimedOut(_) => tonic::Code::Cancelled,
        }
    }
}

impl std::fmt::Display for LaneFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaneFailure::Refused { message, .. } => f.write_str(message),
            LaneFailure::Unreachable(why) | LaneFailure::Lost(why) | LaneFailure::TimedOut(why) => {
                f.write_str(why)
            }
        }
    }
}

/// Writes `value` as one frame.
pub(crate) async fn write_frame<T: Serialize>(
    io: &mut (impl AsyncWrite + Unpin),
    value: &T,
) -> io::Result<()> {
    let body = encode(value).map_err(io::Error::other)?;
    leasehold_proto::lane::write_frame(io, &body, MAX_FRAME_BYTES).await
}

/// Reads one frame and decodes it; a frame over [`MAX_FRAME_BYTES`] is refused before its
/// body is read. `None` at a clean end of the connection, between frames.
pub(crate) async fn read_frame<T: serde::de::DeserializeOwned>(
    io: &mut (impl AsyncRead + Unpin),
) -> io::Result<Option<T>> {
    match leasehold_proto::lane::read_frame(io, MAX_FRAME_BYTES).await? {
        Some(body) => decode(&body).map(Some).map_err(io::Error::other),
        None => Ok(None),
    }
}

/// Anything a lane runs over: a TCP stream, or TLS on one.
pub(crate) trait LaneIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> LaneIo for T {}

/// How a lane's caller dials: from which address, and with which TLS.
#[derive(Clone)]
pub struct Dialer {
    /// The address to dial from (see `Channels`).
    pub local_address: Option<IpAddr>,
    /// TLS with this node's identity as last loaded, asking for [`ALPN`] (see
    /// `Tls::connector`); `None` without TLS.
    pub tls: Option<Arc<crate::tls::Reloading>>,
}

/// One open lane to a peer.
struct Lane {
    io: BufReader<Box<dyn LaneIo>>,
    /// The TCP stream's own handle, to see while the lane is idle whether the peer closed it.
    tcp: OwnedFd,
    /// The generation of the TLS material it was dialed with (see `tls::Reloading`); 0
    /// without TLS. An idle lane of an older one is closed, not reused.
    generation: u64,
}

/// Why a lane could not be opened.
enum OpenError {
    /// The peer could not be reached.
    Unreachable(io::Error),
    /// The peer answered, but not as a lane: an earlier version; gRPC it is.
    Unsupported,
}

impl Dialer {
    /// The generation of the TLS material new lanes are dialed with.
    fn generation(&self) -> u64 {
        self.tls.as_ref().map_or(0, |tls| tls.generation())
    }

    /// A TCP connection to `addr`, from this node's address.
    async fn connect(&self, addr: &str) -> io::Result<TcpStream> {
        let to: SocketAddr = tokio::net::lookup_host(addr)
            .await?
            .next()
            .ok_or_else(|| io::Error::other(format!("{addr} resolves to no address")))?;
        let socket = if to.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = self.local_address {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        socket.set_nodelay(true)?;
        // As the servers' connections: a lane idle in the pool to a host that died is found.
        let keepalive = crate::connections::KEEPALIVE.to_socket2();
        socket2::SockRef::from(&socket).set_tcp_keepalive(&keepalive)?;
        socket.connect(to).await
    }

    async fn open(&self, peer: NodeId, addr: &str) -> Result<Lane, OpenError> {
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, self.connect(addr))
            .await
            .map_err(|_| OpenError::Unreachable(io::ErrorKind::TimedOut.into()))?
            .map_err(OpenError::Unreachable)?;
        let fd = dup_fd(&tcp).map_err(OpenError::Unreachable)?;
        // With TLS on, a lane dials with TLS or not at all: were rustls to refuse this identity
        // for a client (it took it for the servers), the call goes by gRPC.
        let generation = self.generation();
        let connector = match &self.tls {
            Some(tls) => Some(
                tls.tls()
                    .connector(ALPN)
                    .map_err(|_| OpenError::Unsupported)?,
            ),
            None => None,
        };
        let greet = async {
            let mut io: Box<dyn LaneIo> = match connector {
                Some(connector) => {
                    let name = rustls::pki_types::ServerName::try_from(crate::tls::node_name(peer))
                        .map_err(io::Error::other)?;
                    Box::new(connector.connect(name, tcp).await?)
                }
                None => Box::new(tcp),
            };
            io.write_all(GREETING).await?;
            io.flush().await?;
            let mut answer = [0; GREETING.len()];
            match io.read_exact(&mut answer).await {
                Ok(_) => Ok((io, answer == *GREETING)),
                // Closed at the greeting: an earlier version's HTTP/2 server refusing it.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok((io, false)),
                Err(e) => Err(e),
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, greet).await {
            Ok(Ok((io, true))) => Ok(Lane {
                io: BufReader::new(io),
                tcp: fd,
                generation,
            }),
            // Answered otherwise or closed at the greeting, or, under TLS, its ALPN protocol
            // refused: not a lane server.
            Ok(Ok((_, false))) => Err(OpenError::Unsupported),
            Ok(Err(e)) if self.tls.is_some() && refuses_alpn(&e) => Err(OpenError::Unsupported),
            // Reset, or a handshake that failed otherwise (a certificate refused): a gRPC call
            // would fail as well.
            Ok(Err(e)) => Err(OpenError::Unreachable(e)),
            Err(_) => Err(OpenError::Unreachable(io::ErrorKind::TimedOut.into())),
        }
    }
}

/// Whether a TLS handshake failed because the server offers no protocol the lane asked for.
fn refuses_alpn(e: &io::Error) -> bool {
    let alert = rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol);
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| *e == alert)
}

/// A duplicate of `tcp`'s descriptor, to look at the socket while the lane is boxed (in TLS).
pub(crate) fn dup_fd(tcp: &TcpStream) -> io::Result<OwnedFd> {
    tcp.as_fd().try_clone_to_owned()
}

/// What a lane's socket holds, looked at without waiting or reading.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Peeked {
    /// Nothing yet: the connection is open and quiet.
    Nothing,
    /// Bytes to read.
    Bytes,
    /// The other end closed it (or it failed).
    Closed,
}

/// What `tcp` holds. (Its socket is non-blocking, as tokio's are: a quiet one peeks nothing
/// and would block.)
pub(crate) fn peek(tcp: &OwnedFd) -> Peeked {
    let mut byte = [std::mem::MaybeUninit::new(0u8)];
    match socket2::SockRef::from(tcp).peek(&mut byte) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Peeked::Nothing,
        Ok(0) | Err(_) => Peeked::Closed,
        Ok(_) => Peeked::Bytes,
    }
}

impl Lane {
    /// Whether the idle lane's peer has closed it, or sent what nobody asked for (in the socket,
    /// or read with the last answer): such a lane is dropped, not used, so that a call after a
    /// peer's restart is not lost on it, and no call takes a stray frame for its answer.
    fn is_closed(&self) -> bool {
        !self.io.buffer().is_empty() || peek(&self.tcp) != Peeked::Nothing
    }

    async fn call(&mut self, request: &LaneRequest) -> io::Result<LaneReply> {
        write_frame(&mut self.io, request).await?;
        read_frame(&mut self.io)
            .await?
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
    }
}

/// The lanes to each peer, idle ones kept for the next call.
#[derive(Clone, Default)]
pub struct Lanes {
    /// `None`: no lanes, every call goes by gRPC.
    dialer: Option<Dialer>,
    peers: Arc<Mutex<HashMap<(NodeId, String), Pool>>>,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Lane>,
    /// Until when the peer is spoken to over gRPC, having answered a greeting otherwise.
    unsupported_until: Option<Instant>,
}

impl Lanes {
    /// Lanes dialed with `dialer`; none at all (every call by gRPC) without one.
    pub fn new(dialer: Option<Dialer>) -> Self {
        Lanes {
            dialer,
            peers: Arc::default(),
        }
    }

    /// An idle lane to `peer`, or `None` if there is none; `Err` if the peer takes none now.
    fn take(&self, key: &(NodeId, String)) -> Result<Option<Lane>, ()> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        // A node added under a new id at a removed member's address: the old id's lanes go, as
        // `Channels::get` drops its channel.
        peers.retain(|(id, at), _| at != &key.1 || *id == key.0);
        let pool = peers.entry(key.clone()).or_default();
        if pool
            .unsupported_until
            .is_some_and(|until| until > Instant::now())
        {
            return Err(());
        }
        // A lane dialed before the TLS files were loaded again shows the old certificate.
        let generation = self.dialer.as_ref().map_or(0, Dialer::generation);
        while let Some(lane) = pool.idle.pop() {
            if !lane.is_closed() && lane.generation == generation {
                return Ok(Some(lane));
            }
        }
        Ok(None)
    }

    fn put_back(&self, key: (NodeId, String), lane: Lane) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let pool = peers.entry(key).or_default();
        if pool.idle.len() < MAX_IDLE_LANES {
            pool.idle.push(lane);
        }
    }

    fn unsupported(&self, key: (NodeId, String)) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.entry(key).or_default().unsupported_until =
            Some(Instant::now() + LANE_UNSUPPORTED_RETRY);
    }

    /// Sends `request` to `peer` at `addr` on a lane and returns its answer as the gRPC call
    /// would have, or why it has none; `Err(request)` if the peer takes no lanes (the caller
    /// makes the gRPC call instead). Within `timeout`, or the call is lost; a lane that failed
    /// mid-call is dropped, never reused.
    pub async fn call(
        &self,
        peer: NodeId,
        addr: &str,
        rpc: LaneRpc,
        request: tonic::Request<RaftMessage>,
        timeout: Duration,
    ) -> Result<Result<tonic::Response<RaftMessage>, LaneFailure>, tonic::Request<RaftMessage>>
    {
        let Some(dialer) = &self.dialer else {
            return Err(request);
        };
        let key = (peer, addr.to_owned());
        // One deadline for dialing and the call, as a gRPC call's timeout covers both.
        let deadline = tokio::time::Instant::now() + timeout;
        let lane = match self.take(&key) {
            Err(()) => return Err(request),
            Ok(Some(lane)) => lane,
            Ok(None) => match tokio::time::timeout_at(deadline, dialer.open(peer, addr)).await {
                Ok(Ok(lane)) => lane,
                Ok(Err(OpenError::Unsupported)) => {
                    self.unsupported(key);
                    return Err(request);
                }
                Ok(Err(OpenError::Unreachable(e))) => {
                    return Ok(Err(LaneFailure::Unreachable(format!(
                        "cannot reach {addr}: {e}"
                    ))))
                }
                Err(_) => {
                    return Ok(Err(LaneFailure::Unreachable(format!(
                        "cannot reach {addr}: no lane within {timeout:?}"
                    ))))
                }
            },
        };
        let request = LaneRequest {
            rpc,
            metadata: Metadata(metadata_pairs(request.metadata())),
            data: request.into_inner().data,
        };
        let mut lane = lane;
        match tokio::time::timeout_at(deadline, lane.call(&request)).await {
            Ok(Ok(reply)) => {
                self.put_back(key, lane);
                Ok(reply.into_response())
            }
            Ok(Err(e)) => Ok(Err(LaneFailure::Lost(format!(
                "the lane to {addr} failed: {e}"
            )))),
            Err(_) => Ok(Err(LaneFailure::TimedOut(format!(
                "no answer from {addr} within {timeout:?}"
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::TcpListener;
    use tonic::metadata::MetadataMap;
    use tonic::Code;

    use super::*;

    #[test]
    fn a_frame_with_more_metadata_pairs_than_the_limit_is_refused_while_it_is_decoded() {
        // A call as a lane encodes it, with its metadata as a plain list of pairs.
        #[derive(Serialize)]
        struct Call {
            rpc: LaneRpc,
            metadata: Vec<(String, String)>,
            data: Vec<u8>,
        }
        let call = |pairs: Vec<(String, String)>| {
            let metadata = pairs;
            encode(&Call {
                rpc: LaneRpc::Propose,
                metadata,
                data: Vec::new(),
            })
            .unwrap()
        };
        // A million empty pairs: 2 MB on the wire, 48 MB once decoded, refused at its length.
        let flood = call(vec![(String::new(), String::new()); 1_000_000]);
        assert!(
            decode::<LaneRequest>(&flood).is_err(),
            "a million pairs decoded"
        );
        let within = call(vec![("k".into(), "v".into()); MAX_METADATA]);
        let decoded = decode::<LaneRequest>(&within).unwrap();
        assert_eq!(decoded.metadata.0.len(), MAX_METADATA);
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_before_its_body_is_read() {
        // A header and no body: the refusal cannot have waited for one.
        let header = (MAX_FRAME_BYTES as u32 + 1).to_be_bytes();
        let refused = read_frame::<LaneRequest>(&mut &header[..]).await;
        let refused = refused.unwrap_err().to_string();
        assert!(refused.contains("over the"), "{refused}");
        // Between frames, the end of the connection is a clean end.
        assert!(read_frame::<LaneRequest>(&mut &[][..])
            .await
            .unwrap()
            .is_none());
    }

    /// `reply` through a frame and back, as the caller gets it.
    async fn carried(reply: LaneReply) -> Result<tonic::Response<RaftMessage>, LaneFailure> {
        let mut frame = Vec::new();
        write_frame(&mut frame, &reply).await.unwrap();
        let back: LaneReply = read_frame(&mut frame.as_slice()).await.unwrap().unwrap();
        back.into_response()
    }

    #[tokio::test]
    async fn a_reply_and_a_refusal_arrive_as_grpc_delivered_them() {
        let mut response = tonic::Response::new(RaftMessage {
            data: vec![1, 2, 3],
        });
        let value = "8d1f".parse().unwrap();
        response
            .metadata_mut()
            .insert("leasehold-incarnation", value);
        let back = carried(LaneReply::of(Ok(response))).await.unwrap();
        assert_eq!(
            back.metadata().get("leasehold-incarnation").unwrap(),
            "8d1f"
        );
        assert_eq!(back.into_inner().data, [1, 2, 3]);

        let mut metadata = MetadataMap::new();
        metadata.insert("leasehold-origin", "node".parse().unwrap());
        let refusal =
            tonic::Status::with_metadata(Code::PermissionDenied, "not a member", metadata);
        let back = carried(LaneReply::of(Err(refusal))).await.unwrap_err();
        assert_eq!(back.code(), Code::PermissionDenied);
        assert_eq!(back.to_string(), "not a member");
    }

    #[tokio::test]
    async fn a_lane_whose_peer_sent_more_than_the_answer_is_not_used_again() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            loop {
                let (mut tcp, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut greeting = [0; GREETING.len()];
                    tcp.read_exact(&mut greeting).await.unwrap();
                    tcp.write_all(GREETING).await.unwrap();
                    let request: LaneRequest = read_frame(&mut tcp).await.unwrap().unwrap();
                    // The answer, and a stray frame behind it, in one write: the caller reads
                    // both at once, and the stray one waits in its buffer, not in the socket.
                    let mut both = Vec::new();
                    for data in [request.data, b"stray".to_vec()] {
                        let metadata = Metadata::default();
                        write_frame(&mut both, &LaneReply::Ok { metadata, data })
                            .await
                            .unwrap();
                    }
                    tcp.write_all(&both).await.unwrap();
                    std::future::pending::<()>().await;
                });
            }
        });
        let lanes = lanes();
        assert_eq!(call(&lanes, &addr, b"one").await, Some(Ok(b"one".to_vec())));
        until("the idle lane is seen to hold the stray frame", || {
            let peers = lanes.peers.lock().unwrap();
            peers
                .values()
                .flat_map(|pool| &pool.idle)
                .any(|lane| lane.is_closed())
        })
        .await;
        assert_eq!(call(&lanes, &addr, b"two").await, Some(Ok(b"two".to_vec())));
        assert_eq!(connections.load(Ordering::SeqCst), 2, "a new lane");
    }

    /// What a test server saw: connections taken, and lanes it closed.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        closed: AtomicUsize,
    }

    /// A lane server on a free port that answers each request with its own bytes, closes each
    /// lane after `answers` answers, and never answers if `answers` is 0; or, unless `lanes`,
    /// one that answers a greeting with HTTP/2's preface, as a node of an earlier version does.
    async fn server(lanes: bool, answers: usize) -> (String, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut tcp, _) = listener.accept().await.unwrap();
                counts.connections.fetch_add(1, Ordering::SeqCst);
                let counts = counts.clone();
                tokio::spawn(async move {
                    let mut greeting = [0; GREETING.len()];
                    tcp.read_exact(&mut greeting).await.unwrap();
                    if !lanes {
                        let _ = tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
                        return;
                    }
                    tcp.write_all(GREETING).await.unwrap();
                    for _ in 0..answers {
                        let request: LaneRequest = read_frame(&mut tcp).await.unwrap().unwrap();
                        let reply = LaneReply::Ok {
                            metadata: request.metadata,
                            data: request.data,
                        };
                        write_frame(&mut tcp, &reply).await.unwrap();
                    }
                    if answers == 0 {
                        // Read the request, never answer it.
                        let _ = read_frame::<LaneRequest>(&mut tcp).await;
                        std::future::pending::<()>().await;
                    }
                    drop(tcp);
                    counts.closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        (addr, seen)
    }

    fn lanes() -> Lanes {
        Lanes::new(Some(Dialer {
            local_address: None,
            tls: None,
        }))
    }

    fn request(data: &[u8]) -> tonic::Request<RaftMessage> {
        tonic::Request::new(RaftMessage {
            data: data.to_vec(),
        })
    }

    async fn call(lanes: &Lanes, addr: &str, data: &[u8]) -> Option<Result<Vec<u8>, Code>> {
        let second = Duration::from_secs(1);
        let answer = lanes.call(2, addr, LaneRpc::AppendEntries, request(data), second);
        match answer.await {
            Ok(Ok(reply)) => Some(Ok(reply.into_inner().data)),
            Ok(Err(failure)) => Some(Err(failure.code())),
            Err(_) => None,
        }
    }

    async fn until(what: &str, holds: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !holds() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn a_lane_is_kept_for_the_next_call_and_dropped_once_its_peer_closed_it() {
        let (addr, seen) = server(true, 2).await;
        let lanes = lanes();
        assert_eq!(call(&lanes, &addr, b"one").await, Some(Ok(b"one".to_vec())));
        assert_eq!(call(&lanes, &addr, b"two").await, Some(Ok(b"two".to_vec())));
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1, "one lane, kept");
        until("the server closes the lane", || {
            seen.closed.load(Ordering::SeqCst) == 1
        })
        .await;
        // The closed lane is seen as closed while idle, and a new one is dialed: the call is
        // not sent down a dead connection.
        assert_eq!(
            call(&lanes, &addr, b"three").await,
            Some(Ok(b"three".to_vec()))
        );
        assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_peer_that_answers_no_greeting_is_called_over_grpc_for_a_while() {
        let (addr, seen) = server(false, 0).await;
        let lanes = lanes();
        assert_eq!(
            call(&lanes, &addr, b"x").await,
            None,
            "handed back for gRPC"
        );
        assert_eq!(call(&lanes, &addr, b"x").await, None);
        assert_eq!(
            seen.connections.load(Ordering::SeqCst),
            1,
            "not dialed again within LANE_UNSUPPORTED_RETRY"
        );
        // Lanes off: every call is handed back, nothing dialed.
        let off = Lanes::new(None);
        assert_eq!(call(&off, &addr, b"x").await, None);
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_unreachable_peer_is_unavailable_and_an_unanswered_call_times_out_unkept() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let lanes = lanes();
        assert_eq!(
            call(&lanes, &addr, b"x").await,
            Some(Err(Code::Unavailable))
        );

        let (addr, seen) = server(true, 0).await;
        assert_eq!(call(&lanes, &addr, b"x").await, Some(Err(Code::Cancelled)));
        // The lane whose answer never came is not kept: its answer could still arrive and be
        // taken for the next call's.
        let peers = lanes.peers.lock().unwrap();
        assert!(peers.values().all(|pool| pool.idle.is_empty()));
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    }
}
