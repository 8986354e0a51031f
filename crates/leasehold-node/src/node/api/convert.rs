//! Applied outcomes to protobuf responses. An outcome that does not belong to its command is a
//! late retry the store refused (`ABORTED`) or a broken invariant (`INTERNAL`), never silently
//! mapped.

use crate::node::NodeError;
use crate::proto::v1 as pb;
use crate::raft::Applied;
use leasehold_core::auth::{AuthChange, Grant, Permission, Policy};
use leasehold_core::{InvalidInput, Name, Outcome, ReleaseRefusal, Renewed};

pub(super) fn applied(a: &Applied) -> Option<pb::Applied> {
    Some(pb::Applied {
        log_index: a.log_index,
        store_time_ms: a.store_time_ms,
        position: a.position,
    })
}

/// An outcome that is not an answer to `command`: a request its session refused, or a broken
/// invariant.
fn mismatch(command: &str, outcome: &Outcome) -> NodeError {
    match outcome {
        Outcome::Forgotten => NodeError::Forgotten,
        Outcome::UnknownSession => NodeError::UnknownSession,
        Outcome::Denied(denied) => NodeError::Denied(denied.as_ref().clone()),
        Outcome::RequestIdReused => NodeError::Invalid(InvalidInput::new(
            "request_id",
            "this sequence number was already used for another operation; every request needs \
             a sequence number of its own",
        )),
        _ => NodeError::Invariant(format!("{command} was answered with {outcome:?}")),
    }
}

/// A fenced put naming a token the lease never handed out is bad input, reported as such.
fn unknown_token(outcome: &Outcome) -> Option<NodeError> {
    match outcome {
        Outcome::UnknownToken {
            lease,
            latest_token,
        } => Some(NodeError::Invalid(InvalidInput::new(
            "token",
            format!(
                "lease {lease:?} never handed out that token (its latest token is {latest_token})"
            ),
        ))),
        _ => None,
    }
}

pub(super) fn acquire(a: Applied) -> Result<pb::AcquireResponse, NodeError> {
    use pb::acquire_response::Outcome as O;
    let outcome = match &a.outcome {
        Outcome::Granted {
            token,
            expires_at_ms,
            renewed,
        } => O::Granted(pb::Granted {
            token: *token,
            expires_at_ms: *expires_at_ms,
            renewed: *renewed,
        }),
        Outcome::HeldBy {
            holder,
            token,
            expires_at_ms,
        } => O::HeldBy(pb::HeldBy {
            holder: holder.to_string(),
            token: *token,
            expires_at_ms: *expires_at_ms,
        }),
        other => return Err(mismatch("acquire", other)),
    };
    Ok(pb::AcquireResponse {
        applied: applied(&a),
        outcome: Some(outcome),
    })
}

/// A release's refusal, or a renewal's of one lease, as the response's `oneof` names it.
fn refused<O>(
    refusal: &ReleaseRefusal,
    not_held: fn(pb::NotHeld) -> O,
    held_by: fn(pb::HeldBy) -> O,
    wrong_token: fn(pb::WrongToken) -> O,
) -> O {
    match refusal {
        ReleaseRefusal::NotHeld => not_held(pb::NotHeld {}),
        ReleaseRefusal::HeldByOther {
            holder,
            token,
            expires_at_ms,
        } => held_by(pb::HeldBy {
            holder: holder.to_string(),
            token: *token,
            expires_at_ms: *expires_at_ms,
        }),
        ReleaseRefusal::WrongToken { current_token } => wrong_token(pb::WrongToken {
            current_token: *current_token,
        }),
    }
}

pub(super) fn release(a: Applied) -> Result<pb::ReleaseResponse, NodeError> {
    use pb::release_response::Outcome as O;
    let outcome = match &a.outcome {
        Outcome::Released { token } => O::Released(pb::Released { token: *token }),
        Outcome::ReleaseRefused(refusal) => refused(refusal, O::NotHeld, O::HeldBy, O::WrongToken),
        other => return Err(mismatch("release", other)),
    };
    Ok(pb::ReleaseResponse {
        applied: applied(&a),
        outcome: Some(outcome),
    })
}

pub(super) fn renew(a: Applied) -> Result<pb::RenewResponse, NodeError> {
    use pb::lease_renewal::Outcome as O;
    let Outcome::Renewed(leases) = &a.outcome else {
        return Err(mismatch("renew", &a.outcome));
    };
    let leases = leases
        .iter()
        .map(|renewed| pb::LeaseRenewal {
            outcome: Some(match renewed {
                Renewed::Until { expires_at_ms } => O::Renewed(pb::Renewed {
                    expires_at_ms: *expires_at_ms,
                }),
                Renewed::Refused(refusal) => refused(refusal, O::NotHeld, O::HeldBy, O::WrongToken),
            }),
        })
        .collect();
    Ok(pb::RenewResponse {
        applied: applied(&a),
        leases,
    })
}

pub(super) fn put(a: Applied) -> Result<pb::PutResponse, NodeError> {
    use pb::put_response::Outcome as O;
    if let Some(error) = unknown_token(&a.outcome) {
        return Err(error);
    }
    let outcome = match &a.outcome {
        Outcome::Written => O::Written(pb::Written {}),
        Outcome::StaleToken { fence } => O::StaleToken(pb::StaleToken { fence: *fence }),
        other => return Err(mismatch("put", other)),
    };
    Ok(pb::PutResponse {
        applied: applied(&a),
        outcome: Some(outcome),
    })
}

pub(super) fn delete(a: Applied) -> Result<pb::DeleteResponse, NodeError> {
    use pb::delete_response::Outcome as O;
    if let Some(error) = unknown_token(&a.outcome) {
        return Err(error);
    }
    let outcome = match &a.outcome {
        Outcome::Deleted { existed } => O::Deleted(pb::Deleted { existed: *existed }),
        Outcome::StaleToken { fence } => O::StaleToken(pb::StaleToken { fence: *fence }),
        other => return Err(mismatch("delete", other)),
    };
    Ok(pb::DeleteResponse {
        applied: applied(&a),
        outcome: Some(outcome),
    })
}

pub(super) fn register(a: Applied) -> Result<pb::RegisterResponse, NodeError> {
    match &a.outcome {
        Outcome::Registered { client } => Ok(pb::RegisterResponse {
            applied: applied(&a),
            client_id: *client,
        }),
        other => Err(mismatch("register", other)),
    }
}

pub(super) fn close_session(a: Applied) -> Result<pb::CloseSessionResponse, NodeError> {
    match &a.outcome {
        Outcome::Closed => Ok(pb::CloseSessionResponse {
            applied: applied(&a),
        }),
        other => Err(mismatch("close_session", other)),
    }
}

pub(super) fn advance(a: Applied) -> Result<pb::AdvanceResponse, NodeError> {
    match &a.outcome {
        Outcome::Advanced => Ok(pb::AdvanceResponse {
            applied: applied(&a),
        }),
        other => Err(mismatch("advance", other)),
    }
}

/// A policy change as the API carries it, as the log does; the fields are checked here, at the
/// edge, and what depends on the policy where it applies.
pub(super) fn policy_change(r: pb::ChangePolicyRequest) -> Result<AuthChange, NodeError> {
    use pb::change_policy_request::Change;
    let binding = |b: pb::Binding| (b.identity, b.role);
    let change = match r.change {
        None => {
            return Err(invalid(
                "change",
                "set one of enable, disable, put_role, delete_role, bind, unbind",
            ))
        }
        Some(Change::Enable(admin)) => AuthChange::Enable { admin },
        Some(Change::Disable(_)) => AuthChange::Disable,
        Some(Change::PutRole(role)) => AuthChange::PutRole {
            name: role.name,
            grants: role
                .grants
                .into_iter()
                .map(grant)
                .collect::<Result<_, _>>()?,
        },
        Some(Change::DeleteRole(name)) => AuthChange::DeleteRole { name },
        Some(Change::Bind(b)) => {
            let (identity, role) = binding(b);
            AuthChange::Bind { identity, role }
        }
        Some(Change::Unbind(b)) => {
            let (identity, role) = binding(b);
            AuthChange::Unbind { identity, role }
        }
        Some(Change::AddToken(t)) => AuthChange::AddToken {
            identity: t.identity,
            sha256: t.sha256,
        },
        Some(Change::RevokeTokens(identity)) => AuthChange::RevokeTokens { identity },
    };
    change.validate()?;
    Ok(change)
}

fn invalid(field: &'static str, problem: &str) -> NodeError {
    NodeError::Invalid(InvalidInput::new(field, problem))
}

fn grant(g: pb::Grant) -> Result<Grant, NodeError> {
    let permission = Permission::parse(&g.permission).ok_or_else(|| {
        let names: Vec<_> = Permission::ALL.iter().map(|p| p.name()).collect();
        NodeError::Invalid(InvalidInput::new(
            "grants",
            format!(
                "no permission {:?}: one of {}",
                g.permission,
                names.join(", ")
            ),
        ))
    })?;
    Ok(Grant {
        permission,
        prefix: g.prefix,
    })
}

pub(super) fn policy_changed(a: Applied) -> Result<pb::ChangePolicyResponse, NodeError> {
    match &a.outcome {
        Outcome::PolicyChanged => Ok(pb::ChangePolicyResponse {
            applied: applied(&a),
        }),
        Outcome::PolicyRefused { reason } => Err(NodeError::PolicyRefused(reason.clone())),
        other => Err(mismatch("change policy", other)),
    }
}

pub(super) fn policy(policy: &Policy, at: &Applied) -> pb::PolicyResponse {
    let roles = policy.roles().iter().map(|(name, role)| pb::AuthRole {
        name: name.clone(),
        grants: role
            .grants
            .iter()
            .map(|g| pb::Grant {
                permission: g.permission.name().to_owned(),
                prefix: g.prefix.clone(),
            })
            .collect(),
    });
    let bindings = policy.bindings().iter().flat_map(|(identity, roles)| {
        roles.iter().map(move |role| pb::Binding {
            identity: identity.clone(),
            role: role.clone(),
        })
    });
    let tokens = policy
        .tokens()
        .iter()
        .map(|(sha256, identity)| pb::BearerToken {
            identity: identity.clone(),
            sha256: sha256.chars().take(12).collect(),
        });
    pb::PolicyResponse {
        enabled: policy.enabled(),
        roles: roles.collect(),
        bindings: bindings.collect(),
        applied: applied(at),
        tokens: tokens.collect(),
    }
}

pub(super) fn get(value: Option<Vec<u8>>, at: &Applied) -> pb::GetResponse {
    pb::GetResponse {
        applied: applied(at),
        value,
    }
}

pub(super) fn check_token(
    lease: &str,
    check: leasehold_core::TokenCheck,
    at: &Applied,
) -> Result<pb::CheckTokenResponse, NodeError> {
    use leasehold_core::TokenCheck;
    use pb::check_token_response::Outcome as O;
    let outcome = match check {
        TokenCheck::Current {
            holder,
            expires_at_ms,
        } => O::Current(pb::TokenCurrent {
            holder,
            expires_at_ms,
        }),
        TokenCheck::Stale {
            current_token,
            holder,
        } => O::Stale(pb::TokenStale {
            current_token,
            holder: holder.unwrap_or_default(),
        }),
        TokenCheck::Unknown { latest_token } => {
            let unknown = Outcome::UnknownToken {
                lease: lease.into(),
                latest_token,
            };
            return Err(unknown_token(&unknown).unwrap_or_else(|| mismatch("check", &unknown)));
        }
    };
    Ok(pb::CheckTokenResponse {
        applied: applied(at),
        outcome: Some(outcome),
    })
}

/// The answer of a read of `lease` at `at`: its holder as the state at that log index has it,
/// at the store time applied there (`applied_ms`, not the read's later time: a lease due but
/// not yet expired in the log is still held, as every node's state says).
pub(super) fn get_lease(
    lease: Option<leasehold_core::Lease>,
    applied_ms: u64,
    at: &Applied,
) -> pb::GetLeaseResponse {
    let lease = lease_entry("", &lease.unwrap_or_default(), applied_ms);
    pb::GetLeaseResponse {
        applied: applied(at),
        holder: lease.holder,
        token: lease.token,
        expires_at_ms: lease.expires_at_ms,
        fence: lease.fence,
    }
}

/// Lease `name` as it stands at store time `now_ms`: no holder once it ran out.
pub(super) fn lease_entry(
    name: &str,
    lease: &leasehold_core::Lease,
    now_ms: u64,
) -> pb::LeaseEntry {
    pb::LeaseEntry {
        lease: name.to_owned(),
        holder: (lease.holder_at(now_ms)).map_or_else(String::new, Name::to_string),
        token: lease.token,
        expires_at_ms: lease.expires_at_ms,
        fence: lease.fence,
    }
}
