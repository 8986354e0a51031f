//! Who is asking, and the node's side of authorization. The decisions are the policy's, in the
//! replicated state (`leasehold_core::auth`): writes are decided where they apply, reads and admin
//! calls in the same linearizable read that answers them. This file finds the identity the
//! credentials a transport found give (`Credentials`), logs refusals at a bounded rate, and, on
//! a cluster created with an admin, turns the policy on before the cluster serves anyone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::limits::{DENIALS_LOGGED_PER_MINUTE, TICK_CHECK};
use crate::node::link::OnBehalf;
use crate::node::{Node, NodeError, Reading};
use crate::raft::Applied;
use leasehold_core::auth::{Action, AuthChange, Permission, Policy};
use leasehold_core::{Limits, Op};

/// What a transport found of who is asking, before the node checks it.
#[derive(Clone, Debug, Default)]
pub enum Credentials {
    /// A client: the first DNS name of the certificate it showed (what `leasehold certs
    /// --client NAME` puts there), and the `authorization` header it sent (`Bearer TOKEN`).
    Client {
        certificate: Option<String>,
        authorization: Option<String>,
    },
    /// A member the peer gate let through (with TLS), forwarding a request: the caller it
    /// found, believed as that member says.
    Member {
        identity: Option<String>,
        bearer: Option<String>,
    },
    /// Nobody in particular: a peer-plane caller without TLS, where anyone reaches the plane
    /// and no caller has an identity anyway.
    #[default]
    Anonymous,
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
    /// The caller `credentials` name: the client certificate's name; without one, the
    /// identity of the bearer token sent; for a request a member forwarded, the caller that
    /// member found. A token this node does not know, or one sent without TLS, is refused.
    pub fn of(node: &Node, credentials: &Credentials) -> Result<Caller, NodeError> {
        let (certificate, authorization) = match credentials {
            Credentials::Anonymous => return Ok(Caller::default()),
            Credentials::Member { identity, bearer } => {
                let believed = |v: &Option<String>| {
                    v.as_ref()
                        .filter(|v| v.len() <= Limits::MAX_NAME_BYTES)
                        .cloned()
                };
                return Ok(Caller {
                    identity: believed(identity),
                    bearer: believed(bearer),
                });
            }
            Credentials::Client {
                certificate,
                authorization,
            } => (certificate, authorization),
        };
        if let Some(name) = certificate {
            return Ok(Caller {
                identity: Some(name.clone()),
                bearer: None,
            });
        }
        if node.client_certificates() {
            return Err(NodeError::Unauthenticated(
                "this node demands a client certificate (serve --client-cert-auth): show one \
                 from the cluster's CA (--tls-cert and --tls-key, or LEASEHOLD_TLS_CERT and \
                 LEASEHOLD_TLS_KEY); a bearer token alone is not taken here",
            ));
        }
        match authorization {
            Some(header) => bearer(node, header),
            None => Ok(Caller::default()),
        }
    }

    /// What a member forwarding this caller's request says of it (`Credentials::Member` there).
    pub fn on_behalf(&self) -> OnBehalf {
        OnBehalf {
            identity: self.identity.clone(),
            bearer: self.bearer.clone(),
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

    /// Where the policy lets this caller do `permission`: its grants' prefixes, or `None`
    /// for everywhere.
    pub fn prefixes(&self, policy: &Policy, permission: Permission) -> Option<Vec<String>> {
        policy.prefixes(self.identity(), self.bearer.as_deref(), permission)
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
}

/// The caller whose bearer token `header` (the `authorization` a client sent) carries.
fn bearer(node: &Node, header: &str) -> Result<Caller, NodeError> {
    if !node.tls() {
        return Err(NodeError::Unauthenticated(
            "a bearer token is accepted over TLS only, and this node serves without it: the \
             token may have been seen on the way, so revoke it (`leasehold auth token revoke`)",
        ));
    }
    let token = header.strip_prefix("Bearer ");
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

/// An admin call's check, and what it reads: a linearizable read on the leader that checks the
/// policy and, if the caller may, reads with `read` under the same state lock, so that a
/// revoked admin is refused from the revocation's index on.
pub async fn admin_read<T>(
    node: &Node,
    caller: &Caller,
    what: &'static str,
    read: impl FnOnce(&Reading) -> T,
) -> Result<(T, Applied), NodeError> {
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

/// The name a client certificate gives its holder: its first DNS name.
pub fn certificate_name(cert: &rustls::pki_types::CertificateDer<'_>) -> Option<String> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    let name = cert.valid_dns_names().next().map(str::to_owned);
    name
}
