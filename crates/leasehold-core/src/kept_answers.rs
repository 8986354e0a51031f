//! The answers one session keeps for its retries: up to [`SESSION_ANSWERS`] of them, the
//! highest sequences, in sequence order.
//!
//! Kept in one array behind an `Arc`, not in a [`Map`](crate::Map): answers arrive in about
//! ascending order and leave from the bottom, which leaves a B-tree's leaves half full, while
//! an array holds the same entries with no room between them. A probe of 1,000 sessions of 128
//! answers each measured 12,320 heap bytes per session in the map and 6,144 in the array. The
//! array is shared by the table's clones as the map's nodes were: a snapshot costs a session
//! that answers during its encoding one copy of its array, at its first change.
//!
//! [`SESSION_ANSWERS`]: crate::limits::SESSION_ANSWERS

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Outcome;

/// One kept answer: the fingerprint of the operation and the answer it got.
pub(crate) type Kept = (u64, Outcome);

/// A session's kept answers by sequence: encoded as the map it was, `{sequence: (fingerprint,
/// answer)}` in sequence order, so snapshots and digests are those of earlier builds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeptAnswers(Arc<VecDeque<(u64, Kept)>>);

impl KeptAnswers {
    /// The answer kept for `sequence`, if any.
    pub fn get(&self, sequence: u64) -> Option<&Kept> {
        let at = position(&self.0, sequence).ok()?;
        Some(&self.0[at].1)
    }

    /// Every kept answer, in sequence order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Kept)> {
        self.0.iter().map(|(sequence, kept)| (*sequence, kept))
    }

    /// Keeps `kept` for `sequence`, then drops the lowest sequences while more than `limit`
    /// are kept (this one too, should it be the lowest), telling `dropped` each one, lowest
    /// first. Gives back the answer `sequence` had, if it had one: replaced, and nothing
    /// dropped. (Sessions never replace one: a kept sequence is answered, not applied again.)
    pub fn keep(
        &mut self,
        sequence: u64,
        kept: Kept,
        limit: usize,
        mut dropped: impl FnMut(u64, Kept),
    ) -> Option<Kept> {
        let answers = Arc::make_mut(&mut self.0);
        let mut at = match position(answers, sequence) {
            Ok(at) => return Some(std::mem::replace(&mut answers[at].1, kept)),
            Err(at) => at,
        };
        let mut new = Some((sequence, kept));
        // Dropped before the new one goes in, so that a full array never grows.
        while answers.len() + usize::from(new.is_some()) > limit {
            match new.take_if(|_| at == 0) {
                Some((sequence, kept)) => dropped(sequence, kept),
                None => {
                    let Some((sequence, kept)) = answers.pop_front() else {
                        break;
                    };
                    dropped(sequence, kept);
                    at = at.saturating_sub(1);
                }
            }
        }
        if let Some(new) = new {
            if answers.len() == answers.capacity() {
                // Grown as a Vec grows (doubling), but never past the limit: a copy made for a
                // snapshot has no room to spare, and plain doubling from it would overshoot.
                let room = (answers.capacity() * 2).clamp(answers.len() + 1, limit);
                answers.reserve_exact(room - answers.len());
            }
            answers.insert(at, new);
        }
        None
    }
}

/// Where `sequence` is kept in `answers`, or where it would go. A new request's sequence is past
/// every kept one, which the last entry tells without a search (one is about seven probes into
/// a 6 KB array, for every command of every session: 1.2-2% of each node's CPU in a profile of
/// 64 clients' puts).
fn position(answers: &VecDeque<(u64, Kept)>, sequence: u64) -> Result<usize, usize> {
    match answers.back() {
        Some((last, _)) if sequence > *last => Err(answers.len()),
        _ => answers.binary_search_by_key(&sequence, |(s, _)| *s),
    }
}

impl Serialize for KeptAnswers {
    fn serialize<S: serde::Serializer>(&self, encoder: S) -> Result<S::Ok, S::Error> {
        encoder.collect_map(self.0.iter().map(|(sequence, kept)| (sequence, kept)))
    }
}

impl<'de> Deserialize<'de> for KeptAnswers {
    /// Through the map it was: entries in any order, a repeated sequence keeping its last.
    fn deserialize<D: serde::Deserializer<'de>>(decoder: D) -> Result<Self, D::Error> {
        let map: crate::Map<u64, Kept> = crate::decode_map(decoder)?;
        Ok(KeptAnswers(Arc::new(map.into_iter().collect())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(token: u64) -> Kept {
        (token, Outcome::Released { token })
    }

    fn kept(answers: &KeptAnswers) -> Vec<u64> {
        answers.iter().map(|(sequence, _)| sequence).collect()
    }

    /// Keeps each sequence of `sequences` in `answers` under `limit`, gathering what is dropped.
    fn keep_all(answers: &mut KeptAnswers, sequences: &[u64], limit: usize) -> Vec<u64> {
        let mut dropped = Vec::new();
        for &sequence in sequences {
            let replaced = answers.keep(sequence, answer(sequence), limit, |s, (fp, _)| {
                assert_eq!(s, fp, "an answer dropped under another sequence");
                dropped.push(s);
            });
            if let Some((fp, _)) = replaced {
                assert_eq!(fp, sequence, "another sequence's answer replaced");
                dropped.push(sequence);
            }
        }
        dropped
    }

    /// 128 answers of 48 bytes in one array: 6 KB a session (the map took 12 KB with
    /// `Outcome` at 32 bytes, 28 KB with it at 96, before its refusals shared names and boxed
    /// the rare one of four strings).
    #[test]
    fn a_kept_answer_takes_six_words() {
        assert_eq!(std::mem::size_of::<Outcome>(), 32);
        assert_eq!(std::mem::size_of::<(u64, Kept)>(), 48);
    }

    #[test]
    fn the_highest_sequences_are_kept_in_order_and_the_lowest_dropped() {
        let mut answers = KeptAnswers::default();
        let dropped = keep_all(&mut answers, &[5, 1, 9, 3, 7, 2, 8], 4);
        assert_eq!(kept(&answers), vec![5, 7, 8, 9]);
        // 2 came in below every kept sequence of a full array: dropped at once.
        assert_eq!(dropped, vec![1, 2, 3]);
        assert_eq!(answers.get(7), Some(&answer(7)));
        assert_eq!(answers.get(3), None);
    }

    #[test]
    fn the_same_as_a_map_dropping_its_lowest_after_each_insert() {
        let mut answers = KeptAnswers::default();
        let mut map = std::collections::BTreeMap::new();
        let mut map_dropped = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut sequences = Vec::new();
        for i in 0..2_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly ascending, as a client's requests arrive, some late by up to 40.
            let sequence = (i + 40).saturating_sub(x % 48);
            if map.insert(sequence, ()).is_some() {
                map_dropped.push(sequence);
            }
            while map.len() > 32 {
                map_dropped.push(map.pop_first().unwrap().0);
            }
            sequences.push(sequence);
        }
        let dropped = keep_all(&mut answers, &sequences, 32);
        assert_eq!(kept(&answers), map.keys().copied().collect::<Vec<_>>());
        let sorted = |mut v: Vec<u64>| {
            v.sort_unstable();
            v
        };
        assert_eq!(sorted(dropped), sorted(map_dropped));
    }

    #[test]
    fn a_full_array_never_grows_past_the_limit_nor_does_its_copy() {
        let mut answers = KeptAnswers::default();
        keep_all(&mut answers, &(1..=100).collect::<Vec<_>>(), 128);
        // A clone, as a snapshot holds one: the next change copies the array, without room.
        let snapshot = answers.clone();
        keep_all(&mut answers, &(101..=1_000).collect::<Vec<_>>(), 128);
        assert_eq!(answers.0.capacity(), 128);
        assert_eq!(kept(&answers), (873..=1_000).collect::<Vec<_>>());
        assert_eq!(kept(&snapshot), (1..=100).collect::<Vec<_>>());
    }

    #[test]
    fn encoded_as_the_map_it_was() {
        let mut answers = KeptAnswers::default();
        keep_all(&mut answers, &[3, 1, 2], 128);
        let mut map = crate::Map::new();
        for sequence in [1, 2, 3] {
            map.insert(sequence, answer(sequence));
        }
        let bytes = postcard::to_allocvec(&answers).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&crate::Encoded(&map)).unwrap());
        let decoded: KeptAnswers = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(decoded, answers);
    }
}
