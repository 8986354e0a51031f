//! Who is asking, and the node's side of authorization. The decisions are the policy's, in the
//! replicated state (`leasehold_core::auth`): writes are decided where they apply, reads and admin
//! calls in the same linearizable read that answers them. This file finds the identity a
//! request carries, logs refusals at a bounded rate, and, on a cluster created with an admin,
//! turns the policy on before the cluster serves anyone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::{Ascii, MetadataValue};
use tonic::{Request, Status};

use super::peer_gate::PeerMember;
use super::{Node, NodeError};
use crate::limits::{DENIALS_LOGGED_PER_MINUTE, TICK_CHECK};
use crate::raft::state_machine::Applying;
use crate::raft::Applied;
use leasehold_core::auth::{Action, AuthChange, Policy};
use leasehold_core::{Limits, Op};

/// The identity a follower read from the certificate of a request it forwards to the leader.
/// Believed on the peer plane only, where the gate has let members alone through.
pub const IDENTITY_KEY: &str = "leasehold-identity";

/// Which plane a service answers on, and so where a request's identity comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    /// From the client's certificate, or its bearer token; none without either.
    Client,
    /// From [`IDENTITY_KEY`] and [`BEARER_KEY`], set by the member that forwarded the request.
    Peer,
}

/// Who is asking: the identity its certificate or bearer token gives it (`None`: neither),
/// and, when a token gave it, the token's SHA-256, checked again wherever the request is
/// decided (at apply for a write, on the leader for a read), so that a revocation holds from
/// its log index on even when this node had not applied it yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    identity: Option<String>,
    bearer: Option<String>,
}

impl Caller {
    /// The caller of `request`: the first DNS name of the client certificate (what `leasehold
    /// certs --client NAME` puts there); without one, the identity of the bearer token it
    /// sends; for a request a member forwarded, the caller that member found. A token this
    /// node does not know, or one sent without TLS, is refused.
    pub fn of<T>(node: &Node, request: &Request<T>, plane: Plane) -> Result<Caller, NodeError> {
        if plane == Plane::Peer {
            // Believed only from a member the gate let through (with TLS): without TLS, anyone
            // reaches the peer plane, and no caller has an identity anyway.
            if request.extensions().get::<PeerMember>().is_none() {
                return Ok(Caller::default());
            }
            let found = |key| {
                let value = request.metadata().get(key)?.to_str().ok()?;
                (value.len() <= Limits::MAX_NAME_BYTES).then(|| value.to_owned())
            };
            return Ok(Caller {
                identity: found(IDENTITY_KEY),
                bearer: found(BEARER_KEY),
            });
        }
        let certs = request.peer_certs();
        let first = certs.as_deref().and_then(|c| c.first());
        if let Some(name) = first.and_then(certificate_name) {
            return Ok(Caller {
                identity: Some(name),
                bearer: None,
            });
        }
        match request.metadata().get(AUTHORIZATION_KEY) {
            Some(header) => bearer(node, header),
            None => Ok(Caller::default()),
        }
    }

    /// The identity, if the caller has one.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// Whether `policy` lets the caller do `action`.
    pub fn may(&self, policy: &Policy, action: &Action) -> Result<(), NodeError> {
        policy
            .check_caller(self.identity(), self.bearer.as_deref(), action)
            .map_err(NodeError::Denied)
    }

    /// `op` as the log carries it for this caller: inside [`Op::As`], or bare for a caller
    /// without an identity (which the policy, when on, denies).
    pub fn log(self, op: Op) -> Op {
        match self.identity {
            Some(identity) => Op::As {
                identity,
                bearer: self.bearer,
                op: Box::new(op),
            },
            None => op,
        }
    }

    /// Marks a request this node forwards with the caller it found.
    pub fn carry<T>(&self, request: &mut Request<T>) {
        for (key, value) in [(IDENTITY_KEY, &self.identity), (BEARER_KEY, &self.bearer)] {
            if let Some(value) = value
                .as_deref()
                .and_then(|v| MetadataValue::try_from(v).ok())
            {
                request.metadata_mut().insert(key, value);
            }
        }
    }
}

/// The SHA-256 of the bearer token that gave a forwarded request's identity, beside
/// [`IDENTITY_KEY`].
pub const BEARER_KEY: &str = "leasehold-bearer-sha256";

/// Where a client without a certificate sends its bearer token: `authorization: Bearer TOKEN`.
const AUTHORIZATION_KEY: &str = "authorization";

/// The caller whose bearer token `header` carries.
fn bearer(node: &Node, header: &MetadataValue<Ascii>) -> Result<Caller, NodeError> {
    if !node.tls() {
        return Err(NodeError::Unauthenticated(
            "a bearer token is accepted over TLS only, and this node serves without it: the \
             token may have been seen on the way, so revoke it (`leasehold auth token revoke`)",
        ));
    }
    let token = header.to_str().ok().and_then(|v| v.strip_prefix("Bearer "));
    let token = token.ok_or(NodeError::Unauthenticated(
        "the authorization header is not `Bearer TOKEN`",
    ))?;
    let sha256 = crate::tls::bearer::sha256(token);
    let identity = node
        .state()
        .read()
        .table
        .policy()
        .token_identity(&sha256)
        .map(str::to_owned);
    match identity {
        Some(identity) => Ok(Caller {
            identity: Some(identity),
            bearer: Some(sha256),
        }),
        // A token added a moment ago may not be applied here yet: the leader, which applied
        // it before the addition was acknowledged, has the last word.
        None if !node.is_leader() => Err(NodeError::TokenUnknownHere(node.id())),
        None => Err(NodeError::Unauthenticated(
            "this bearer token is not known: it was revoked, or never added (`leasehold auth \
             token add IDENTITY`)",
        )),
    }
}

/// The name a certificate gives its holder: its first DNS name.
fn certificate_name(cert: &rustls::pki_types::CertificateDer<'_>) -> Option<String> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    let name = cert.valid_dns_names().next().map(str::to_owned);
    name
}

/// An admin call's check, and what it reads: a linearizable read on the leader that checks the
/// policy and, if the caller may, reads with `read` under the same state lock, so that a
/// revoked admin is refused from the revocation's index on.
pub async fn admin_read<T>(
    node: &Node,
    caller: &Caller,
    what: &'static str,
    read: impl FnOnce(&Applying) -> T,
) -> Result<(T, Applied), Status> {
    let admin = Action::Admin(what);
    let (read, at) = node
        .read(|s| caller.may(s.table.policy(), &admin).map(|()| read(s)))
        .await?;
    Ok((read?, at))
}

/// Logs refusals, at most [`DENIALS_LOGGED_PER_MINUTE`] a minute, so that a client looping on
/// a denied call cannot flood the log; the rest are counted in the metrics only.
#[derive(Clone)]
pub struct DenialLog {
    since: Arc<std::sync::Mutex<Instant>>,
    logged: Arc<AtomicU64>,
}

impl Default for DenialLog {
    fn default() -> Self {
        DenialLog {
            since: Arc::new(std::sync::Mutex::new(Instant::now())),
            logged: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl DenialLog {
    pub fn denied(&self, rpc: &str, message: &str) {
        {
            let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
            if since.elapsed() >= Duration::from_secs(60) {
                *since = Instant::now();
                self.logged.store(0, Ordering::Relaxed);
            }
        }
        if self.logged.fetch_add(1, Ordering::Relaxed) < DENIALS_LOGGED_PER_MINUTE {
            tracing::warn!(rpc, refusal = message, "permission denied");
        }
    }
}

/// Whether the policy has been set up, as the node's edge waits for it on a cluster created
/// with an admin. Cached once true: a policy never goes back to never having been set.
#[derive(Clone, Default)]
pub struct SetUp(Arc<AtomicBool>);

impl SetUp {
    /// Refuses the request while this node was started with an admin and the policy it applied
    /// was never turned on: the cluster was just created, and serving before the policy is on
    /// would let anyone in (a policy change too: one would make the policy look set up).
    pub fn check(&self, node: &Node) -> Result<(), NodeError> {
        if node.auth_admin().is_none() || self.0.load(Ordering::Relaxed) {
            return Ok(());
        }
        if !node.state().read().table.policy().was_enabled() {
            return Err(NodeError::AuthSettingUp);
        }
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// On a cluster created with `admin`: while this node leads and the policy was never turned
/// on, logs [`AuthChange::Enable`] with that admin. Ends once it was (by this node, or any
/// other started with an admin): an admin may turn it off later, and it stays off. Runs until
/// then, or until aborted.
pub async fn set_up(node: Node, admin: String) {
    loop {
        if node.state().read().table.policy().was_enabled() {
            return;
        }
        if node.is_leader() {
            let enable = Op::Auth(AuthChange::Enable {
                admin: admin.clone(),
            });
            match node.write(enable, None).await {
                Ok(applied) => {
                    tracing::info!(admin, outcome = ?applied.outcome, "authorization turned on")
                }
                Err(e) => tracing::debug!(error = %e, "authorization not turned on yet"),
            }
        }
        tokio::time::sleep(TICK_CHECK).await;
    }
}
