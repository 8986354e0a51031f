//! The two planes a node serves, on listeners bound before the node serves or forms its
//! cluster: the client plane (the lease API, the cluster API, health, reflection) and the peer plane (Raft, forwarded
//! writes and reads, each node's status, behind the peer gate), each with TLS or without. Either
//! plane's server ending stops both.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::Router;

use super::api::{Api, Plane};
use super::client_lanes::ClientLaneServer;
use super::etcd::EtcdService;
use super::grpc::{ClusterService, LeaseService};
use super::http;
use super::lanes::LaneServer;
use super::peer::gate::{ForwardedOnly, PeerGate};
use super::peer::raft_service::RaftService;
use super::{Node, NodeConfig, StartError};
use crate::connections::{self, Connections, Greeted};
use crate::limits::{CLIENT_PING_INTERVAL, CLIENT_PING_TIMEOUT, MAX_PEER_MESSAGE_BYTES};
use crate::proto::raft_v1::raft_server::RaftServer;
use crate::tls::RefusalLog;

use crate::connections::KEEPALIVE;

/// The sockets a node serves on: bound by [`Listeners::bind`] from its config, or by whoever
/// starts it ([`super::run_on`]), so that a test binds port 0 and knows the port it got.
pub struct Listeners {
    /// The client plane: the lease API, the cluster API, health, reflection.
    pub client: TcpListener,
    /// The peer plane: Raft, forwarded writes and reads, behind the peer gate.
    pub peer: TcpListener,
    /// `/metrics`, `/healthz` and `/readyz`, if asked for.
    pub metrics: Option<TcpListener>,
    /// The client API over HTTP and JSON, if asked for.
    pub http: Option<TcpListener>,
}

impl Listeners {
    /// Binds every address `config` names. A taken port is the commonest start-up error, so
    /// `run` binds before it opens the storage or forms its cluster.
    pub async fn bind(config: &NodeConfig) -> Result<Self, StartError> {
        Ok(Listeners {
            client: bind(config.listen).await?,
            peer: bind(config.peer_listen).await?,
            metrics: bind_if_asked(config.metrics_listen).await?,
            http: bind_if_asked(config.http_listen).await?,
        })
    }
}

async fn bind_if_asked(
    addr: Option<std::net::SocketAddr>,
) -> Result<Option<TcpListener>, StartError> {
    match addr {
        Some(addr) => bind(addr).await.map(Some),
        None => Ok(None),
    }
}

async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Listen {
            addr: addr.to_string(),
            error,
        })
}

/// The servers' stop, set once: by a shutdown, a fatal Raft error, or either plane ending.
#[derive(Clone)]
pub(super) struct Stop {
    tx: watch::Sender<bool>,
    rx: watch::Receiver<bool>,
}

impl Stop {
    pub(super) fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Stop { tx, rx }
    }

    pub(super) fn stop(&self) {
        let _ = self.tx.send(true);
    }

    /// Set once the node stops (for the lease service's streams to end).
    pub(super) fn stopping(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Returns once the node stops.
    pub(super) fn until_stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.rx.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    }
}

/// The server TLS of the client plane and of the peer plane (which demands certificates).
pub(super) type PlanesTls = (Arc<rustls::ServerConfig>, Arc<rustls::ServerConfig>);

// No HTTP/2 keepalive on the servers: with it on, the leader's AppendEntries to followers timed
// out hundreds of times a minute and put throughput fell by 12 to 20 % (p99 two to three times
// higher) on this machine. Peers' channels ping the server from their side, and TCP keepalive
// ([`KEEPALIVE`]) drops connections whose other end died.

/// The client plane: the lease API (counted in `metrics`), the cluster API, `health` and
/// reflection of the public API, in both versions (grpcurl and older tools still ask v1alpha);
/// and the client lanes' server, answering with the same lease API until `stop`.
pub(super) fn client_plane(
    api: &Api,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    stop: &Stop,
) -> Result<(Router, ClientLaneServer), StartError> {
    let lease = Arc::new(LeaseService::new(api.lease.clone(), Plane::Client));
    let lanes = ClientLaneServer {
        lease: api.lease.clone(),
        stopping: stop.stopping(),
    };
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let refused = |e: tonic_reflection::server::Error| StartError::Config(e.to_string());
    let etcd = EtcdService::new(api.etcd.clone(), Plane::Client).servers();
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(CLIENT_PING_INTERVAL))
        .http2_keepalive_timeout(Some(CLIENT_PING_TIMEOUT))
        .add_service(LeaseService::server(lease))
        .add_service(ClusterService::server(api.cluster.clone(), Plane::Client))
        .add_service(etcd.kv)
        .add_service(etcd.lease)
        .add_service(etcd.watch)
        .add_service(etcd.cluster)
        .add_service(etcd.maintenance)
        .add_service(etcd.auth)
        .add_service(etcd.lock)
        .add_service(etcd.election)
        .add_service(health)
        .add_service(reflection().build_v1().map_err(refused)?)
        .add_service(reflection().build_v1alpha().map_err(refused)?);
    Ok((router, lanes))
}

/// Serves the client API over HTTP and JSON on `listener` (TLS as the client plane has it,
/// speaking HTTP/1.1) until `stop`.
pub(super) fn serve_http(
    listener: TcpListener,
    api: Api,
    stop: &Stop,
    tls: Option<&PlanesTls>,
    refusals: RefusalLog,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let until = stop.until_stopped();
    let connections = Connections::new("http", connections::listener_bound());
    match tls {
        Some((client_tls, _)) => {
            let mut config = (**client_tls).clone();
            config.alpn_protocols = vec![leasehold_proto::wire::HTTP_ALPN.to_vec()];
            let config = Arc::new(config);
            let incoming = crate::tls::incoming(listener, config, connections, refusals, KEEPALIVE);
            tokio::spawn(http::serve(http::Tls(incoming), api, until))
        }
        None => {
            let plain = http::Plain {
                listener,
                connections,
                keepalive: KEEPALIVE,
            };
            tokio::spawn(http::serve(plain, api, until))
        }
    }
}

/// The peer plane: Raft, forwarded writes and log read-back; the lease API for reads a follower
/// forwards to the leader; and each node's own status for `Status`, which asks every member over
/// this plane. Every call passes the `gate` first.
pub(super) fn peer_router(
    node: &Node,
    raft: Arc<RaftService>,
    gate: PeerGate,
    stop: &Stop,
) -> Router {
    let api = Api::peer(node, stop.stopping());
    let etcd = EtcdService::new(api.etcd, Plane::Peer).servers();
    tonic::transport::Server::builder()
        .add_service(InterceptedService::new(
            RaftServer::from_arc(raft)
                .max_decoding_message_size(MAX_PEER_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_PEER_MESSAGE_BYTES),
            gate.clone(),
        ))
        .add_service(InterceptedService::new(
            LeaseService::server(Arc::new(LeaseService::new(api.lease, Plane::Peer))),
            ForwardedOnly(gate.clone()),
        ))
        .add_service(InterceptedService::new(
            ClusterService::server(api.cluster, Plane::Peer),
            gate.clone(),
        ))
        // etcd's reads a follower forwards to the leader.
        .add_service(InterceptedService::new(
            etcd.kv,
            ForwardedOnly(gate.clone()),
        ))
        .add_service(InterceptedService::new(etcd.lease, ForwardedOnly(gate)))
}

type ServerFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;

/// Serves `client` on `client_listener` and `peer` on `peer_listener`, with `tls` or without,
/// until `stop`; either ending stops the other. The task's result is both servers'. Lanes
/// share each port with gRPC: the peer's always, the client's without TLS (a client over TLS
/// speaks gRPC).
pub(super) fn serve(
    (client, client_listener, client_lanes): (Router, TcpListener, ClientLaneServer),
    (peer, peer_listener, lanes): (Router, TcpListener, LaneServer),
    tls: Option<PlanesTls>,
    refusals: RefusalLog,
    stop: Stop,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    let bound = connections::listener_bound();
    let (client, peer): (ServerFuture, ServerFuture) = match tls {
        Some((client_tls, peer_tls)) => (
            Box::pin(
                client.serve_with_incoming_shutdown(
                    crate::tls::incoming(
                        client_listener,
                        client_tls,
                        Connections::new("client", bound),
                        refusals.clone(),
                        KEEPALIVE,
                    )
                    .map(|tls| tls.map(Greeted::new)),
                    stop.until_stopped(),
                ),
            ),
            Box::pin(peer.serve_with_incoming_shutdown(
                lanes.split_tls(crate::tls::incoming(
                    peer_listener,
                    with_lane_alpn(&peer_tls),
                    Connections::new("peer", bound),
                    refusals,
                    KEEPALIVE,
                )),
                stop.until_stopped(),
            )),
        ),
        None => (
            Box::pin(
                client.serve_with_incoming_shutdown(
                    client_lanes
                        .split_plain(
                            client_listener,
                            Connections::new("client", bound),
                            KEEPALIVE,
                        )
                        .map(|tcp| tcp.map(Greeted::new)),
                    stop.until_stopped(),
                ),
            ),
            Box::pin(peer.serve_with_incoming_shutdown(
                lanes.split_plain(peer_listener, Connections::new("peer", bound), KEEPALIVE),
                stop.until_stopped(),
            )),
        ),
    };
    tokio::spawn(async move {
        let (client, peer) = tokio::join!(
            async {
                let served = client.await;
                stop.stop();
                served
            },
            async {
                let served = peer.await;
                stop.stop();
                served
            }
        );
        client.and(peer)
    })
}

/// The peer plane's server TLS, offering a lane's ALPN protocol beside HTTP/2's.
fn with_lane_alpn(peer_tls: &Arc<rustls::ServerConfig>) -> Arc<rustls::ServerConfig> {
    let mut config = (**peer_tls).clone();
    config.alpn_protocols.push(crate::raft::lane::ALPN.to_vec());
    Arc::new(config)
}
