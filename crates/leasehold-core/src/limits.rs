//! Every bound of the core: on what a client may send, checked at the edge before anything is
//! proposed ([`Limits`]), and on what the table keeps and does in one command. The node's own
//! sizes and timeouts are the node crate's.

use crate::{Fence, Op, Renewal};

/// The limits every node enforces. One place, so the error messages and the checks agree.
pub struct Limits;

impl Limits {
    /// The longest lease or holder name, in bytes of UTF-8.
    pub const MAX_NAME_BYTES: usize = 128;
    /// The longest row key, in bytes of UTF-8.
    pub const MAX_KEY_BYTES: usize = 512;
    /// The largest row value, in bytes: 64 KiB.
    pub const MAX_VALUE_BYTES: usize = 64 * 1024;
    /// Below this a holder cannot renew in time over a network with fsyncs on the path.
    pub const MIN_TTL_MS: u64 = 100;
    /// The longest TTL one acquire may ask for, in milliseconds: a day.
    pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;
    /// How much longer than asked the store holds every grant and renewal under the default
    /// clock, in milliseconds: more than its time may gain on real time in the moment a
    /// leader's clock changes rate, before its voters' readings show it (up to the node's
    /// `CLOCK_TRAIL`, 100 ms, from the trail read at the old pace, and as much again as the
    /// readings' answers came late and then early: 85 ms in all at worst in the node's tests,
    /// answers 1-250 ms late and a clock doubling; 109 ms at 1-500 ms). So a lease lives at
    /// least its TTL in real time even then; Chubby's master holds its leases longer than its
    /// clients count them for the same reason.
    pub const GRANT_MARGIN_MS: u64 = 150;
    /// The furthest one advance may move store time, in milliseconds: a year.
    pub const MAX_ADVANCE_MS: u64 = 365 * 24 * 60 * 60 * 1000;
    /// The most leases one renewal names: with the longest names it still fits a client's
    /// message, so 10,000 leases at a 10 s TTL take 20 renewals every third of it.
    pub const MAX_RENEWALS: usize = 512;
    /// The entries a page of `ListLeases` or `ListKeys` holds when the caller names no limit.
    pub const LIST_PAGE: usize = 100;
    /// The most entries a caller may ask of one page. (The node also ends a page of rows at a
    /// bound on its bytes, since 1,000 of the largest rows are 64 MiB.)
    pub const MAX_LIST_PAGE: usize = 1_000;
}

/// Checks a listing's page: a prefix no longer than a name (`max`), a continuation that
/// continues a listing of that prefix, and a limit up to [`Limits::MAX_LIST_PAGE`]; the page's
/// size, with 0 read as [`Limits::LIST_PAGE`].
pub fn list_page(
    prefix: &str,
    page_token: &str,
    limit: u32,
    max: usize,
) -> Result<usize, InvalidInput> {
    if prefix.len() > max {
        return Err(InvalidInput::new(
            "page.prefix",
            format!("must be at most {max} bytes, got {}", prefix.len()),
        ));
    }
    if !page_token.is_empty() && (page_token.len() > max || !page_token.starts_with(prefix)) {
        return Err(InvalidInput::new(
            "page.page_token",
            format!(
                "continues no listing of the prefix {prefix:?}: pass the next_page_token of the \
                 previous page with the same prefix, or none for the first page"
            ),
        ));
    }
    match limit as usize {
        0 => Ok(Limits::LIST_PAGE),
        limit if limit <= Limits::MAX_LIST_PAGE => Ok(limit),
        limit => Err(InvalidInput::new(
            "page.limit",
            format!("must be at most {}, got {limit}", Limits::MAX_LIST_PAGE),
        )),
    }
}

/// Leases one [`Op::Forget`] drops at most, so that applying it stays short; the leader logs
/// another while more are due.
pub const FORGET_BATCH: usize = 4_096;

/// How many answers each session keeps: more than a client has in flight (its sequences under
/// way span fewer, `leasehold_client::limits::SEQUENCE_SPAN`).
pub const SESSION_ANSWERS: usize = 128;

/// A session not heard from for this long in store time expires.
pub const SESSION_IDLE_MS: u64 = 60 * 60 * 1000;

/// Roles one policy holds at most, the admin role included (see `auth`).
pub const MAX_ROLES: usize = 1_024;

/// Grants one role holds at most.
pub const MAX_GRANTS_PER_ROLE: usize = 64;

/// Roles one identity is bound to at most.
pub const MAX_ROLES_PER_IDENTITY: usize = 16;

/// Identities one policy binds at most.
pub const MAX_BOUND_IDENTITIES: usize = 65_536;

/// Bearer tokens one policy knows at most (their SHA-256, never the tokens).
pub const MAX_TOKENS: usize = 65_536;

/// The longest etcd key (and range end), in bytes. etcd bounds keys only by its request size
/// (1.5 MiB); locks, elections and configuration keys are far shorter.
pub const ETCD_MAX_KEY_BYTES: usize = 4 * 1024;

/// The longest TTL an etcd lease may be granted, in seconds: etcd's own bound.
pub const ETCD_MAX_LEASE_TTL_S: i64 = 9_000_000_000;

/// Compares, or requests of one branch, in one etcd transaction, nested ones included: etcd's
/// default (`--max-txn-ops`).
pub const ETCD_MAX_TXN_OPS: usize = 128;

/// The most keys one etcd range answers: a range over more is refused unless its `limit` asks
/// for fewer, so that one read cannot make a node gather its whole keyspace into one message.
/// A range inside a transaction is applied, so its answer is replicated state: changing this
/// changes what entries already logged answer, and needs a new log format.
pub const ETCD_MAX_RANGE_KEYS: usize = 10_000;

/// Keys deleted and leases ended by the expiry one command brings, at most: 100,000 etcd leases
/// that run out together are ended over many entries, none of which stalls the others'
/// applies; the leader logs ticks while more are due. Which revision each deletion gets follows
/// from it: changing it needs a new log format, as for [`ETCD_MAX_RANGE_KEYS`].
pub const ETCD_EXPIRY_WORK: usize = 1_000;

/// The most keys one etcd lease holds: no more than one command ends, so that a lease that runs
/// out or is revoked deletes its keys whole, at one revision, in bounded work. etcd's sessions
/// attach a few keys each. Part of the replicated answers: a change needs a new log format.
pub const ETCD_MAX_KEYS_PER_LEASE: usize = ETCD_EXPIRY_WORK;

/// The most etcd events kept for watches that resume at a revision (see `etcd::History`).
pub const ETCD_HISTORY_EVENTS: usize = 100_000;

/// The most bytes of keys and values those events keep: 64 MiB.
pub const ETCD_HISTORY_BYTES: usize = 64 * 1024 * 1024;

const _: () = {
    assert!(Limits::MIN_TTL_MS <= Limits::MAX_TTL_MS);
    assert!(
        Limits::MAX_TTL_MS <= Limits::MAX_ADVANCE_MS,
        "one advance of the manual clock can carry any lease past its expiry"
    );
};

/// Bad input, naming the field and the limit it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InvalidInput {
    /// The field at fault, by the name the client knows it by (`lease`, `ttl_ms`, ...; a path
    /// such as `leases[0].ttl_ms` for a field inside a list).
    pub field: std::borrow::Cow<'static, str>,
    /// What is wrong with it, naming the limit.
    pub problem: String,
}

impl InvalidInput {
    /// Bad input in `field`, described by `problem`.
    pub fn new(
        field: impl Into<std::borrow::Cow<'static, str>>,
        problem: impl Into<String>,
    ) -> Self {
        InvalidInput {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

fn ttl_field(ttl_ms: u64) -> Result<(), InvalidInput> {
    if !(Limits::MIN_TTL_MS..=Limits::MAX_TTL_MS).contains(&ttl_ms) {
        return Err(InvalidInput::new(
            "ttl_ms",
            format!(
                "must be between {} and {} ms, got {ttl_ms}",
                Limits::MIN_TTL_MS,
                Limits::MAX_TTL_MS
            ),
        ));
    }
    Ok(())
}

/// Checks an operation against [`Limits`] (an etcd write's own fields are the etcd module's,
/// which `crate::validate` checks beside these). Tokens are checked against the table at apply
/// time, since only the table knows which tokens a lease has handed out.
pub(crate) fn validate_fields(op: &Op) -> Result<(), InvalidInput> {
    match op {
        Op::Acquire {
            lease,
            holder,
            ttl_ms,
        } => {
            name("lease", lease, Limits::MAX_NAME_BYTES)?;
            name("holder", holder, Limits::MAX_NAME_BYTES)?;
            ttl_field(*ttl_ms)
        }
        Op::Release {
            lease,
            holder,
            token,
        } => {
            name("lease", lease, Limits::MAX_NAME_BYTES)?;
            name("holder", holder, Limits::MAX_NAME_BYTES)?;
            token_field(*token)
        }
        Op::Renew { leases } => renewals(leases),
        Op::Delete { key, fence } => {
            name("key", key, Limits::MAX_KEY_BYTES)?;
            fence_fields(fence.as_ref())
        }
        Op::Put { key, value, fence } => {
            name("key", key, Limits::MAX_KEY_BYTES)?;
            if value.len() > Limits::MAX_VALUE_BYTES {
                return Err(InvalidInput::new(
                    "value",
                    format!(
                        "must be at most {} bytes, got {}",
                        Limits::MAX_VALUE_BYTES,
                        value.len()
                    ),
                ));
            }
            fence_fields(fence.as_ref())
        }
        Op::Advance { by_ms } => {
            if !(1..=Limits::MAX_ADVANCE_MS).contains(by_ms) {
                return Err(InvalidInput::new(
                    "ms",
                    format!(
                        "must be between 1 and {} ms, got {by_ms}",
                        Limits::MAX_ADVANCE_MS
                    ),
                ));
            }
            Ok(())
        }
        Op::As {
            identity,
            bearer,
            op,
        } => as_fields(identity, bearer.as_deref(), op),
        Op::Auth(change) => change.validate(),
        Op::Tick | Op::Register | Op::Forget { .. } | Op::Close | Op::Etcd(_) => Ok(()),
    }
}

/// Validates a renewal's leases: at least one, at most [`Limits::MAX_RENEWALS`], each named
/// once and each valid as its own renewal would be.
fn renewals(leases: &[Renewal]) -> Result<(), InvalidInput> {
    if !(1..=Limits::MAX_RENEWALS).contains(&leases.len()) {
        return Err(InvalidInput::new(
            "leases",
            format!(
                "must name between 1 and {} leases, got {}",
                Limits::MAX_RENEWALS,
                leases.len()
            ),
        ));
    }
    let mut named = std::collections::HashSet::with_capacity(leases.len());
    for renewal in leases {
        name("lease", &renewal.lease, Limits::MAX_NAME_BYTES)?;
        name("holder", &renewal.holder, Limits::MAX_NAME_BYTES)?;
        token_field(renewal.token)?;
        ttl_field(renewal.ttl_ms)?;
        if !named.insert(renewal.lease.as_str()) {
            return Err(InvalidInput::new(
                "leases",
                format!(
                    "must name each lease once, {:?} is named twice",
                    renewal.lease
                ),
            ));
        }
    }
    Ok(())
}

/// Validates an operation logged with an identity: the identity, the token's SHA-256 if a token
/// gave it, and the operation, which acts as no further identity.
fn as_fields(identity: &str, bearer: Option<&str>, op: &Op) -> Result<(), InvalidInput> {
    identity_field(identity)?;
    if let Some(sha256) = bearer {
        sha256_field(sha256)?;
    }
    if let Op::As { .. } = op {
        return Err(InvalidInput::new(
            "identity",
            "an operation acts as one identity, not as one inside another",
        ));
    }
    validate_fields(op)
}

/// A bearer token's SHA-256, as the policy and the log carry it: 64 lowercase hex digits.
pub fn sha256_field(sha256: &str) -> Result<(), InvalidInput> {
    let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    if sha256.len() != 64 || !sha256.chars().all(hex) {
        return Err(InvalidInput::new(
            "sha256",
            "must be a SHA-256 in 64 lowercase hex digits",
        ));
    }
    Ok(())
}

/// An identity is a DNS name, as a certificate gives it: letters, digits, `-` and `.`. So it
/// holds no `/`, which would let one identity own another's holders (`a/x` owns `a/x/...`,
/// but so would `a` own `a/x`'s).
pub fn identity_field(identity: &str) -> Result<(), InvalidInput> {
    name("identity", identity, Limits::MAX_NAME_BYTES)?;
    let dns = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    if !identity.chars().all(dns) {
        return Err(InvalidInput::new(
            "identity",
            format!(
                "{identity:?} is not a DNS name: an identity is letters, digits, '-' and '.', \
                 as a certificate names it"
            ),
        ));
    }
    Ok(())
}

/// Validates a write's fence, if it has one: the lease's name and the token.
fn fence_fields(fence: Option<&Fence>) -> Result<(), InvalidInput> {
    match fence {
        Some(Fence { lease, token }) => {
            name("lease", lease, Limits::MAX_NAME_BYTES)?;
            token_field(*token)
        }
        None => Ok(()),
    }
}

/// Validates a lease, holder or key name: the same rules, a different field and limit.
pub fn name(field: &'static str, value: &str, max_bytes: usize) -> Result<(), InvalidInput> {
    if value.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    if value.len() > max_bytes {
        return Err(InvalidInput::new(
            field,
            format!("must be at most {max_bytes} bytes, got {}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(InvalidInput::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// Validates a token a client sent: tokens start at 1, so 0 was never handed out.
pub fn token_field(token: u64) -> Result<(), InvalidInput> {
    if token == 0 {
        return Err(InvalidInput::new(
            "token",
            "must be at least 1 (tokens start at 1)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(lease: &str, holder: &str, ttl_ms: u64) -> Op {
        Op::Acquire {
            lease: lease.into(),
            holder: holder.into(),
            ttl_ms,
        }
    }

    #[test]
    fn names_must_be_non_empty_bounded_and_printable() {
        assert_eq!(
            validate_fields(&acquire("", "a", 1000)).unwrap_err().field,
            "lease"
        );
        assert_eq!(
            validate_fields(&acquire("l", "", 1000)).unwrap_err().field,
            "holder"
        );
        let long = "x".repeat(Limits::MAX_NAME_BYTES + 1);
        let err = validate_fields(&acquire(&long, "a", 1000)).unwrap_err();
        assert!(err.to_string().contains("at most 128 bytes"), "{err}");
        assert!(validate_fields(&acquire("l\n", "a", 1000)).is_err());
        assert!(validate_fields(&acquire(&"x".repeat(Limits::MAX_NAME_BYTES), "a", 1000)).is_ok());
    }

    #[test]
    fn ttl_bounds_are_inclusive() {
        assert!(validate_fields(&acquire("l", "a", Limits::MIN_TTL_MS)).is_ok());
        assert!(validate_fields(&acquire("l", "a", Limits::MAX_TTL_MS)).is_ok());
        let low = validate_fields(&acquire("l", "a", Limits::MIN_TTL_MS - 1)).unwrap_err();
        assert_eq!(low.field, "ttl_ms");
        assert!(validate_fields(&acquire("l", "a", Limits::MAX_TTL_MS + 1)).is_err());
    }

    #[test]
    fn values_and_tokens_are_bounded() {
        let put = |len: usize, token: u64| Op::Put {
            key: "k".into(),
            value: vec![0; len],
            fence: Some(Fence {
                lease: "l".into(),
                token,
            }),
        };
        assert!(validate_fields(&put(Limits::MAX_VALUE_BYTES, 1)).is_ok());
        assert_eq!(
            validate_fields(&put(Limits::MAX_VALUE_BYTES + 1, 1))
                .unwrap_err()
                .field,
            "value"
        );
        assert_eq!(validate_fields(&put(1, 0)).unwrap_err().field, "token");
        assert_eq!(
            validate_fields(&Op::Advance { by_ms: 0 })
                .unwrap_err()
                .field,
            "ms"
        );
    }

    #[test]
    fn a_renewal_names_a_bounded_number_of_distinct_valid_leases() {
        let renew = |names: &[String], token: u64| Op::Renew {
            leases: names
                .iter()
                .map(|lease| Renewal {
                    lease: lease.clone(),
                    holder: "h".into(),
                    token,
                    ttl_ms: 1_000,
                })
                .collect(),
        };
        let names: Vec<String> = (0..=Limits::MAX_RENEWALS)
            .map(|i| format!("l{i}"))
            .collect();
        assert!(validate_fields(&renew(&names[..Limits::MAX_RENEWALS], 1)).is_ok());
        let err = validate_fields(&renew(&names, 1)).unwrap_err();
        assert_eq!(err.field, "leases");
        assert!(err.to_string().contains("between 1 and 512"), "{err}");
        assert_eq!(validate_fields(&renew(&[], 1)).unwrap_err().field, "leases");
        let twice = validate_fields(&renew(&["a".into(), "b".into(), "a".into()], 1)).unwrap_err();
        assert!(
            twice.to_string().contains("\"a\" is named twice"),
            "{twice}"
        );
        assert_eq!(
            validate_fields(&renew(&names[..2], 0)).unwrap_err().field,
            "token"
        );
        assert_eq!(
            validate_fields(&renew(&["".into()], 1)).unwrap_err().field,
            "lease"
        );
    }
}
