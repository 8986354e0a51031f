//! Who is asking, and the node's side of authorization. The decisions are the policy's, in the
//! replicated state (`leasehold_core::auth`): writes are decided where they apply, reads and admin
//! calls in the same linearizable read that answers them. This file finds the identity a
//! request carries, logs refusals at a bounded rate, and, on a cluster created with an admin,
//! turns the policy on before the cluster serves anyone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use super::{Node, NodeError};
use crate::limits::{DENIALS_LOGGED_PER_MINUTE, TICK_CHECK};
use leasehold_core::auth::{Action, AuthChange, Policy};
use leasehold_core::{Limits, Op};

/// The identity a follower read from the certificate of a request it forwards to the leader.
/// Believed on the peer plane only, where the gate has let members alone through.
pub const IDENTITY_KEY: &str = "leasehold-identity";

/// Which plane a service answers on, and so where a request's identity comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    /// From the client's certificate; none without one.
    Client,
    /// From [`IDENTITY_KEY`], set by the member that forwarded the request.
    Peer,
}

/// The identity `request` carries: the first DNS name of the client certificate (what
/// `leasehold certs --client NAME` puts there), or, for a request a member forwarded, the one
/// it read. `None` for a client without a certificate.
pub fn identity<T>(request: &Request<T>, plane: Plane) -> Option<String> {
    match plane {
        Plane::Client => {
            let certs = request.peer_certs()?;
            certificate_name(certs.first()?)
        }
        Plane::Peer => {
            let value = request.metadata().get(IDENTITY_KEY)?.to_str().ok()?;
            (value.len() <= Limits::MAX_NAME_BYTES).then(|| value.to_owned())
        }
    }
}

/// The name a certificate gives its holder: its first DNS name.
fn certificate_name(cert: &rustls::pki_types::CertificateDer<'_>) -> Option<String> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    let name = cert.valid_dns_names().next().map(str::to_owned);
    name
}

/// Marks a forwarded request with the identity its client showed here.
pub fn carry<T>(request: &mut Request<T>, identity: Option<&str>) {
    if let Some(value) = identity.and_then(|i| MetadataValue::try_from(i).ok()) {
        request.metadata_mut().insert(IDENTITY_KEY, value);
    }
}

/// `op` as the log carries it for `identity`: inside [`Op::As`], or bare for a client without
/// one (which the policy, when on, denies).
pub fn as_identity(identity: Option<String>, op: Op) -> Op {
    match identity {
        Some(identity) => Op::As {
            identity,
            op: Box::new(op),
        },
        None => op,
    }
}

/// Whether `identity` may do `action` by `policy`, as a node error.
pub fn allowed(policy: &Policy, identity: Option<&str>, action: &Action) -> Result<(), NodeError> {
    policy.check(identity, action).map_err(NodeError::Denied)
}

/// An admin call's check: a linearizable read of the policy on the leader, so that a revoked
/// admin is refused from the revocation's index on.
pub async fn admin(node: &Node, identity: Option<&str>, what: &'static str) -> Result<(), Status> {
    let (checked, _) = node
        .read(|s| allowed(s.table.policy(), identity, &Action::Admin(what)))
        .await?;
    Ok(checked?)
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
