//! One call's attempts: which failures are worth another node, and whether a write that got no
//! answer may have been applied.

use leasehold_proto::wire::{CAPS_REACHED, NO_LEADER_REASON, REMOVED_REASON};
use leasehold_proto::{INDETERMINATE_KEY, ORIGIN_KEY, SESSION_KEY};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::error::{deepest_cause, describe, message_with_cause, ClientError};
use crate::limits::{MAX_ROUND_PAUSE, ROUND_PAUSE};
use std::time::Duration;

/// Worth trying elsewhere: the node asked did not answer in time, had no leader or quorum,
/// or its connection failed. Safe for writes too: every request carries a request id, and the
/// store answers a retry of an applied request with its first answer instead of applying it
/// again. Bad input, a wrong clock and broken invariants are final.
fn retryable(status: &Status) -> bool {
    let worth = matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::ResourceExhausted
    );
    // Past a cap (sessions, leases, rows) a write is refused at once by every node alike.
    worth
        && !CAPS_REACHED
            .iter()
            .any(|reason| refused_for(status, reason))
}

/// Whether `status` is a node's refusal for `reason`.
fn refused_for(status: &Status, reason: &str) -> bool {
    status.metadata().get(ORIGIN_KEY).is_some()
        && status
            .get_details_error_info()
            .is_some_and(|info| info.reason == reason)
}

/// Whether `status` is a node's word that the cluster removed it: it never serves again, so
/// the call asks it no more.
pub(crate) fn removed(status: &Status) -> bool {
    refused_for(status, REMOVED_REASON)
}

/// The pauses after each round of a call's attempts: from [`ROUND_PAUSE`], doubling up to
/// [`MAX_ROUND_PAUSE`], each stretched at random by up to as much again.
pub(crate) fn round_pauses() -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(ROUND_PAUSE)
        .with_max_delay(MAX_ROUND_PAUSE)
        .with_jitter()
        .without_max_times()
        .build()
}

/// Whether a call changes the store: only a write can be left indeterminate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    Read,
    Write,
}

/// What the call does after a failed attempt.
#[derive(Debug)]
pub(crate) enum Next {
    Retry,
    Stop(ClientError),
}

/// A call's failed attempts so far, and what they add up to.
///
/// A write is retried, under its one request id, whatever happened to the attempt before:
/// the store answers a retry of a request it already applied with its first answer instead of
/// applying it again. So an indeterminate attempt is retried too, and a later answer settles
/// it. Only when the call ends without an answer does it matter that an attempt may have
/// applied the write: then the error says so, whichever attempt it was.
#[derive(Debug)]
pub(crate) struct Attempts {
    effect: Effect,
    /// Why an attempt of this write may have applied it; `None` while none may have.
    applied_maybe: Option<String>,
}

impl Attempts {
    pub(crate) fn new(effect: Effect) -> Self {
        Attempts {
            effect,
            applied_maybe: None,
        }
    }

    /// Takes one attempt's failure. `gave_up` is why the call stops even if this failure is
    /// worth retrying (its deadline passed); `None` while there is time left.
    pub(crate) fn failed(&mut self, mut status: Status, gave_up: Option<String>) -> Next {
        if status.metadata().get(SESSION_KEY).is_some() {
            // "Not applied now, and maybe earlier": the node cannot know about earlier attempts,
            // but this call does. Only they can make the write indeterminate.
            status.metadata_mut().remove(INDETERMINATE_KEY);
        }
        let earlier = self.applied_maybe.take();
        let this = match self.effect {
            Effect::Write => applied_maybe(&status),
            Effect::Read => None,
        };
        let retry = retryable(&status);
        if retry && gave_up.is_none() {
            self.applied_maybe = earlier.or(this);
            return Next::Retry;
        }
        let last = match gave_up {
            Some(why) if retry => {
                // The last failure, unless the reason given already names it.
                let summary = match deepest_cause(&status) {
                    Some(cause) if why.contains(&cause) => why,
                    _ => format!("{why}; last: {}", message_with_cause(&status)),
                };
                let mut summary = Status::unavailable(summary);
                if status.metadata().get(INDETERMINATE_KEY).is_some() {
                    mark_indeterminate(&mut summary);
                }
                summary
            }
            _ => status,
        };
        Next::Stop(ClientError::Status(match (self.effect, earlier, this) {
            (Effect::Read, ..) => {
                let mut last = last;
                last.metadata_mut().remove(INDETERMINATE_KEY);
                last
            }
            (Effect::Write, None, None) => last,
            // The node's own message already says the write may have been applied.
            (Effect::Write, _, _) if last.metadata().get(INDETERMINATE_KEY).is_some() => last,
            (Effect::Write, Some(earlier), _) => indeterminate(
                &last,
                &format!("the write may have been applied by an earlier attempt: {earlier}"),
            ),
            (Effect::Write, None, Some(_)) => indeterminate(
                &last,
                "the last attempt's answer was lost, so the write may have been applied",
            ),
        }))
    }
}

/// Why the attempt that failed with `status` may have applied its write; `None` if it
/// certainly did not.
fn applied_maybe(status: &Status) -> Option<String> {
    if status.metadata().get(INDETERMINATE_KEY).is_some() {
        // The node says why: a lost quorum, a lost forward, a stop mid-write.
        return Some(status.message().to_owned());
    }
    if status.metadata().get(ORIGIN_KEY).is_some() || never_sent(status) {
        // A node's own determinate answer (no leader, bad input), or no connection at all.
        return None;
    }
    if matches!(status.code(), Code::OutOfRange | Code::Unimplemented) {
        // Refused by the server before any handler ran: a message over its size limit, or a
        // method it does not serve. No node produces these codes itself.
        return None;
    }
    // Anything else failed after the request may have left: the attempt's timeout fired, the
    // call was cancelled or reset, or the answer did not arrive or decode.
    Some(format!("its answer was lost ({})", describe(status)))
}

/// Only a connection that was never made proves the request was not sent: tonic reports a
/// failed connect (refused, timed out) as a `ConnectError` in the status's source chain.
fn never_sent(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// What one node's failed attempts of a call say of it, for a caller that gives up as soon as
/// every node is known unable to serve the call (`LeaseClient::with_quick_give_up`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum DeadEnd {
    /// Nothing known: it may answer the next attempt.
    #[default]
    Open,
    /// Its connection was refused this many times in a row: nothing listens there.
    Refusing(u32),
    /// It waited for an election and saw none end: it hears from no majority.
    NoLeader,
    /// Its TLS handshake failed over a certificate, as it will every time: what to mend.
    Certificate(String),
}

impl DeadEnd {
    /// What the node's failed attempt with `status` adds to what was known of it.
    pub(crate) fn after(&self, status: &Status) -> DeadEnd {
        if nothing_listens(status) {
            return match self {
                DeadEnd::Refusing(times) => DeadEnd::Refusing(times + 1),
                _ => DeadEnd::Refusing(1),
            };
        }
        if refused_for(status, NO_LEADER_REASON) {
            return DeadEnd::NoLeader;
        }
        match (certificate_refused(status), self) {
            (Some(why), _) => DeadEnd::Certificate(why),
            // A node that refused the certificate refuses it again: a connection it closed
            // before the alert was read (the transport then says only "closed") changes
            // nothing.
            (None, DeadEnd::Certificate(_)) if status.metadata().get(ORIGIN_KEY).is_none() => {
                self.clone()
            }
            (None, _) => DeadEnd::Open,
        }
    }
}

/// Why no node of `endpoints` can serve the call, given what each one's attempts said
/// (`ends`, in the same order); `None` while one may still answer.
///
/// A refused connection alone needs a second in a row, as a node restarting refuses for a
/// moment. Beside a node that waited out an election (no majority answers it) or refused a
/// certificate (which no retry mends), one refusal is enough.
pub(crate) fn no_way(ends: &[DeadEnd], endpoints: &[String]) -> Option<String> {
    let at = |pick: fn(&DeadEnd) -> bool| -> String {
        let named: Vec<&str> = endpoints
            .iter()
            .zip(ends)
            .filter(|(_, end)| pick(end))
            .map(|(endpoint, _)| endpoint.as_str())
            .collect();
        named.join(",")
    };
    let refusing = |end: &DeadEnd| matches!(end, DeadEnd::Refusing(_));
    if ends.contains(&DeadEnd::Open) {
        return None;
    }
    if let Some(DeadEnd::Certificate(why)) = ends
        .iter()
        .find(|end| matches!(end, DeadEnd::Certificate(_)))
    {
        return Some(format!(
            "the TLS handshake with {} failed: {why}",
            at(|end| matches!(end, DeadEnd::Certificate(_)))
        ));
    }
    if ends.contains(&DeadEnd::NoLeader) {
        let mut why = format!(
            "no leader was elected at {}",
            at(|end| *end == DeadEnd::NoLeader)
        );
        if ends.iter().any(refusing) {
            why += &format!(", and nothing listens at {}", at(refusing));
        }
        return Some(format!(
            "{why}: no majority of the cluster is up (`leasehold status` shows which nodes \
             are down; start them)"
        ));
    }
    ends.iter()
        .all(|end| matches!(end, DeadEnd::Refusing(times) if *times >= 2))
        .then(|| {
            format!(
                "nothing listens at {}: is the cluster running? (`leasehold cluster` runs a \
                 local one)",
                endpoints.join(",")
            )
        })
}

/// A TLS handshake that failed over a certificate, as it will however often it is tried: what
/// to mend, if `status` is one. rustls's error comes inside an `io::Error`, whose own `source`
/// skips it; once the connection serves, an alert the node sent comes as its text alone.
fn certificate_refused(status: &Status) -> Option<String> {
    use rustls::AlertDescription as Alert;
    // What the node says when it refuses this client's certificate.
    const REFUSALS: [Alert; 8] = [
        Alert::BadCertificate,
        Alert::UnsupportedCertificate,
        Alert::CertificateRevoked,
        Alert::CertificateExpired,
        Alert::CertificateUnknown,
        Alert::UnknownCA,
        Alert::CertificateRequired,
        // A signature that did not verify: the certificate's (another CA under the same name)
        // or the handshake's (a key that is not the certificate's).
        Alert::DecryptError,
    ];
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        source = error.source();
        let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        else {
            continue;
        };
        if let Some(e @ rustls::Error::InvalidCertificate(_)) = inner.downcast_ref() {
            return Some(format!(
                "this client does not trust the node's certificate ({e}): is --tls-ca the CA \
                 that signed the nodes' certificates?"
            ));
        }
        let text = inner.to_string();
        if REFUSALS
            .iter()
            .any(|alert| rustls::Error::AlertReceived(*alert).to_string() == text)
        {
            return Some(format!(
                "the node refused this client's certificate ({text}): show one that the \
                 cluster's CA signed (--tls-cert and --tls-key)"
            ));
        }
    }
    None
}

/// Whether the attempt's connection was refused: nothing listens at the node's address.
fn nothing_listens(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        let refused = error.downcast_ref::<std::io::Error>();
        if refused.is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        source = error.source();
    }
    false
}

fn mark_indeterminate(status: &mut Status) {
    status.metadata_mut().insert(
        INDETERMINATE_KEY,
        tonic::metadata::MetadataValue::from_static("true"),
    );
}

/// `status` with the mark, and `why` after its message.
fn indeterminate(status: &Status, why: &str) -> Status {
    let mut marked = Status::with_metadata(
        status.code(),
        format!("{}; {why}", status.message()),
        status.metadata().clone(),
    );
    mark_indeterminate(&mut marked);
    marked
}

/// Statuses as nodes and the transport produce them, for the tests of this crate.
#[cfg(test)]
pub(crate) mod statuses {
    use super::*;

    /// A status a node produced itself: marked so, and indeterminate if the node says so.
    pub(crate) fn node_says(code: Code, message: &str, indeterminate: bool) -> Status {
        let mut status = Status::new(code, message);
        status.metadata_mut().insert(
            ORIGIN_KEY,
            tonic::metadata::MetadataValue::from_static("node"),
        );
        if indeterminate {
            mark_indeterminate(&mut status);
        }
        status
    }

    /// A node's own plain UNAVAILABLE: this attempt was not applied.
    pub(crate) fn no_leader() -> Status {
        node_says(
            Code::Unavailable,
            "no leader was elected within 2000 ms",
            false,
        )
    }

    /// A node's own UNAVAILABLE for a write that may still be applied.
    pub(crate) fn no_quorum() -> Status {
        node_says(
            Code::Unavailable,
            "no quorum acknowledged the write within 3000 ms; it may or may not have been applied",
            true,
        )
    }

    /// A node's refusal of a request whose session it does not know.
    pub(crate) fn unknown_session() -> Status {
        let mut status = node_says(Code::Aborted, "the client session is not open", true);
        status.metadata_mut().insert(
            SESSION_KEY,
            tonic::metadata::MetadataValue::from_static("unknown"),
        );
        status
    }

    /// What tonic reports when the connection could not be made: the request was never sent.
    pub(crate) fn refused() -> Status {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        Status::from_error(Box::new(tonic::ConnectError(Box::new(io))))
    }

    /// What the client's own per-attempt timeout reports, with the request in flight.
    pub(crate) fn timed_out() -> Status {
        Status::from_error(Box::new(tonic::TimeoutExpired(())))
    }
}

#[cfg(test)]
mod tests {
    use super::statuses::*;
    use super::*;

    /// A write past a cap (sessions, leases, rows) is refused alike by every node: the call
    /// gives it back at once, where a node's other RESOURCE_EXHAUSTED (its requests at their
    /// limit) is worth another node.
    #[test]
    fn a_write_past_a_cap_is_not_retried() {
        for reason in CAPS_REACHED {
            let details = tonic_types::ErrorDetails::with_error_info(
                reason,
                leasehold_proto::wire::ERROR_DOMAIN,
                std::collections::HashMap::new(),
            );
            let mut exhausted =
                Status::with_error_details(Code::ResourceExhausted, "at its cap", details);
            assert!(
                retryable(&exhausted),
                "{reason}: not a node's word without its origin mark"
            );
            exhausted.metadata_mut().insert(
                ORIGIN_KEY,
                tonic::metadata::MetadataValue::from_static("node"),
            );
            assert!(!retryable(&exhausted), "{reason}");
        }
        let busy = node_says(Code::ResourceExhausted, "working on its limit", false);
        assert!(retryable(&busy));
    }

    /// Feeds `failures` to a fresh call's attempts, the last one at its deadline.
    fn outcome(effect: Effect, failures: Vec<Status>) -> ClientError {
        let mut attempts = Attempts::new(effect);
        let last = failures.len() - 1;
        for (i, status) in failures.into_iter().enumerate() {
            let gave_up = (i == last).then(|| "deadline passed".to_owned());
            match attempts.failed(status, gave_up) {
                Next::Stop(error) => return error,
                Next::Retry => assert!(i < last, "the call retried past its deadline"),
            }
        }
        panic!("the call neither answered nor stopped")
    }

    #[test]
    fn a_write_marked_indeterminate_once_stays_so_when_later_attempts_fail_plainly() {
        let e = outcome(Effect::Write, vec![no_quorum(), no_leader(), no_leader()]);
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.is_indeterminate(), "{e}");
        assert!(e.to_string().contains("may have been applied"), "{e}");
    }

    #[test]
    fn a_write_whose_attempt_timed_out_in_flight_is_indeterminate_at_the_deadline() {
        for lost in [
            timed_out(),
            Status::deadline_exceeded("deadline"),
            Status::cancelled("cancelled"),
            Status::unknown("transport error"),
            Status::unavailable("connection reset"),
        ] {
            let e = outcome(Effect::Write, vec![lost.clone(), no_leader()]);
            assert!(e.is_indeterminate(), "after {lost:?}: {e}");
            assert!(e.to_string().contains("may have been applied"), "{e}");
        }
    }

    #[test]
    fn a_write_whose_last_attempt_timed_out_at_the_deadline_is_indeterminate() {
        let e = outcome(Effect::Write, vec![no_leader(), timed_out()]);
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.is_indeterminate(), "{e}");
    }

    #[test]
    fn a_write_that_failed_for_good_after_a_lost_attempt_is_indeterminate() {
        let broken = node_says(Code::Internal, "invariant broken: broken", false);
        let e = outcome(Effect::Write, vec![timed_out(), broken]);
        assert_eq!(e.code(), Code::Internal, "{e}");
        assert!(e.is_indeterminate(), "{e}");
    }

    #[test]
    fn a_write_never_sent_or_refused_by_a_node_is_determinate() {
        let e = outcome(Effect::Write, vec![refused(), no_leader(), refused()]);
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(!e.is_indeterminate(), "{e}");
        assert!(!e.to_string().contains("may have been applied"), "{e}");

        let invalid = node_says(Code::FailedPrecondition, "advance is refused", false);
        let e = outcome(Effect::Write, vec![invalid]);
        assert_eq!(e.code(), Code::FailedPrecondition);
        assert!(!e.is_indeterminate(), "{e}");
    }

    #[test]
    fn a_final_error_the_node_marked_is_reported_as_it_came() {
        let forgotten = node_says(Code::Aborted, "the request's answer is forgotten", true);
        let e = outcome(Effect::Write, vec![no_leader(), forgotten.clone()]);
        assert_eq!(e.code(), Code::Aborted);
        assert!(e.is_indeterminate(), "{e}");
        assert!(e.to_string().contains(forgotten.message()), "{e}");
    }

    #[test]
    fn a_read_is_never_indeterminate() {
        for failures in [
            vec![timed_out(), no_leader()],
            vec![no_quorum(), timed_out()],
            vec![Status::unknown("transport error")],
        ] {
            let e = outcome(Effect::Read, failures);
            assert!(!e.is_indeterminate(), "{e}");
        }
    }

    /// A quick give-up waits while any node may still answer, and names the cause once none
    /// can: nothing listening (twice in a row), no majority, a refused certificate.
    #[test]
    fn no_way_is_said_only_once_every_node_is_a_dead_end() {
        use DeadEnd::*;
        let endpoints: Vec<String> = ["a:1", "b:2", "c:3"].map(String::from).into();
        let cert = || Certificate("it is not trusted".into());
        for open in [
            vec![Open, Refusing(2), Refusing(2)],
            vec![Refusing(1), Refusing(2), Refusing(2)],
            vec![NoLeader, Open, Refusing(1)],
            vec![cert(), Open, Open],
        ] {
            assert_eq!(no_way(&open, &endpoints), None, "{open:?}");
        }
        let nothing = no_way(&[Refusing(2), Refusing(3), Refusing(2)], &endpoints).unwrap();
        assert!(
            nothing.starts_with("nothing listens at a:1,b:2,c:3"),
            "{nothing}"
        );
        let minority = no_way(&[Refusing(1), NoLeader, Refusing(1)], &endpoints).unwrap();
        assert!(
            minority.starts_with("no leader was elected at b:2, and nothing listens at a:1,c:3")
                && minority.contains("no majority"),
            "{minority}"
        );
        let refused = no_way(&[cert(), Refusing(1), cert()], &endpoints).unwrap();
        assert!(
            refused.starts_with("the TLS handshake with a:1,c:3 failed: it is not trusted"),
            "{refused}"
        );

        let mut origin = tonic::metadata::MetadataMap::new();
        origin.insert(
            ORIGIN_KEY,
            tonic::metadata::MetadataValue::from_static("node"),
        );
        let info = tonic_types::ErrorDetails::with_error_info(
            NO_LEADER_REASON,
            leasehold_proto::wire::ERROR_DOMAIN,
            std::collections::HashMap::<String, String>::new(),
        );
        let told = Status::with_error_details_and_metadata(
            Code::Unavailable,
            "no leader was elected within 2000 ms",
            info,
            origin,
        );
        assert_eq!(Open.after(&told), NoLeader);
        assert_eq!(Refusing(1).after(&no_leader()), Open, "a plain UNAVAILABLE");
    }

    /// The pauses between rounds start short, double up to their ceiling, and each is
    /// stretched by its own jitter, so that two clients struck together part.
    #[test]
    fn round_pauses_double_to_a_ceiling_each_with_its_own_jitter() {
        let floors = [25, 50, 100, 200, 200, 200].map(Duration::from_millis);
        let drawn: Vec<Vec<Duration>> = (0..2).map(|_| round_pauses().take(6).collect()).collect();
        for pauses in &drawn {
            for (pause, floor) in pauses.iter().zip(floors) {
                assert!(*pause >= floor && *pause < 2 * floor, "{pauses:?}");
            }
        }
        assert_ne!(drawn[0], drawn[1], "two calls drew the same pauses");
    }
}
