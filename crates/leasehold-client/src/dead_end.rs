//! When a one-shot caller gives up before its deadline (`LeaseClient::with_quick_give_up`):
//! what each node's failed attempts say of it, and whether together they say that no node can
//! serve the call, and why. A program that must ride out a restart of the whole cluster waits
//! its deadline instead.

use leasehold_proto::wire::NO_MAJORITY;
use leasehold_proto::ORIGIN_KEY;
use tokio::time::Instant;
use tonic::Status;

use crate::failure::{certificate_refused, nothing_listens, refused_for};

/// What one node's failed attempts of a call say of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum DeadEnd {
    /// Nothing known: it may answer the next attempt.
    #[default]
    Open,
    /// Its connection was refused `times` in a row, the last at `last`: nothing listens there.
    Refusing { times: u32, last: Instant },
    /// It answered, at `at`, that it hears from no majority: it waited for an election and saw
    /// none end, or it leads and its quorum is silent.
    NoMajority { at: Instant },
    /// Its TLS handshake failed over a certificate at `at`, as it will every time: what to mend.
    Certificate { why: String, at: Instant },
    /// It said the cluster removed it: it never serves again.
    Removed,
}

impl DeadEnd {
    /// What the node's attempt that failed with `status` at `now` adds to what was known of it.
    pub(crate) fn after(&self, status: &Status, now: Instant) -> DeadEnd {
        if nothing_listens(status) {
            let times = match self {
                DeadEnd::Refusing { times, .. } => times + 1,
                _ => 1,
            };
            return DeadEnd::Refusing { times, last: now };
        }
        if NO_MAJORITY.iter().any(|reason| refused_for(status, reason)) {
            return DeadEnd::NoMajority { at: now };
        }
        match (certificate_refused(status), self) {
            (Some(why), _) => DeadEnd::Certificate { why, at: now },
            // A node that refused the certificate refuses it again: a connection it closed
            // before its alert was read (the transport then says only "closed") changes
            // nothing.
            (None, DeadEnd::Certificate { .. }) if status.metadata().get(ORIGIN_KEY).is_none() => {
                self.clone()
            }
            (None, _) => DeadEnd::Open,
        }
    }
}

/// Why no node of `endpoints` can serve the call, given what each one's attempts said
/// (`ends`, in the same order); `None` while one may still answer.
///
/// A refused connection counts once it came twice in a row (a node restarting refuses for a
/// moment), or once after the first word from another node that settles the matter: that it
/// hears from no majority, or that it refused the certificate. A refusal from before that word
/// may be from a node that has come up since (the word took its node an election wait).
pub(crate) fn no_way(ends: &[DeadEnd], endpoints: &[String]) -> Option<String> {
    let settled = ends
        .iter()
        .filter_map(|end| match end {
            DeadEnd::NoMajority { at } | DeadEnd::Certificate { at, .. } => Some(*at),
            _ => None,
        })
        .min();
    let refused = |end: &DeadEnd| match end {
        DeadEnd::Refusing { times, last } => *times >= 2 || settled.is_some_and(|at| *last >= at),
        _ => false,
    };
    let dead = |end: &DeadEnd| !matches!(end, DeadEnd::Open | DeadEnd::Refusing { .. });
    if !ends.iter().all(|end| dead(end) || refused(end)) {
        return None;
    }
    let at = |pick: &dyn Fn(&DeadEnd) -> bool| -> String {
        let named: Vec<&str> = (endpoints.iter().zip(ends))
            .filter(|(_, end)| pick(end))
            .map(|(endpoint, _)| endpoint.as_str())
            .collect();
        named.join(",")
    };
    let refusing = |end: &DeadEnd| matches!(end, DeadEnd::Refusing { .. });
    let and_nothing_listens = match ends.iter().any(refusing) {
        true => format!(", and nothing listens at {}", at(&refusing)),
        false => String::new(),
    };
    if let Some(DeadEnd::Certificate { why, .. }) = ends
        .iter()
        .find(|end| matches!(end, DeadEnd::Certificate { .. }))
    {
        let same = |end: &DeadEnd| matches!(end, DeadEnd::Certificate { why: w, .. } if w == why);
        return Some(format!(
            "the TLS handshake with {} failed: {why}",
            at(&same)
        ));
    }
    let hearing = |end: &DeadEnd| matches!(end, DeadEnd::NoMajority { .. });
    if ends.iter().any(hearing) {
        let (nodes, verb) = match ends.iter().filter(|end| hearing(end)).count() {
            1 => ("the node at", "hears"),
            _ => ("the nodes at", "hear"),
        };
        return Some(format!(
            "{nodes} {} {verb} from no majority of the cluster (no leader elected, or a leader's \
             quorum silent){and_nothing_listens}: no majority of the cluster is up, or those \
             that are cannot reach each other (`leasehold status` shows which nodes are down)",
            at(&hearing)
        ));
    }
    ends.iter()
        .all(|end| !refusing(end) || refused(end))
        .then(|| {
            format!(
                "nothing listens at {}: is the cluster running? (`leasehold cluster` runs a local \
             one)",
                at(&refusing)
            )
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::DeadEnd::*;
    use super::*;

    /// A quick give-up waits while any node may still answer, and names the cause once none
    /// can: nothing listening (twice in a row), no majority, a refused certificate. A refusal
    /// older than the word that settles it does not count alone.
    #[test]
    fn no_way_is_said_only_once_every_node_is_a_dead_end() {
        let t0 = Instant::now();
        let t = |ms: u64| t0 + Duration::from_millis(ms);
        let refusing = |times, ms| Refusing { times, last: t(ms) };
        let endpoints: Vec<String> = ["a:1", "b:2", "c:3"].map(String::from).into();
        let cert = |ms| Certificate {
            why: "it is not trusted".into(),
            at: t(ms),
        };
        for open in [
            vec![Open, refusing(2, 0), refusing(2, 0)],
            vec![refusing(1, 0), refusing(2, 0), refusing(2, 0)],
            vec![NoMajority { at: t(2000) }, Open, refusing(1, 2001)],
            // Refused before the survivor's election wait ended: asked again first.
            vec![refusing(1, 0), NoMajority { at: t(2000) }, refusing(1, 0)],
            vec![cert(0), Open, Open],
        ] {
            assert_eq!(no_way(&open, &endpoints), None, "{open:?}");
        }
        let nothing = [refusing(2, 0), refusing(3, 0), refusing(2, 0)];
        let nothing = no_way(&nothing, &endpoints).unwrap();
        assert!(
            nothing.starts_with("nothing listens at a:1,b:2,c:3"),
            "{nothing}"
        );
        for minority in [
            [
                refusing(1, 2001),
                NoMajority { at: t(2000) },
                refusing(1, 2002),
            ],
            [
                refusing(2, 100),
                NoMajority { at: t(2000) },
                refusing(2, 100),
            ],
        ] {
            let said = no_way(&minority, &endpoints).unwrap();
            assert!(
                said.starts_with("the node at b:2 hears from no majority")
                    && said.contains("nothing listens at a:1,c:3"),
                "{said}"
            );
        }
        let refused = no_way(&[cert(0), refusing(1, 1), cert(2)], &endpoints).unwrap();
        assert!(
            refused.starts_with("the TLS handshake with a:1,c:3 failed: it is not trusted"),
            "{refused}"
        );
        let removed = no_way(&[Removed, refusing(2, 0), refusing(2, 0)], &endpoints).unwrap();
        assert!(
            removed.starts_with("nothing listens at b:2,c:3"),
            "{removed}"
        );
    }

    /// A node's word that it hears from no majority, a certificate alert read after the
    /// handshake, and a "closed" connection after it, are each read for what they say.
    #[test]
    fn a_nodes_answers_are_read_for_the_dead_end_they_show() {
        use crate::attempts::statuses::{no_leader, node_refused};
        let now = Instant::now();
        for reason in NO_MAJORITY {
            let told = node_refused(tonic::Code::Unavailable, reason);
            assert_eq!(Open.after(&told, now), NoMajority { at: now }, "{reason}");
        }
        assert_eq!(Open.after(&no_leader(), now), Open, "a plain UNAVAILABLE");

        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::DecryptError);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, alert.to_string());
        let refused = Status::from_error(Box::new(io));
        let end = Open.after(&refused, now);
        assert!(
            matches!(&end, Certificate { why, .. } if why.contains("--tls-cert")),
            "{end:?}"
        );
        let closed = Status::unavailable("connection closed");
        assert_eq!(
            end.after(&closed, now),
            end,
            "a later close keeps the refusal"
        );

        let untrusted = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, untrusted);
        let expired = Open.after(&Status::from_error(Box::new(io)), now);
        assert!(
            matches!(&expired, Certificate { why, .. } if why.contains("renew")),
            "{expired:?}"
        );
    }
}
