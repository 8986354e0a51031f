//! One call's attempts: which failures are worth another node, and whether a write that got no
//! answer may have been applied.

use leasehold_proto::wire::CAPS_REACHED;
use leasehold_proto::{INDETERMINATE_KEY, ORIGIN_KEY, SESSION_KEY};
use tonic::{Code, Status};

use crate::error::{deepest_cause, describe, message_with_cause, ClientError};
use crate::failure::{certificate_refused, never_sent, refused_for};
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

/// Sleeps the next of `pauses` after a round of attempts, never past `left` (what is left of
/// the call's deadline).
pub(crate) async fn pause_within(pauses: &mut impl Iterator<Item = Duration>, left: Duration) {
    let pause = pauses.next().unwrap_or(MAX_ROUND_PAUSE);
    tokio::time::sleep(pause.min(left)).await;
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
    if status.metadata().get(ORIGIN_KEY).is_some()
        || never_sent(status)
        || certificate_refused(status).is_some()
    {
        // A node's own determinate answer (no leader, bad input), no connection at all, or a
        // handshake that failed: it served nothing, though the client had sent its request
        // (under TLS 1.3 a node judges the client's certificate after that).
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
    use tonic_types::StatusExt;

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

    /// A node's refusal for `reason`, as its ErrorInfo carries it.
    pub(crate) fn node_refused(code: Code, reason: &str) -> Status {
        let mut origin = tonic::metadata::MetadataMap::new();
        origin.insert(
            ORIGIN_KEY,
            tonic::metadata::MetadataValue::from_static("node"),
        );
        let info = tonic_types::ErrorDetails::with_error_info(
            reason,
            leasehold_proto::wire::ERROR_DOMAIN,
            std::collections::HashMap::<String, String>::new(),
        );
        Status::with_error_details_and_metadata(
            code,
            format!("the node says {reason}"),
            info,
            origin,
        )
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
    use tonic_types::StatusExt;

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
