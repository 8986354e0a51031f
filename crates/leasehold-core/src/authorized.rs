//! The policy as the log applies it: `Op::As` checked at apply, `Op::Auth` changing the policy
//! for every command after it, and the table's encoding and digest with a policy in it.

use crate::auth::{AuthChange, Grant, Permission, ADMIN_ROLE};
use crate::{Command, LeaseTable, Op, Outcome, ReleaseRefusal, Renewal, RequestId};

fn at(at_ms: u64, op: Op) -> Command {
    Command {
        at_ms: Some(at_ms),
        request: None,
        op,
    }
}

fn by(identity: &str, op: Op) -> Op {
    Op::As {
        identity: identity.into(),
        bearer: None,
        op: Box::new(op),
    }
}

fn acquire(lease: &str, holder: &str) -> Op {
    Op::Acquire {
        lease: lease.into(),
        holder: holder.into(),
        ttl_ms: 10_000,
    }
}

fn put(key: &str) -> Op {
    Op::Put {
        key: key.into(),
        value: b"v".to_vec(),
        fence: None,
    }
}

fn denied(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Denied(denied) => denied.to_string(),
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// A table whose policy is on: `root` the admin, `team-a` holding and writing under `a/`.
fn with_policy() -> LeaseTable {
    let mut t = LeaseTable::default();
    let grants = [Permission::Hold, Permission::Write]
        .into_iter()
        .map(|permission| Grant {
            permission,
            prefix: "a/".into(),
        })
        .collect();
    for change in [
        AuthChange::Enable {
            admin: "root".into(),
        },
        AuthChange::PutRole {
            name: "a".into(),
            grants,
        },
        AuthChange::Bind {
            identity: "team-a".into(),
            role: "a".into(),
        },
    ] {
        let outcome = t.apply(&at(1, by("root", Op::Auth(change))));
        assert_eq!(outcome, Outcome::PolicyChanged);
    }
    t
}

/// As the admin `root`, at `at_ms`: binds `identity` to `role`.
fn bind(t: &mut LeaseTable, at_ms: u64, identity: &str, role: &str) {
    let change = AuthChange::Bind {
        identity: identity.into(),
        role: role.into(),
    };
    assert_eq!(
        t.apply(&at(at_ms, by("root", Op::Auth(change)))),
        Outcome::PolicyChanged
    );
}

#[test]
fn with_the_policy_off_every_operation_applies_with_or_without_an_identity() {
    let mut t = LeaseTable::default();
    assert!(t.apply(&at(1, acquire("l", "x"))).accepted());
    assert!(t.apply(&at(1, by("anyone", put("k")))).accepted());
    assert!(t.apply(&at(1, Op::Advance { by_ms: 5 })).accepted());
}

#[test]
fn an_operation_is_applied_only_if_the_policy_in_force_allows_its_identity() {
    let mut t = with_policy();
    // What the refusals may do: move time to their stamp, and nothing else.
    let mut ticked = t.clone();
    ticked.apply(&at(2, Op::Tick));
    let refused = t.apply(&at(2, by("team-a", put("b/k"))));
    assert_eq!(denied(&refused), "team-a may not write key \"b/k\"");
    let refused = t.apply(&at(2, by("team-b", acquire("a/l", "team-b"))));
    assert_eq!(denied(&refused), "team-b may not hold lease \"a/l\"");
    assert_eq!(t.row("b/k"), None);
    assert!(t.lease("a/l").is_none());
    assert_eq!(t.digest(), ticked.digest());
    assert!(t.apply(&at(2, by("team-a", put("a/k")))).accepted());
    assert!(t
        .apply(&at(2, by("team-a", acquire("a/l", "team-a/w1"))))
        .accepted());
}

/// A renewal of `leases` as `team-a/w1`, each under token 1.
fn renew(leases: &[&str]) -> Op {
    Op::Renew {
        leases: leases
            .iter()
            .map(|lease| Renewal {
                lease: (*lease).into(),
                holder: "team-a/w1".into(),
                token: 1,
                ttl_ms: 10_000,
            })
            .collect(),
    }
}

#[test]
fn a_renewal_naming_one_lease_its_identity_may_not_hold_is_denied_whole() {
    let mut t = with_policy();
    for lease in ["a/1", "a/2"] {
        assert!(t
            .apply(&at(2, by("team-a", acquire(lease, "team-a/w1"))))
            .accepted());
    }
    let before = t.digest();
    let refused = t.apply(&at(2, by("team-a", renew(&["a/1", "b/1", "a/2"]))));
    assert_eq!(denied(&refused), "team-a may not hold lease \"b/1\"");
    assert_eq!(t.digest(), before, "no lease of a denied renewal moved");
    let renewed = t.apply(&at(3, by("team-a", renew(&["a/1", "a/2"]))));
    assert!(
        matches!(&renewed, Outcome::Renewed(leases) if leases.len() == 2),
        "{renewed:?}"
    );
}

#[test]
fn a_bare_client_operation_is_denied_while_the_policy_is_on_and_node_commands_are_not() {
    let mut t = with_policy();
    let refused = t.apply(&at(2, put("a/k")));
    assert!(denied(&refused).starts_with("anonymous may not write key"));
    // What nodes log themselves, and opening a session, need no identity.
    assert!(t.apply(&at(3, Op::Tick)).accepted());
    assert!(t.apply(&at(3, Op::Forget { retention_ms: 1 })).accepted());
    assert!(matches!(
        t.apply(&at(3, Op::Register)),
        Outcome::Registered { .. }
    ));
    let refused = t.apply(&at(3, by("team-a", Op::Advance { by_ms: 1 })));
    assert_eq!(denied(&refused), "team-a may not advance the clock");
    assert!(t
        .apply(&at(3, by("root", Op::Advance { by_ms: 1 })))
        .accepted());
}

#[test]
fn a_holders_lease_is_not_releasable_by_another_identity_that_knows_its_token() {
    let mut t = with_policy();
    let token = match t.apply(&at(2, by("team-a", acquire("a/l", "team-a/w1")))) {
        Outcome::Granted { token, .. } => token,
        other => panic!("{other:?}"),
    };
    bind(&mut t, 3, "team-b", "a");
    let release = |holder: &str| Op::Release {
        lease: "a/l".into(),
        holder: holder.into(),
        token,
    };
    // team-b has the same role, and the token, but is not the holder's identity.
    let refused = t.apply(&at(4, by("team-b", release("team-a/w1"))));
    assert!(
        denied(&refused).contains("holds only as itself"),
        "{refused:?}"
    );
    // As itself, the store's own check refuses it: the lease is another holder's.
    let refused = t.apply(&at(4, by("team-b", release("team-b"))));
    assert!(matches!(
        refused,
        Outcome::ReleaseRefused(ReleaseRefusal::HeldByOther { .. })
    ));
    assert_eq!(
        t.apply(&at(4, by("team-a", release("team-a/w1")))),
        Outcome::Released { token }
    );
}

#[test]
fn only_an_admin_changes_the_policy_and_a_refused_change_changes_nothing() {
    let mut t = with_policy();
    let unbind_root = AuthChange::Unbind {
        identity: "root".into(),
        role: ADMIN_ROLE.into(),
    };
    let refused = t.apply(&at(2, by("team-a", Op::Auth(unbind_root.clone()))));
    assert_eq!(denied(&refused), "team-a may not change the policy");
    let before = t.digest();
    let refused = t.apply(&at(2, by("root", Op::Auth(unbind_root))));
    assert!(
        matches!(&refused, Outcome::PolicyRefused { reason } if reason.contains("last admin")),
        "{refused:?}"
    );
    assert_eq!(t.digest(), before);
    assert!(!refused.accepted());
}

#[test]
fn a_change_is_in_force_from_the_next_command_on() {
    let mut t = with_policy();
    assert!(t.apply(&at(2, by("team-a", put("a/k")))).accepted());
    let change = AuthChange::DeleteRole { name: "a".into() };
    t.apply(&at(3, by("root", Op::Auth(change))));
    let refused = t.apply(&at(3, by("team-a", put("a/k"))));
    assert_eq!(denied(&refused), "team-a may not write key \"a/k\"");
    t.apply(&at(4, by("root", Op::Auth(AuthChange::Disable))));
    assert!(t.apply(&at(4, put("a/k"))).accepted());
}

#[test]
fn a_retried_request_gets_its_denial_again() {
    let mut t = with_policy();
    let client = match t.apply(&at(2, Op::Register)) {
        Outcome::Registered { client } => client,
        other => panic!("{other:?}"),
    };
    let command = Command {
        at_ms: Some(3),
        request: Some(RequestId {
            client,
            sequence: 1,
        }),
        op: by("team-b", put("a/k")),
    };
    let first = t.apply(&command);
    assert!(matches!(first, Outcome::Denied(_)));
    // Bound since: the retry is still answered with its first answer, not applied.
    bind(&mut t, 4, "team-b", "a");
    assert_eq!(t.apply(&command), first);
    assert_eq!(t.row("a/k"), None);
}

#[test]
fn the_policy_survives_encoding_and_changes_the_digest_only_when_set() {
    let mut t = LeaseTable::default();
    t.apply(&at(1, put("k")));
    let without = t.digest();
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(loaded.digest(), without);
    let t = with_policy();
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(loaded.policy(), t.policy());
    assert_eq!(loaded.digest(), t.digest());
    let mut off = t.clone();
    off.apply(&at(1, by("root", Op::Auth(AuthChange::Disable))));
    assert_ne!(off.digest(), t.digest());
}

/// A table stored before the policy (its floor last) loads with its floor, not as the older
/// layout without one, which would read it too and drop the floor.
#[test]
fn a_table_stored_before_the_policy_loads_with_its_floor() {
    let mut t = LeaseTable::default();
    t.apply(&at(1, acquire("l", "x")));
    t.apply(&at(
        1,
        Op::Release {
            lease: "l".into(),
            holder: "x".into(),
            token: 1,
        },
    ));
    t.apply(&at(9_000, Op::Forget { retention_ms: 1 }));
    assert_eq!(t.forgotten_floor(), 1);
    let mut bytes = postcard::to_allocvec(&t).unwrap();
    // What a table without a policy stored: all but the policy, the session owners and the
    // creators of rows and leases.
    let owners = std::collections::BTreeMap::<u64, String>::new();
    let creators = std::collections::BTreeMap::<String, String>::new();
    let added = postcard::to_allocvec(&(t.policy(), owners, &creators, &creators)).unwrap();
    bytes.truncate(bytes.len() - added.len());
    assert!(postcard::from_bytes::<LeaseTable>(&bytes).is_err());
    let loaded = LeaseTable::from_older_bytes(&bytes).unwrap();
    assert_eq!(loaded.forgotten_floor(), 1);
    assert_eq!(loaded, t);
}

#[test]
fn an_identity_inside_another_is_refused_when_decoded() {
    let nested = by("a", by("b", put("k")));
    let bytes = postcard::to_allocvec(&nested).unwrap();
    let error = postcard::from_bytes::<Op>(&bytes).unwrap_err();
    assert!(
        error.to_string().contains("Serde Deserialization Error"),
        "{error}"
    );
    let one = postcard::to_allocvec(&by("a", put("k"))).unwrap();
    assert_eq!(postcard::from_bytes::<Op>(&one).unwrap(), by("a", put("k")));
    assert!(crate::validate(&nested).is_err());
}

#[test]
fn every_write_a_client_may_send_needs_a_permission() {
    let ops = [
        acquire("l", "h"),
        Op::Release {
            lease: "l".into(),
            holder: "h".into(),
            token: 1,
        },
        put("k"),
        Op::Delete {
            key: "k".into(),
            fence: None,
        },
        Op::Advance { by_ms: 1 },
        Op::Auth(AuthChange::Disable),
        by("a", put("k")),
    ];
    for op in &ops {
        assert_eq!(op.actions().count(), 1, "{op:?}");
    }
    for op in [Op::Register, Op::Tick, Op::Forget { retention_ms: 1 }] {
        assert_eq!(op.actions().count(), 0, "{op:?}");
    }
    assert_eq!(renew(&["a/1", "a/2", "a/3"]).actions().count(), 3);
}

fn request(client: u64, sequence: u64, op: Op) -> Command {
    Command {
        at_ms: Some(5),
        request: Some(RequestId { client, sequence }),
        op,
    }
}

fn registered(t: &mut LeaseTable, op: Op) -> u64 {
    match t.apply(&at(2, op)) {
        Outcome::Registered { client } => client,
        other => panic!("{other:?}"),
    }
}

/// Session ids are small, sequential and easy to guess: a request under another identity's
/// session is refused before its session sees it, so it reads none of its answers and uses
/// none of its sequence numbers.
#[test]
fn a_session_opened_by_an_identity_takes_requests_of_that_identity_only() {
    let mut t = LeaseTable::default();
    let a = registered(&mut t, by("team-a", Op::Register));
    let refused = t.apply(&request(a, 1, by("team-b", put("k"))));
    assert_eq!(denied(&refused), format!("team-b may not use session \"{a}\": another identity opened it; open a session of your own"));
    let refused = t.apply(&request(a, 1, put("k")));
    assert!(denied(&refused).starts_with("anonymous may not use session"));
    assert_eq!(t.row("k"), None);
    // The owner's request with the same sequence number applies: nothing was used up.
    assert!(t.apply(&request(a, 1, by("team-a", put("k")))).accepted());
    // A session opened without an identity is anyone's, as before.
    let open = registered(&mut t, Op::Register);
    assert!(t
        .apply(&request(open, 1, by("team-b", put("j"))))
        .accepted());
}

#[test]
fn a_sessions_owner_goes_with_it_and_is_kept_in_the_encoding_and_the_digest() {
    let mut t = LeaseTable::default();
    let mut unowned = t.clone();
    registered(&mut unowned, Op::Register);
    let a = registered(&mut t, by("team-a", Op::Register));
    // The owner is state: the same session opened without one digests otherwise.
    assert_ne!(unowned.digest(), t.digest());
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(loaded, t);
    assert_eq!(loaded.digest(), t.digest());
    let refused = t.clone().apply(&request(a, 1, by("team-b", put("k"))));
    assert!(matches!(refused, Outcome::Denied(_)));
    // An hour of silence later the session is gone, and its owner with it.
    t.apply(&at(2 + crate::SESSION_IDLE_MS, Op::Tick));
    assert_eq!(
        t.apply(&request(a, 1, by("team-b", put("k")))),
        Outcome::UnknownSession
    );
    // Gone with its session: the table digests as one whose session had no owner.
    unowned.apply(&at(2 + crate::SESSION_IDLE_MS, Op::Tick));
    assert_eq!(unowned.digest(), t.digest());
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(loaded.digest(), t.digest());
}

/// The count of each identity's sessions, which the leader caps, follows every way a session
/// opens and ends (registration, close, expiry) and is rebuilt alike from the encoding.
#[test]
fn each_identitys_open_sessions_are_counted_through_close_expiry_and_reload() {
    let mut t = LeaseTable::default();
    let a1 = registered(&mut t, by("team-a", Op::Register));
    registered(&mut t, by("team-a", Op::Register));
    registered(&mut t, by("team-b", Op::Register));
    registered(&mut t, Op::Register);
    assert_eq!((t.sessions_of("team-a"), t.sessions_of("team-b")), (2, 1));
    assert_eq!((t.sessions_of("nobody"), t.session_count()), (0, 4));
    assert_eq!(
        t.apply(&request(a1, 1, by("team-a", Op::Close))),
        Outcome::Closed
    );
    assert_eq!(t.sessions_of("team-a"), 1);
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(loaded.sessions_of("team-a"), 1);
    assert_eq!(loaded, t);
    t.apply(&at(2 + crate::SESSION_IDLE_MS, Op::Tick));
    assert_eq!((t.sessions_of("team-a"), t.sessions_of("team-b")), (0, 0));
    assert_eq!(t.session_count(), 0);
}

/// An identity a bearer token gave is checked against the policy in force where the write
/// applies: a write logged after the token's revocation is denied, though the node that took
/// it had not applied the revocation yet.
#[test]
fn a_write_by_a_revoked_bearer_token_is_denied_from_the_revocations_index_on() {
    let mut t = with_policy();
    let sha256 = "ab".repeat(32);
    let add = AuthChange::AddToken {
        identity: "team-a".into(),
        sha256: sha256.clone(),
    };
    assert_eq!(
        t.apply(&at(2, by("root", Op::Auth(add)))),
        Outcome::PolicyChanged
    );
    let with_token = || Op::As {
        identity: "team-a".into(),
        bearer: Some(sha256.clone()),
        op: Box::new(put("a/k")),
    };
    assert!(t.apply(&at(3, with_token())).accepted());
    let revoke = AuthChange::RevokeTokens {
        identity: "team-a".into(),
    };
    t.apply(&at(4, by("root", Op::Auth(revoke))));
    let refused = t.apply(&at(5, with_token()));
    assert_eq!(
        denied(&refused),
        "team-a may not write key \"a/k\": its bearer token was revoked"
    );
    // The same identity with its certificate is not affected.
    assert!(t.apply(&at(5, by("team-a", put("a/k")))).accepted());
}

/// Never turned on, the policy takes no change but turning it on: a role, a binding or a token
/// planted before would outlast it. Turned off since, only an admin changes it.
#[test]
fn while_the_policy_is_off_only_turning_it_on_or_an_admin_changes_it() {
    let mut t = LeaseTable::default();
    let plant = || AuthChange::Bind {
        identity: "mallory".into(),
        role: ADMIN_ROLE.into(),
    };
    let refused = t.apply(&at(1, by("mallory", Op::Auth(plant()))));
    assert!(denied(&refused).contains("never on"), "{refused:?}");
    let refused = t.apply(&at(1, Op::Auth(plant())));
    assert!(matches!(refused, Outcome::Denied(_)), "{refused:?}");
    assert!(t.policy().bindings().is_empty());
    let mut t = with_policy();
    t.apply(&at(2, by("root", Op::Auth(AuthChange::Disable))));
    let refused = t.apply(&at(3, by("mallory", Op::Auth(plant()))));
    assert!(denied(&refused).contains("only an admin"), "{refused:?}");
    assert!(!t.policy().bindings().contains_key("mallory"));
    let enable = AuthChange::Enable {
        admin: "mallory".into(),
    };
    assert!(matches!(
        t.apply(&at(3, by("mallory", Op::Auth(enable)))),
        Outcome::Denied(_)
    ));
    assert_eq!(
        t.apply(&at(3, by("root", Op::Auth(plant())))),
        Outcome::PolicyChanged
    );
}

#[test]
fn an_identity_is_a_dns_name_so_it_owns_no_other_identitys_holders() {
    for bad in ["team-a/x", "team a", "t\u{e9}am"] {
        let op = by(bad, put("k"));
        assert!(crate::validate(&op).is_err(), "{bad}");
        let token = AuthChange::AddToken {
            identity: bad.into(),
            sha256: "ab".repeat(32),
        };
        assert!(token.validate().is_err(), "{bad}");
    }
    assert!(crate::validate(&by("svc.prod-1", put("k"))).is_ok());
}

/// Turned off, the policy still keeps an admin: with none, no one could change it or turn it
/// on again, since only an admin may once it has been on.
#[test]
fn the_last_admin_cannot_be_unbound_while_the_policy_is_off_either() {
    let mut t = with_policy();
    t.apply(&at(2, by("root", Op::Auth(AuthChange::Disable))));
    let unbind = AuthChange::Unbind {
        identity: "root".into(),
        role: ADMIN_ROLE.into(),
    };
    let refused = t.apply(&at(3, by("root", Op::Auth(unbind))));
    assert!(
        matches!(&refused, Outcome::PolicyRefused { reason } if reason.contains("last admin")),
        "{refused:?}"
    );
    let enable = AuthChange::Enable {
        admin: "root".into(),
    };
    assert_eq!(
        t.apply(&at(4, by("root", Op::Auth(enable)))),
        Outcome::PolicyChanged
    );
}

/// Issue 41, item 3: a client closes its session when it is done, so that sessions do not
/// linger for their idle hour. Only its owner closes it; closed, it takes no request, and the
/// close answers every retry of itself the same.
#[test]
fn a_closed_session_is_gone_its_owner_alone_closes_it_and_a_retried_close_is_answered_alike() {
    let mut t = LeaseTable::default();
    let a = registered(&mut t, by("team-a", Op::Register));
    assert!(t.apply(&request(a, 1, by("team-a", put("k")))).accepted());
    let refused = t.apply(&request(a, 2, by("team-b", Op::Close)));
    assert!(denied(&refused).starts_with("team-b may not use session"));
    assert_eq!(t.session_count(), 1, "another identity closes nothing");
    assert_eq!(
        t.apply(&request(a, 2, by("team-a", Op::Close))),
        Outcome::Closed
    );
    assert_eq!(t.session_count(), 0);
    assert_eq!(
        t.apply(&request(a, 2, by("team-a", Op::Close))),
        Outcome::Closed
    );
    assert_eq!(
        t.apply(&request(a, 3, by("team-a", put("j")))),
        Outcome::UnknownSession
    );
    assert_eq!(t.row("k"), Some(&b"v"[..]), "what it wrote stays");
    // A session opened without an identity takes anyone's requests, its close too.
    let open = registered(&mut t, Op::Register);
    assert_eq!(t.apply(&request(open, 1, Op::Close)), Outcome::Closed);
    assert_eq!(t.session_count(), 0);
}

/// The leases each identity created, which the leader caps, are counted from the acquire that
/// brings a lease into the table to the forget that drops it, whoever holds it between; they
/// are kept in the table's encoding, and a lease acquired without an identity counts toward
/// none.
#[test]
fn the_leases_each_identity_created_are_counted_until_forgotten_and_across_a_reload() {
    let mut t = LeaseTable::default();
    t.apply(&at(1, by("team-a", acquire("l1", "team-a"))));
    t.apply(&at(1, by("team-a", acquire("l2", "team-a/worker-1"))));
    t.apply(&at(1, by("team-b", acquire("l3", "team-b"))));
    t.apply(&at(1, acquire("l4", "x")));
    let created = |t: &LeaseTable| ["team-a", "team-b"].map(|id| t.leases_created_by(id));
    assert_eq!(created(&t), [2, 1]);
    // Renewed, released, expired and taken by another: still its creator's while kept.
    t.apply(&at(2, by("team-a", acquire("l1", "team-a"))));
    let release = Op::Release {
        lease: "l2".into(),
        holder: "team-a/worker-1".into(),
        token: t.lease("l2").unwrap().token,
    };
    assert!(t.apply(&at(3, by("team-a", release))).accepted());
    t.apply(&at(10_002, by("team-a", acquire("l3", "team-a"))));
    assert_eq!(t.lease("l3").unwrap().holder.as_deref(), Some("team-a"));
    assert_eq!(created(&t), [2, 1]);
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(created(&loaded), [2, 1]);
    assert_eq!(loaded, t);
    // Forgotten once free for the retention: counted no more.
    t.apply(&at(
        30_000,
        Op::Forget {
            retention_ms: 1_000,
        },
    ));
    assert_eq!(t.lease_count(), 0);
    assert_eq!(created(&t), [0, 0]);
    // Brought in again once forgotten: its new creator's.
    t.apply(&at(30_001, by("team-b", acquire("l1", "team-b"))));
    assert_eq!(created(&t), [0, 1]);
}

/// An acquire or a put that changes nothing (denied by the policy, answered as held, refused
/// as fenced with a stale token) records no creator either.
#[test]
fn a_refused_acquire_or_put_records_no_creator() {
    let mut t = with_policy();
    t.apply(&at(1, by("team-a", acquire("a/l", "team-a"))));
    let before = t.clone();
    let refused = [
        by("team-a", put("b/k")),
        by("team-a", acquire("b/l", "team-a")),
        by("root", acquire("a/l", "root")),
        by(
            "team-a",
            Op::Put {
                key: "a/k".into(),
                value: b"v".to_vec(),
                fence: Some(crate::Fence {
                    lease: "a/l".into(),
                    token: 0,
                }),
            },
        ),
    ];
    for op in refused {
        assert!(!t.apply(&at(1, op.clone())).accepted(), "{op:?}");
    }
    assert_eq!(
        (t.rows_created_by("team-a"), t.leases_created_by("team-a")),
        (0, 1)
    );
    assert_eq!(t.leases_created_by("root"), 0);
    assert_eq!(t, before, "nothing changed");
}

/// The rows each identity created, which the leader caps, are counted from the put that
/// creates a row to the delete that removes it, whoever overwrites it between; they are kept
/// in the table's encoding, and a row written without an identity counts toward none.
#[test]
fn the_rows_each_identity_created_are_counted_until_deleted_and_across_a_reload() {
    let mut t = LeaseTable::default();
    for key in ["a/1", "a/2", "a/3"] {
        t.apply(&at(1, by("team-a", put(key))));
    }
    t.apply(&at(1, by("team-b", put("b/1"))));
    t.apply(&at(1, put("plain")));
    let created = |t: &LeaseTable| ["team-a", "team-b"].map(|id| t.rows_created_by(id));
    assert_eq!(created(&t), [3, 1]);
    // Overwritten by another identity: still its creator's.
    t.apply(&at(2, by("team-b", put("a/1"))));
    assert_eq!(created(&t), [3, 1]);
    let delete = |key: &str| Op::Delete {
        key: key.into(),
        fence: None,
    };
    t.apply(&at(3, by("team-b", delete("a/2"))));
    t.apply(&at(3, delete("plain")));
    assert_eq!(created(&t), [2, 1]);
    let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    assert_eq!(created(&loaded), [2, 1]);
    assert_eq!(loaded, t);
    // Created again after its delete: its new creator's.
    t.apply(&at(4, by("team-b", put("a/2"))));
    assert_eq!(created(&t), [2, 2]);
}
