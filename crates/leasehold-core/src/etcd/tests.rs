//! The etcd keyspace through the table's apply, as the log drives it.

use super::*;
use crate::{Command, LeaseTable, Op, Outcome};

fn at(ms: u64, op: EtcdOp) -> Command {
    Command {
        at_ms: Some(ms),
        request: None,
        op: Op::Etcd(op),
    }
}

fn put(key: &str, value: &str, lease: i64) -> RequestOp {
    RequestOp::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        ..PutRequest::default()
    })
}

fn txn(compare: Vec<Compare>, success: Vec<RequestOp>, failure: Vec<RequestOp>) -> EtcdOp {
    EtcdOp::Txn(Txn {
        compare,
        success,
        failure,
    })
}

fn one(request: RequestOp) -> EtcdOp {
    txn(vec![], vec![request], vec![])
}

/// `op` as `identity` asks it, at store time 1.
fn as_(identity: &str, op: Op) -> Command {
    Command {
        at_ms: Some(1),
        request: None,
        op: Op::As {
            identity: identity.into(),
            bearer: None,
            op: Box::new(op),
        },
    }
}

fn answer(outcome: Outcome) -> EtcdOutcome {
    match outcome {
        Outcome::Etcd(etcd) => *etcd,
        other => panic!("not an etcd outcome: {other:?}"),
    }
}

/// How many events the keyspace keeps for watches.
fn events(t: &LeaseTable) -> usize {
    t.etcd().history().events().count()
}

fn get(t: &LeaseTable, key: &str) -> Option<KeyValue> {
    let request = RangeRequest {
        key: key.into(),
        ..RangeRequest::default()
    };
    t.etcd().range(&request, 0).unwrap().kvs.pop()
}

fn prefix(key: &str) -> RangeRequest {
    let mut end = key.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    RangeRequest {
        key: key.into(),
        range_end: end,
        ..RangeRequest::default()
    }
}

#[test]
fn puts_make_one_revision_each_and_count_versions() {
    let mut t = LeaseTable::default();
    assert_eq!(t.etcd().revision(), 1, "etcd starts at revision 1");
    let first = answer(t.apply(&at(10, one(put("a", "1", 0)))));
    assert_eq!(first.revision, 2);
    answer(t.apply(&at(20, one(put("a", "2", 0)))));
    answer(t.apply(&at(30, one(put("b", "x", 0)))));
    let a = get(&t, "a").unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (2, 3, 2));
    assert_eq!(&*a.value, b"2");
    assert_eq!(t.etcd().revision(), 4);
    // A delete of nothing changes nothing, the revision included.
    let nothing = RequestOp::DeleteRange(DeleteRangeRequest {
        key: "zz".into(),
        ..DeleteRangeRequest::default()
    });
    assert_eq!(answer(t.apply(&at(40, one(nothing)))).revision, 4);
}

#[test]
fn a_lock_taken_by_a_create_revision_compare_goes_to_the_first_only() {
    let mut t = LeaseTable::default();
    let mine = |who: &str| {
        let key = format!("lock/{who}");
        let free = Compare {
            result: CompareResult::Equal,
            target: CompareTarget::Create(0),
            key: b"lock/owner".to_vec(),
            range_end: vec![],
        };
        let read = RequestOp::Range(RangeRequest {
            key: b"lock/owner".to_vec(),
            ..RangeRequest::default()
        });
        txn(vec![free], vec![put("lock/owner", &key, 0)], vec![read])
    };
    let first = answer(t.apply(&at(1, mine("a"))));
    let EtcdAnswer::Txn(won) = first.answer else {
        panic!()
    };
    assert!(won.succeeded);
    let second = answer(t.apply(&at(2, mine("b"))));
    let EtcdAnswer::Txn(lost) = second.answer else {
        panic!()
    };
    assert!(!lost.succeeded);
    let OpAnswer::Range(found) = &lost.responses[0] else {
        panic!()
    };
    assert_eq!(&*found.kvs[0].value, b"lock/a");
    assert_eq!(
        second.revision, 2,
        "a failed compare with a read writes nothing"
    );
}

#[test]
fn keys_of_a_lease_go_at_its_expiry_in_store_time_as_one_revision_of_deletes() {
    let mut t = LeaseTable::default();
    let granted = answer(t.apply(&at(1_000, EtcdOp::LeaseGrant { id: 0, ttl_s: 5 })));
    let EtcdAnswer::LeaseGranted { id, ttl_s: 5 } = granted.answer else {
        panic!("{granted:?}")
    };
    answer(t.apply(&at(1_000, one(put("s/1", "a", id)))));
    answer(t.apply(&at(1_000, one(put("s/2", "b", id)))));
    // Kept alive at 4 s: it runs to 9 s, not 6 s.
    answer(t.apply(&at(4_000, EtcdOp::LeaseKeepAlive { id })));
    t.apply(&Command {
        at_ms: Some(8_999),
        request: None,
        op: Op::Tick,
    });
    assert!(get(&t, "s/1").is_some(), "alive until 9 s");
    assert_eq!(t.next_expiry_ms(), Some(9_000));
    let before = t.etcd().revision();
    t.apply(&Command {
        at_ms: Some(9_000),
        request: None,
        op: Op::Tick,
    });
    assert_eq!((get(&t, "s/1"), get(&t, "s/2")), (None, None));
    assert_eq!(
        t.etcd().revision(),
        before + 1,
        "one revision for the lease's keys"
    );
    assert!(t.etcd().lease(id).is_none());
    let since = t
        .etcd()
        .history()
        .since(before + 1, Span::From(b""), 10)
        .unwrap();
    let kinds: Vec<_> = since
        .events
        .iter()
        .map(|e| (e.kind, e.revision()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EtcdEventKind::Delete, before + 1),
            (EtcdEventKind::Delete, before + 1)
        ]
    );
    let keep = answer(t.apply(&at(9_001, EtcdOp::LeaseKeepAlive { id })));
    assert_eq!(keep.answer, EtcdAnswer::Refused(EtcdRefusal::LeaseNotFound));
}

#[test]
fn leases_that_run_out_together_end_a_bounded_number_per_command() {
    let mut t = LeaseTable::default();
    let leases = crate::limits::ETCD_EXPIRY_WORK * 5 / 2;
    for n in 0..leases {
        let granted = answer(t.apply(&at(0, EtcdOp::LeaseGrant { id: 0, ttl_s: 1 })));
        let EtcdAnswer::LeaseGranted { id, .. } = granted.answer else {
            panic!()
        };
        answer(t.apply(&at(0, one(put(&format!("k/{n}"), "v", id)))));
    }
    let tick = |t: &mut LeaseTable| {
        t.apply(&Command {
            at_ms: Some(1_000),
            request: None,
            op: Op::Tick,
        })
    };
    let mut ticks = 0;
    while t.etcd().key_count() > 0 {
        let before = t.etcd().key_count();
        tick(&mut t);
        ticks += 1;
        assert!(before - t.etcd().key_count() <= crate::limits::ETCD_EXPIRY_WORK);
        assert!(
            t.next_expiry_ms() <= Some(1_000) || t.etcd().key_count() == 0,
            "a tick is due at once while more leases are run out"
        );
    }
    assert_eq!(ticks, 3);
    assert_eq!(t.next_expiry_ms(), None);
}

#[test]
fn a_transaction_refused_halfway_changes_nothing() {
    let mut t = LeaseTable::default();
    answer(t.apply(&at(1, one(put("a", "1", 0)))));
    let before = t.clone();
    let refused = answer(t.apply(&at(
        2,
        txn(vec![], vec![put("b", "2", 0), put("c", "3", 77)], vec![]),
    )));
    assert_eq!(
        refused.answer,
        EtcdAnswer::Refused(EtcdRefusal::LeaseNotFound)
    );
    assert_eq!(refused.revision, 2);
    assert_eq!(get(&t, "b"), None);
    assert_eq!(t.etcd(), before.etcd());
}

#[test]
fn a_request_of_one_op_refused_changes_nothing() {
    // Such a request runs on the keyspace's own maps, not a draft's clones: its op must be
    // refused before it changes anything.
    let mut t = LeaseTable::default();
    let granted = answer(t.apply(&at(1, EtcdOp::LeaseGrant { id: 5, ttl_s: 60 })));
    assert!(matches!(granted.answer, EtcdAnswer::LeaseGranted { .. }));
    answer(t.apply(&at(1, one(put("a", "1", 5)))));
    let absent = PutRequest {
        key: b"b".to_vec(),
        ignore_value: true,
        ..PutRequest::default()
    };
    let cases = [
        (one(put("a", "2", 77)), EtcdRefusal::LeaseNotFound),
        (one(RequestOp::Put(absent)), EtcdRefusal::KeyNotFound),
        // The failure branch is the one run.
        (
            txn(
                vec![Compare {
                    key: b"a".to_vec(),
                    range_end: vec![],
                    target: CompareTarget::Version(7),
                    result: CompareResult::Equal,
                }],
                vec![],
                vec![put("a", "3", 77)],
            ),
            EtcdRefusal::LeaseNotFound,
        ),
    ];
    let max = crate::limits::ETCD_MAX_RANGE_KEYS;
    for n in 0..max {
        answer(t.apply(&at(1, one(put(&format!("p/{n}"), "v", 0)))));
    }
    let everything = RequestOp::DeleteRange(DeleteRangeRequest {
        key: b"\0".to_vec(),
        range_end: b"\0".to_vec(),
        prev_kv: true,
    });
    let matched = max + 1;
    let cases = cases.into_iter().chain([(
        one(everything),
        EtcdRefusal::TooManyDeletes { max, matched },
    )]);
    for (op, refusal) in cases {
        let before = t.clone();
        let refused = answer(t.apply(&at(2, op)));
        assert_eq!(refused.answer, EtcdAnswer::Refused(refusal));
        assert_eq!(t.etcd(), before.etcd());
        assert_eq!(t.etcd().digest(), before.etcd().digest());
        assert_eq!(events(&t), events(&before));
        assert_eq!(
            get(&t, "a").map(|kv| kv.value.to_vec()),
            Some(b"1".to_vec())
        );
    }
}

#[test]
fn ranges_count_filter_sort_and_limit_as_etcd() {
    let mut t = LeaseTable::default();
    for (n, key) in ["p/c", "p/a", "p/b", "q/a"].into_iter().enumerate() {
        answer(t.apply(&at(n as u64, one(put(key, &n.to_string(), 0)))));
    }
    let all = t.etcd().range(&prefix("p/"), 0).unwrap();
    let keys: Vec<_> = all.kvs.iter().map(|kv| kv.key.to_vec()).collect();
    assert_eq!(keys, [b"p/a".to_vec(), b"p/b".to_vec(), b"p/c".to_vec()]);
    assert_eq!((all.count, all.more), (3, false));
    let limited = RangeRequest {
        limit: 2,
        ..prefix("p/")
    };
    let page = t.etcd().range(&limited, 0).unwrap();
    assert_eq!((page.kvs.len(), page.more, page.count), (2, true, 3));
    let newest_first = RangeRequest {
        sort_order: SortOrder::Descend,
        sort_target: SortTarget::Create,
        limit: 1,
        ..prefix("p/")
    };
    let newest = t.etcd().range(&newest_first, 0).unwrap();
    assert_eq!(&*newest.kvs[0].key, b"p/b");
    let counted = RangeRequest {
        count_only: true,
        ..prefix("p/")
    };
    let counted = t.etcd().range(&counted, 0).unwrap();
    assert_eq!((counted.kvs.len(), counted.count), (0, 3));
    let from_key = RangeRequest {
        key: b"p/b".to_vec(),
        range_end: vec![0],
        keys_only: true,
        ..RangeRequest::default()
    };
    let from = t.etcd().range(&from_key, 0).unwrap();
    assert_eq!(from.kvs.len(), 3);
    assert!(from.kvs.iter().all(|kv| kv.value.is_empty()));
    let now = t.etcd().revision();
    assert_eq!(
        t.etcd().range(&prefix("p/"), now - 1),
        Err(EtcdRefusal::Compacted {
            compact_revision: now
        })
    );
    assert_eq!(
        t.etcd().range(&prefix("p/"), now + 1),
        Err(EtcdRefusal::FutureRevision)
    );
    assert!(t.etcd().range(&prefix("p/"), now).is_ok());
}

#[test]
fn a_watch_before_the_compaction_is_told_where_history_starts() {
    let mut t = LeaseTable::default();
    for n in 0..5 {
        answer(t.apply(&at(n, one(put("w", &n.to_string(), 0)))));
    }
    let all = t.etcd().history().since(2, Span::One(b"w"), 100).unwrap();
    assert_eq!(all.events.len(), 5);
    let two = t.etcd().history().since(2, Span::One(b"w"), 2).unwrap();
    assert_eq!((two.events.len(), two.resume_at), (2, Some(4)));
    answer(t.apply(&at(9, EtcdOp::Compact { revision: 4 })));
    assert_eq!(
        t.etcd()
            .history()
            .since(3, Span::One(b"w"), 100)
            .unwrap_err(),
        4
    );
    assert_eq!(
        t.etcd()
            .history()
            .since(4, Span::One(b"w"), 100)
            .unwrap()
            .events
            .len(),
        3
    );
    let again = answer(t.apply(&at(9, EtcdOp::Compact { revision: 3 })));
    assert_eq!(
        again.answer,
        EtcdAnswer::Refused(EtcdRefusal::Compacted {
            compact_revision: 4
        })
    );
}

#[test]
fn transactions_that_write_a_key_twice_or_are_too_long_are_refused_at_the_edge() {
    let twice = txn(vec![], vec![put("a", "1", 0), put("a", "2", 0)], vec![]);
    let refused = validate(&twice).unwrap_err();
    assert!(refused.to_string().contains("duplicate key"), "{refused}");
    let deleted_then_put = txn(
        vec![],
        vec![
            RequestOp::DeleteRange(DeleteRangeRequest {
                key: b"a".to_vec(),
                range_end: b"c".to_vec(),
                prev_kv: false,
            }),
            put("b", "2", 0),
        ],
        vec![],
    );
    assert!(validate(&deleted_then_put).is_err());
    let branches_apart = txn(vec![], vec![put("a", "1", 0)], vec![put("a", "2", 0)]);
    assert!(validate(&branches_apart).is_ok(), "only one branch runs");
    let long = txn(
        vec![],
        (0..129).map(|n| put(&n.to_string(), "", 0)).collect(),
        vec![],
    );
    assert!(validate(&long)
        .unwrap_err()
        .to_string()
        .contains("too many operations"));
    assert!(validate(&one(put("", "v", 0)))
        .unwrap_err()
        .to_string()
        .contains("key is not provided"));
}

#[test]
fn a_table_with_etcd_keys_round_trips_and_one_without_encodes_as_before() {
    let mut t = LeaseTable::default();
    let plain = postcard::to_allocvec(&t).unwrap();
    assert_eq!(t.format(), crate::format::FORMAT_1);
    let granted = answer(t.apply(&at(5, EtcdOp::LeaseGrant { id: 7, ttl_s: 60 })));
    assert!(matches!(
        granted.answer,
        EtcdAnswer::LeaseGranted { id: 7, .. }
    ));
    answer(t.apply(&at(6, one(put("k", "v", 7)))));
    assert_eq!(t.format(), crate::format::FORMAT_3);
    let bytes = postcard::to_allocvec(&t).unwrap();
    let (_, keyspace): (LeaseTable, _) = postcard::take_from_bytes(&bytes).unwrap();
    assert!(!keyspace.is_empty(), "the keyspace follows the table");
    let loaded = LeaseTable::from_bytes(&bytes).unwrap();
    assert_eq!(loaded.digest(), t.digest());
    assert_eq!(get(&loaded, "k"), get(&t, "k"));
    assert_eq!(loaded.etcd().lease_keys(7).count(), 1);
    assert_eq!(loaded.etcd().revision(), t.etcd().revision());
    let (_, nothing): (LeaseTable, _) = postcard::take_from_bytes(&plain).unwrap();
    assert!(
        nothing.is_empty(),
        "no byte for a keyspace never written to"
    );
    let empty = LeaseTable::from_bytes(&plain).unwrap();
    assert_eq!(empty.digest(), LeaseTable::default().digest());
}

#[test]
fn with_the_policy_on_a_lease_serves_only_the_identity_that_granted_it() {
    use crate::auth::{AuthChange, Grant, Permission};
    let mut t = LeaseTable::default();
    t.apply(&as_(
        "root",
        Op::Auth(AuthChange::Enable {
            admin: "root".into(),
        }),
    ));
    let grants = vec![
        Grant {
            permission: Permission::Write,
            prefix: "app/".into(),
        },
        Grant {
            permission: Permission::ReadKeys,
            prefix: "app/".into(),
        },
    ];
    t.apply(&as_(
        "root",
        Op::Auth(AuthChange::PutRole {
            name: "app".into(),
            grants,
        }),
    ));
    for who in ["a", "b"] {
        t.apply(&as_(
            "root",
            Op::Auth(AuthChange::Bind {
                identity: who.into(),
                role: "app".into(),
            }),
        ));
    }
    let granted = answer(t.apply(&as_("a", Op::Etcd(EtcdOp::LeaseGrant { id: 0, ttl_s: 10 }))));
    let EtcdAnswer::LeaseGranted { id, .. } = granted.answer else {
        panic!("{granted:?}")
    };
    let theirs = answer(t.apply(&as_("b", Op::Etcd(EtcdOp::LeaseKeepAlive { id }))));
    assert_eq!(
        theirs.answer,
        EtcdAnswer::Refused(EtcdRefusal::NotLeaseOwner { id })
    );
    let attach = answer(t.apply(&as_("b", Op::Etcd(one(put("app/x", "", id))))));
    assert_eq!(
        attach.answer,
        EtcdAnswer::Refused(EtcdRefusal::NotLeaseOwner { id })
    );
    let outside = t.apply(&as_("a", Op::Etcd(one(put("other/x", "", id)))));
    assert!(matches!(outside, Outcome::Denied(_)), "{outside:?}");
    let own = answer(t.apply(&as_("a", Op::Etcd(one(put("app/x", "", id))))));
    assert!(matches!(own.answer, EtcdAnswer::Txn(_)), "{own:?}");
}

#[test]
fn deletes_may_overlap_in_a_transaction_and_a_put_may_not_meet_one() {
    let delete = |key: &str, end: &str| {
        RequestOp::DeleteRange(DeleteRangeRequest {
            key: key.into(),
            range_end: end.into(),
            prev_kv: false,
        })
    };
    assert!(validate(&txn(
        vec![],
        vec![delete("a", "c"), delete("b", "d")],
        vec![]
    ))
    .is_ok());
    assert!(validate(&txn(
        vec![],
        vec![delete("a", "c"), put("b", "v", 0)],
        vec![]
    ))
    .is_err());
}

#[test]
fn a_prefix_request_is_authorized_by_its_prefix_not_by_what_it_shares_with_its_end() {
    // `get --prefix app/` asks app/ to app0.
    assert_eq!(span_prefix(b"app/", b"app0"), "app/");
    assert_eq!(span_prefix(b"app/a", b"app/c"), "app/");
    assert_eq!(span_prefix(b"a\xff", b"b"), "a\u{fffd}");
    assert_eq!(span_prefix(b"app/", b"\0"), "");
    assert_eq!(span_prefix(b"k", b""), "k");
}

#[test]
fn a_compare_over_an_empty_range_compares_a_key_of_zeros_as_etcd_does() {
    let mut t = LeaseTable::default();
    let over_empty = |result| Compare {
        result,
        target: CompareTarget::Version(0),
        key: b"none/".to_vec(),
        range_end: b"none0".to_vec(),
    };
    let succeeded = |t: &mut LeaseTable, c| match answer(
        t.apply(&at(1, txn(vec![c], vec![], vec![]))),
    )
    .answer
    {
        EtcdAnswer::Txn(t) => t.succeeded,
        other => panic!("{other:?}"),
    };
    assert!(succeeded(&mut t, over_empty(CompareResult::Equal)));
    assert!(!succeeded(&mut t, over_empty(CompareResult::Greater)));
}

#[test]
fn a_chosen_lease_id_after_the_largest_possible_wraps_to_the_first_free() {
    let mut t = LeaseTable::default();
    let grant = |t: &mut LeaseTable, id| {
        answer(t.apply(&at(1, EtcdOp::LeaseGrant { id, ttl_s: 60 }))).answer
    };
    assert!(matches!(
        grant(&mut t, i64::MAX),
        EtcdAnswer::LeaseGranted { id: i64::MAX, .. }
    ));
    assert_eq!(
        grant(&mut t, 0),
        EtcdAnswer::LeaseGranted { id: 1, ttl_s: 60 }
    );
    assert_eq!(
        grant(&mut t, 0),
        EtcdAnswer::LeaseGranted { id: 2, ttl_s: 60 }
    );
}

#[test]
fn a_watch_from_the_revision_just_read_is_served_by_a_table_loaded_from_a_snapshot() {
    let mut t = LeaseTable::default();
    answer(t.apply(&at(1, one(put("w/a", "1", 0)))));
    let read_at = t.etcd().revision();
    let loaded = LeaseTable::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
    // etcd's lock watches from the revision of its read: nothing there is lost.
    let since = loaded
        .etcd()
        .history()
        .since(read_at, Span::From(b""), 10)
        .unwrap();
    assert_eq!(
        since.events.len(),
        1,
        "the put at the revision read is kept"
    );
    assert_eq!(
        loaded.etcd().history().first_kept(),
        t.etcd().history().first_kept()
    );
}

#[test]
fn with_the_policy_on_an_anonymous_caller_gets_no_lease_and_a_revoke_needs_the_keys_delete() {
    use crate::auth::{AuthChange, Grant, Permission};
    let mut t = LeaseTable::default();
    t.apply(&as_(
        "root",
        Op::Auth(AuthChange::Enable {
            admin: "root".into(),
        }),
    ));
    let anonymous = t.apply(&at(1, EtcdOp::LeaseGrant { id: 0, ttl_s: 10 }));
    assert!(matches!(anonymous, Outcome::Denied(_)), "{anonymous:?}");
    let writes = vec![Grant {
        permission: Permission::Write,
        prefix: "app/".into(),
    }];
    t.apply(&as_(
        "root",
        Op::Auth(AuthChange::PutRole {
            name: "w".into(),
            grants: writes,
        }),
    ));
    t.apply(&as_(
        "root",
        Op::Auth(AuthChange::Bind {
            identity: "a".into(),
            role: "w".into(),
        }),
    ));
    let granted = answer(t.apply(&as_("a", Op::Etcd(EtcdOp::LeaseGrant { id: 0, ttl_s: 10 }))));
    let EtcdAnswer::LeaseGranted { id, .. } = granted.answer else {
        panic!("{granted:?}")
    };
    answer(t.apply(&as_("a", Op::Etcd(one(put("app/x", "v", id))))));
    // `a` may write app/ but not delete there: revoking would delete app/x.
    let revoke = t.apply(&as_("a", Op::Etcd(EtcdOp::LeaseRevoke { id })));
    assert!(matches!(revoke, Outcome::Denied(_)), "{revoke:?}");
    // And a put's previous value is a read.
    let prev = PutRequest {
        key: b"app/x".to_vec(),
        value: b"w".to_vec(),
        prev_kv: true,
        ..PutRequest::default()
    };
    let read_back = t.apply(&as_("a", Op::Etcd(one(RequestOp::Put(prev)))));
    assert!(matches!(read_back, Outcome::Denied(_)), "{read_back:?}");
}

#[test]
fn a_lease_holds_a_bounded_number_of_keys_so_its_end_is_one_revision_of_bounded_work() {
    use crate::limits::ETCD_MAX_KEYS_PER_LEASE;
    let mut t = LeaseTable::default();
    let granted = answer(t.apply(&at(0, EtcdOp::LeaseGrant { id: 0, ttl_s: 1 })));
    let EtcdAnswer::LeaseGranted { id, .. } = granted.answer else {
        panic!()
    };
    for n in 0..ETCD_MAX_KEYS_PER_LEASE {
        answer(t.apply(&at(0, one(put(&format!("k/{n}"), "v", id)))));
    }
    let before = t.clone();
    let one_more = answer(t.apply(&at(0, one(put("k/last", "v", id)))));
    let max = ETCD_MAX_KEYS_PER_LEASE;
    assert_eq!(
        one_more.answer,
        EtcdAnswer::Refused(EtcdRefusal::TooManyLeaseKeys { id, max })
    );
    // Refused before it changed anything (it runs on the keyspace's own maps).
    assert_eq!(t.etcd(), before.etcd());
    assert_eq!(t.etcd().digest(), before.etcd().digest());
    assert_eq!(events(&t), events(&before));
    // A key already on the lease is written again.
    assert!(matches!(
        answer(t.apply(&at(0, one(put("k/0", "w", id))))).answer,
        EtcdAnswer::Txn(_)
    ));
    let before = t.etcd().revision();
    t.apply(&Command {
        at_ms: Some(1_000),
        request: None,
        op: Op::Tick,
    });
    assert_eq!(t.etcd().key_count(), 0, "every key went at once");
    assert_eq!(t.etcd().revision(), before + 1, "at one revision");
}
