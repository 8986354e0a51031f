//! The peer plane's gate. With TLS on, rustls has already checked that the caller's
//! certificate chains to the cluster's CA; the gate lets the call through only if that
//! certificate names another member of this cluster, so that a client's certificate, or one made
//! for a node of another cluster by the same CA, cannot send Raft messages. It runs before the
//! message is decoded. Without TLS it lets everything through: the peer plane is then as safe
//! as the network it listens on. It leaves the member it let through on the request
//! ([`PeerMember`]): a member's Raft message that claims another sender is refused too, so a
//! node whose key leaked cannot vote or lead as another.

use std::net::SocketAddr;
use std::sync::Arc;

use leasehold_proto::wire;
use rustls::pki_types::CertificateDer;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::tls::{member_named, node_name, RefusalLog};
use crate::NodeId;

/// The member a caller's certificate names, left on the request for the handlers, which check
/// that a Raft message claims no other sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerMember(pub NodeId);

/// The cluster's members now (voters and learners), as the node knows them.
pub type Members = Arc<dyn Fn() -> Vec<NodeId> + Send + Sync>;

#[derive(Clone)]
pub struct PeerGate {
    me: NodeId,
    /// The members whose certificates are let through: every member but this node, looked up
    /// on each call, so that a member added or removed is let in or kept out at once.
    members: Members,
    tls: bool,
    refusals: RefusalLog,
}

impl PeerGate {
    pub fn new(me: NodeId, members: Members, tls: bool, refusals: RefusalLog) -> Self {
        PeerGate {
            me,
            members,
            tls,
            refusals,
        }
    }

    /// The other members; none while this node knows no membership (started with `--join`,
    /// not yet added), when any node certificate of the cluster's CA is let in: the leader that
    /// adds it may be any node.
    fn others(&self) -> Vec<NodeId> {
        (self.members)()
            .into_iter()
            .filter(|id| *id != self.me)
            .collect()
    }

    /// The member `cert` names, among `others`; with no others, any node but this one.
    fn admitted(
        &self,
        cert: &rustls::pki_types::CertificateDer<'_>,
        others: &[NodeId],
    ) -> Option<NodeId> {
        if others.is_empty() {
            return crate::tls::node_named(cert).filter(|id| *id != self.me);
        }
        member_named(cert, others.iter().copied())
    }

    /// The member a caller that showed `certs` (from `from`) is, with TLS on; refused if it is
    /// none. Without TLS, no member and no refusal.
    pub(crate) fn admit(
        &self,
        certs: Option<&[CertificateDer<'_>]>,
        from: Option<SocketAddr>,
    ) -> Result<Option<PeerMember>, Status> {
        if !self.tls {
            return Ok(None);
        }
        let others = self.others();
        let reason = match certs.and_then(|certs| certs.first()) {
            None => "the caller showed no certificate".to_owned(),
            Some(cert) => match self.admitted(cert, &others) {
                Some(member) => return Ok(Some(PeerMember(member))),
                None => format!(
                    "the caller's certificate names no other member of this cluster (one of {})",
                    others
                        .iter()
                        .map(|id| node_name(*id))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        };
        self.refusals.refused("peer", from, &reason);
        Err(crate::node::NodeError::Forbidden(reason).into())
    }
}

/// The gate, for the services a member calls on a peer port only to forward its clients' reads
/// to the leader (`LeaseStore`, etcd's `KV` and `Lease`): a call not marked as forwarded comes
/// from a client that dialed a peer port for a client port, and is told so. Served, it worked
/// on the leader's peer port until the next failover, and on a follower's timed out naming the
/// leader (found in a walkthrough).
#[derive(Clone)]
pub(crate) struct ForwardedOnly(pub(crate) PeerGate);

impl Interceptor for ForwardedOnly {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let request = self.0.call(request)?;
        if request.metadata().get(wire::FORWARDED_KEY).is_none() {
            let why = "this is a peer port, which only the cluster's members call: a client calls \
                       a node's client port (`serve --listen`; `leasehold cluster` prints it as \
                       the node's address, before its peer port)";
            return Err(crate::node::NodeError::Refused(why.into()).into());
        }
        Ok(request)
    }
}

impl Interceptor for PeerGate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let certs = request.peer_certs();
        if let Some(member) =
            self.admit(certs.as_deref().map(Vec::as_slice), request.remote_addr())?
        {
            request.extensions_mut().insert(member);
        }
        Ok(request)
    }
}
