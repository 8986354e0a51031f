//! The client lane: the `LeaseStore` service's unary calls as length-prefixed frames on a TCP
//! connection of their own, one call at a time, on the node's client port beside gRPC. Each
//! frame is a `BatchCall` and its answer a `BatchAnswer`: the `Batch` stream's envelope, so a
//! node answers a lane's call as it answers a call on that stream, by the typed API.
//!
//! Why: gRPC carries each call through HTTP/2's tasks on both sides (a `Batch` stream too: the
//! connection's task, and a task per stream on the node); on loopback with many clients on two
//! cores that cost more CPU than the write it carried (the `Batch` stream measured 0.82-0.95x
//! of the lane at 64 clients, and one client's put 20-50 µs slower at p50). On a lane the caller
//! writes its frame and reads the answer itself.
//!
//! Lanes are used without TLS only, by a client without a bearer token (which a node without
//! TLS refuses, over gRPC, saying so), for calls that fit a frame, and with nodes that answer
//! the lane's greeting; everything else goes on the `Batch` stream or as a unary call.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use leasehold_proto::lane::{read_frame, write_frame, CLIENT_GREETING, MAX_CALL_BYTES};
use leasehold_proto::v1 as pb;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tonic::Status;

use crate::batch::refusal;
use crate::limits::{CONNECT_TIMEOUT, LANE_UNSUPPORTED_RETRY, MAX_LANES};

/// One open lane.
struct Lane {
    io: BufReader<TcpStream>,
    /// Its place among the node's [`MAX_LANES`], given back when it closes.
    _slot: Slot,
}

/// One of a node's [`MAX_LANES`] lanes, counted while it is open (dialing included).
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A slot among `open`, if fewer than [`MAX_LANES`] are taken.
    fn take(open: &Arc<AtomicUsize>) -> Option<Slot> {
        let fewer = |n: usize| (n < MAX_LANES).then_some(n + 1);
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, fewer)
            .ok()
            .map(|_| Slot(open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Lane {
    /// Whether the idle lane's node has closed it, or sent what nobody asked for: such a lane
    /// is dropped, not used, so that a call after the node's restart is not lost on it and no
    /// call takes a stray frame for its answer.
    fn is_closed(&self) -> bool {
        let mut byte = [0; 1];
        let mut buf = tokio::io::ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(Waker::noop());
        !self.io.buffer().is_empty()
            || !matches!(
                self.io.get_ref().poll_peek(&mut cx, &mut buf),
                Poll::Pending
            )
    }

    async fn call(&mut self, call: &[u8]) -> io::Result<pb::BatchAnswer> {
        write_frame(&mut self.io, call, MAX_CALL_BYTES).await?;
        // An answer is as big as the node makes it: a read returns at most the store's rows.
        let answer = read_frame(&mut self.io, usize::MAX).await?;
        let answer = answer.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        pb::BatchAnswer::decode(answer.as_slice()).map_err(io::Error::other)
    }
}

/// Why a lane could not be opened.
enum OpenError {
    /// The node could not be reached, or did not answer the greeting in time: nothing was
    /// sent.
    Unreachable(io::Error),
    /// The node answered, but not as a lane (or closed or reset the connection at the
    /// greeting): gRPC it is.
    Unsupported,
}

/// The lanes to one node, idle ones kept for the next call.
pub(crate) struct Lanes {
    /// `host:port`; `None` when this client uses no lanes (over TLS).
    address: Option<String>,
    local_ip: Option<IpAddr>,
    pool: Mutex<Pool>,
    /// Lanes open to the node, idle or not.
    open: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Lane>,
    /// Until when the node is called over gRPC, having answered a greeting otherwise.
    grpc_until: Option<Instant>,
}

impl Lanes {
    /// Lanes to `address` (`host:port`), dialed from `local_ip` if given; none at all (every
    /// call by gRPC) for `None`.
    pub(crate) fn new(address: Option<&str>, local_ip: Option<IpAddr>) -> Arc<Self> {
        Arc::new(Lanes {
            address: address.map(str::to_owned),
            local_ip,
            pool: Mutex::default(),
            open: Arc::default(),
        })
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle lane, or `None` if there is none; `Err` if the node takes none now.
    fn take(&self) -> Result<Option<Lane>, ()> {
        let mut pool = self.pool();
        if pool.grpc_until.is_some_and(|until| until > Instant::now()) {
            return Err(());
        }
        while let Some(lane) = pool.idle.pop() {
            if !lane.is_closed() {
                return Ok(Some(lane));
            }
        }
        Ok(None)
    }

    /// Calls the node over gRPC for [`LANE_UNSUPPORTED_RETRY`]; its idle lanes close, so that
    /// they hold none of its lanes meanwhile.
    fn to_grpc(&self) {
        let mut pool = self.pool();
        pool.grpc_until = Some(Instant::now() + LANE_UNSUPPORTED_RETRY);
        pool.idle.clear();
    }

    fn put_back(&self, lane: Lane) {
        self.pool().idle.push(lane);
    }

    /// `call` on a lane by `deadline`: the node's answer or refusal, as on the `Batch` stream;
    /// `Err(call)` where it goes otherwise: no lanes, a node that speaks none, [`MAX_LANES`]
    /// busy, or a call too big for a frame. The caller bounds the call's time too: a lane
    /// dropped mid-call is closed, never reused.
    pub(crate) async fn call(
        &self,
        call: pb::BatchCall,
        deadline: Instant,
    ) -> Result<Result<pb::batch_answer::Answer, Status>, pb::BatchCall> {
        let Some(address) = &self.address else {
            return Err(call);
        };
        if call.encoded_len() > MAX_CALL_BYTES {
            return Err(call);
        }
        let lane = match self.take() {
            Err(()) => return Err(call),
            Ok(Some(lane)) => lane,
            Ok(None) => {
                let Some(slot) = Slot::take(&self.open) else {
                    return Err(call);
                };
                // Within the attempt's time, so that a dial cut short is known unsent.
                let by = deadline.min(Instant::now() + CONNECT_TIMEOUT);
                match self.open(address, slot, by).await {
                    Ok(lane) => lane,
                    Err(OpenError::Unsupported) => {
                        self.to_grpc();
                        return Err(call);
                    }
                    Err(OpenError::Unreachable(e)) => return Ok(Err(never_sent(address, e))),
                }
            }
        };
        let id = call.id;
        let frame = call.encode_to_vec();
        // A call that fails or is given up mid-way may have met a node that is gone or cut
        // off: its other idle lanes go too, or each would cost a later call an attempt.
        let mut in_call = InCall {
            lanes: self,
            done: false,
        };
        let mut lane = lane;
        let answered = lane.call(&frame).await;
        in_call.done = answered.is_ok();
        Ok(match answered {
            Ok(pb::BatchAnswer {
                id: answered_id,
                answer: Some(answer),
            }) if answered_id == id => {
                self.put_back(lane);
                match answer {
                    pb::batch_answer::Answer::Error(e) => Err(refusal(e)),
                    answer => Ok(answer),
                }
            }
            // Not this call's answer: the lane is not used again.
            Ok(_) => Err(Status::internal(format!(
                "the node at {address} answered a lane's call with another call's answer"
            ))),
            Err(e) => Err(Status::unavailable(format!(
                "the connection to {address} failed: {e}"
            ))),
        })
    }

    /// A lane to `address` (every address it resolves to, in turn), greeted by `deadline`.
    async fn open(&self, address: &str, slot: Slot, deadline: Instant) -> Result<Lane, OpenError> {
        let connect = async {
            let mut last = io::Error::other(format!("{address} resolves to no address"));
            for to in tokio::net::lookup_host(address).await? {
                match self.connect(to).await {
                    Ok(tcp) => return Ok(tcp),
                    Err(e) => last = e,
                }
            }
            Err(last)
        };
        let mut tcp = match tokio::time::timeout_at(deadline, connect).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => return Err(OpenError::Unreachable(e)),
            Err(_) => return Err(OpenError::Unreachable(io::ErrorKind::TimedOut.into())),
        };
        let greet = async {
            tcp.write_all(CLIENT_GREETING).await?;
            let mut answer = [0; CLIENT_GREETING.len()];
            tcp.read_exact(&mut answer).await?;
            Ok::<_, io::Error>(answer == *CLIENT_GREETING)
        };
        match tokio::time::timeout_at(deadline, greet).await {
            Ok(Ok(true)) => Ok(Lane {
                io: BufReader::new(tcp),
                _slot: slot,
            }),
            // Answered otherwise, closed or reset at the greeting: a server that speaks only
            // gRPC (HTTP/2 refuses the greeting as a preface), or a proxy of HTTP/2 only.
            Ok(Ok(false)) | Ok(Err(_)) => Err(OpenError::Unsupported),
            // Silent: a node paused or cut off (or a server waiting for more): unsent, and
            // gRPC gets the next calls, as for a node that answered otherwise.
            Err(_) => {
                self.to_grpc();
                Err(OpenError::Unreachable(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer to the lane's greeting",
                )))
            }
        }
    }

    async fn connect(&self, to: SocketAddr) -> io::Result<TcpStream> {
        let socket = match to {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        if let Some(ip) = self.local_ip {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        socket.set_nodelay(true)?;
        socket.connect(to).await
    }
}

/// A lane call under way: unless it ends with an answer, the node's idle lanes are dropped.
struct InCall<'a> {
    lanes: &'a Lanes,
    done: bool,
}

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.lanes.pool().idle.clear();
        }
    }
}

/// A failed connect as tonic reports one (a `ConnectError` in the status's source chain), so
/// that the call knows this attempt's write was never sent.
fn never_sent(address: &str, e: io::Error) -> Status {
    let mut status = Status::unavailable(format!("cannot reach {address}: {e}"));
    status.set_source(Arc::new(tonic::ConnectError(Box::new(e))));
    status
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use std::time::Duration;

    use super::*;
    use crate::fake::Reply;
    use crate::{LeaseClient, Written};

    /// What a lane-only node saw: the calls in order, and how many lanes it has closed.
    #[derive(Default)]
    struct Seen {
        calls: Mutex<Vec<pb::BatchCall>>,
        closed: std::sync::atomic::AtomicUsize,
    }

    /// A node that speaks only lanes (no gRPC at all): it answers `Register` and `Put`, each
    /// lane for `per_lane` calls before it closes it.
    async fn lane_only_node(per_lane: usize) -> (String, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Seen::default());
        let all = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut tcp, _) = listener.accept().await.unwrap();
                let seen = all.clone();
                tokio::spawn(async move {
                    let mut greeting = [0; 8];
                    tcp.read_exact(&mut greeting).await.unwrap();
                    assert_eq!(&greeting, CLIENT_GREETING);
                    tcp.write_all(CLIENT_GREETING).await.unwrap();
                    for _ in 0..per_lane {
                        let Some(body) = read_frame(&mut tcp, MAX_CALL_BYTES).await.unwrap() else {
                            return;
                        };
                        use pb::batch_answer::Answer;
                        use pb::batch_call::Request;
                        let call = pb::BatchCall::decode(body.as_slice()).unwrap();
                        let answer = match &call.request {
                            Some(Request::Register(_)) => Answer::Register(pb::RegisterResponse {
                                client_id: 7,
                                applied: None,
                            }),
                            Some(Request::Put(_)) => Answer::Put(pb::PutResponse {
                                applied: None,
                                outcome: Some(pb::put_response::Outcome::Written(pb::Written {})),
                            }),
                            other => panic!("{other:?}"),
                        };
                        let answer = pb::BatchAnswer {
                            id: call.id,
                            answer: Some(answer),
                        };
                        seen.calls.lock().unwrap().push(call);
                        write_frame(&mut tcp, &answer.encode_to_vec(), usize::MAX)
                            .await
                            .unwrap();
                    }
                    drop(tcp);
                    seen.closed
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        (address, seen)
    }

    #[tokio::test]
    async fn a_client_calls_a_node_that_answers_the_greeting_on_a_lane() {
        let (address, seen) = lane_only_node(usize::MAX).await;
        let client = LeaseClient::new(&[&address]).unwrap();
        for _ in 0..3 {
            let put = client.put("k", b"v", None).await.unwrap();
            assert_eq!(put.outcome, Written::Written);
        }
        use pb::batch_call::Request;
        let calls = seen.calls.lock().unwrap();
        let register = matches!(calls[0].request, Some(Request::Register(_)));
        assert!(register, "{calls:?}");
        let Some(Request::Put(put)) = calls[1].request.clone() else {
            panic!("{calls:?}");
        };
        assert_eq!(calls.len(), 4, "{calls:?}");
        // The attempt's deadline travels with the call.
        assert!(calls[1].timeout_ms > 0, "{calls:?}");
        assert_eq!((put.key.as_str(), put.value.as_slice()), ("k", &b"v"[..]));
        assert_eq!(put.request_id.map(|id| id.client_id), Some(7));
    }

    #[tokio::test]
    async fn a_lane_its_node_closed_while_idle_is_not_used_again() {
        // The node closes every lane after one call: a client that took the closed lane for
        // its next call would lose that call's attempt (and, for a write, leave it in doubt
        // until a retry settled it).
        let (address, seen) = lane_only_node(1).await;
        let lanes = Lanes::new(Some(&address), None);
        let register = || async {
            let within = Instant::now() + Duration::from_secs(5);
            let call = pb::BatchCall {
                id: 1,
                timeout_ms: 5_000,
                request: Some(pb::batch_call::Request::Register(pb::RegisterRequest {})),
            };
            match lanes.call(call, within).await {
                Ok(Ok(pb::batch_answer::Answer::Register(r))) => r.client_id,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(register().await, 7);
        let closed = || seen.closed.load(std::sync::atomic::Ordering::SeqCst) == 1;
        while !closed() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // On loopback the close has arrived once the node's `close` returned.
        assert!(matches!(lanes.take(), Ok(None)), "the closed lane was kept");
        assert_eq!(register().await, 7);
        assert_eq!(seen.calls.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_client_holds_at_most_max_lanes_to_a_node_and_their_slots_come_back() {
        let open = Arc::default();
        let mut slots: Vec<_> = (0..MAX_LANES).map(|_| Slot::take(&open).unwrap()).collect();
        assert!(
            Slot::take(&open).is_none(),
            "a call past the limit goes on the Batch stream"
        );
        slots.pop();
        assert!(
            Slot::take(&open).is_some(),
            "a closed lane's slot is free again"
        );
    }

    #[tokio::test]
    async fn a_node_that_speaks_only_grpc_is_called_over_grpc() {
        // tonic's HTTP/2 server, given the greeting for a preface, refuses it: the client
        // speaks gRPC to it from then on (its Batch stream), and its calls succeed.
        let (_node, client) = crate::fake::fake_node(vec![Reply::Answer, Reply::Answer]).await;
        for _ in 0..2 {
            let put = client.put("k", b"v", None).await.unwrap();
            assert_eq!(put.outcome, Written::Written);
        }
        let lanes = &client.lanes[0];
        assert!(lanes.take().is_err(), "the node is called over gRPC");
    }

    #[tokio::test]
    async fn a_lane_dials_the_host_and_port_grpc_would() {
        let endpoints = [
            "127.0.0.1:7001",
            "http://node",
            "https://[::1]:7002/",
            "node:7003",
        ];
        let client = LeaseClient::new(&endpoints).unwrap();
        let addresses: Vec<_> = client.lanes.iter().map(|l| l.address.clone()).collect();
        let want = ["127.0.0.1:7001", "node:80", "[::1]:7002", "node:7003"];
        assert_eq!(addresses, want.map(|a| Some(a.to_owned())));
        // Over TLS, none: a lane is plain TCP.
        let tls = client.with_tls(crate::ClientTlsConfig::new()).unwrap();
        assert!(tls.lanes.iter().all(|l| l.address.is_none()));
    }
}
