//! One segment file's bytes: the record format, and the recovery table that decides how a
//! segment's records end (see the [module doc](super) for the format and the table).

use super::Entry;
use crate::limits::MAX_RECORD_BYTES;
use crate::raft::codec::{decode, encode};
use crate::raft::protocol;
use leasehold_core::format::{Format, FORMAT_1, LOG_FORMAT};

/// Every segment file starts with these bytes, the format's name and version (2). Version 1
/// had no magic and no header checksum; its segments are refused, never misread.
pub(super) const MAGIC: &[u8; 8] = b"LHSEG\x00\x00\x02";
/// `[header crc32 u32][length u32][payload crc32 u32]` before each entry. The length word's top
/// [`FORMAT_BITS`] hold the entry's log format when it is newer than 1 (0 for format 1, as in
/// every record before 0.2.0), so that a build meets a newer entry as such, not as corruption.
pub(super) const HEADER: u64 = 12;

/// Bits of the length word that hold the record's log format, above [`LENGTH_BITS`].
const FORMAT_BITS: u32 = 6;
/// Bits of the length word that hold the payload's length: 64 MiB, past [`MAX_RECORD_BYTES`].
const LENGTH_BITS: u32 = 32 - FORMAT_BITS;

// Every format this build writes fits its bits, and every length under the limit its own.
const _: () = assert!((LOG_FORMAT as u32) < 1 << FORMAT_BITS);
const _: () = assert!(MAX_RECORD_BYTES < 1 << LENGTH_BITS);

/// The length word of a record: `len`, and `format` above it unless it is format 1.
fn length_word(len: u32, format: Format) -> u32 {
    let code = match format {
        FORMAT_1 => 0,
        newer => u32::from(newer),
    };
    len | (code << LENGTH_BITS)
}

/// A length word's payload length and log format.
fn from_length_word(word: u32) -> (u32, Format) {
    let len = word & ((1 << LENGTH_BITS) - 1);
    match (word >> LENGTH_BITS) as u8 {
        0 => (len, FORMAT_1),
        newer => (len, newer),
    }
}

#[derive(Debug, thiserror::Error)]
pub(super) enum EncodeError {
    #[error("encoding entry {index}: {source}")]
    Encode { index: u64, source: postcard::Error },
    #[error("entry {index} encodes to {len} bytes, over the {MAX_RECORD_BYTES}-byte record limit")]
    TooLong { index: u64, len: usize },
}

/// How a segment's records end.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum End {
    /// Every byte belongs to a good record.
    Clean,
    /// Good records up to this offset, then zeros to the end of the file: blocks allocated
    /// ahead of the appends (see `PREALLOCATE_BYTES`), or blocks a crash never filled. No
    /// record reached the disk there (or a fault zeroed it, which no format tells apart).
    Allocated(u64),
    /// From this offset on, the bytes are what a crash can leave of the last write, which was
    /// never acknowledged: a damaged record with no good record anywhere after it.
    Torn(u64),
    /// Not what a crash leaves.
    Corrupt(u64, Corruption),
    /// A segment of format 1, written before records had a header checksum.
    OldFormat,
    /// At this offset, a good record of a log format newer than this build reads: written by
    /// a newer Leasehold.
    Newer(u64, Format),
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Corruption {
    #[error("{damage}, with a good record at byte {good_at} after it")]
    DamagedBeforeGood { damage: Damage, good_at: u64 },
    #[error(
        "a header that passes its checksum but gives a length of {len} bytes, over the \
         {MAX_RECORD_BYTES}-byte limit every writer keeps"
    )]
    LengthOverLimit { len: u32 },
    #[error("an entry that passes its checksums but does not decode")]
    Undecodable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Damage {
    #[error("a segment that does not start with the format's magic bytes")]
    Magic,
    #[error("a header cut short")]
    HeaderShort,
    #[error("a header failing its checksum")]
    HeaderChecksum,
    #[error("a payload cut short")]
    PayloadShort,
    #[error("a payload failing its checksum")]
    PayloadChecksum,
}

/// A segment's good entries in order, each with the offset of its record and its payload
/// length, and how its records end.
pub(super) struct Parsed {
    pub entries: Vec<(Entry, u64, u32)>,
    pub end: End,
}

/// The header checksum covers the record's offset as well as its length and payload checksum:
/// a record is good only where it was written. Recovery looks for good records at every byte
/// after a damaged one, and a client's value inside a payload can hold any bytes, a whole
/// record's included; without the offset, such a value could pass for a record.
fn header_crc(offset: u64, length_word: u32, payload_crc: u32) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&offset.to_le_bytes());
    hasher.update(&length_word.to_le_bytes());
    hasher.update(&payload_crc.to_le_bytes());
    hasher.finalize()
}

/// Appends to `into` the record of `entry`, to be written at byte `offset` of its segment, and
/// returns its payload length.
pub(super) fn encode_record(
    entry: &Entry,
    offset: u64,
    into: &mut Vec<u8>,
) -> Result<u32, EncodeError> {
    let index = entry.log_id.index;
    let format = protocol::entry_format(entry);
    let payload = encode(entry).map_err(|source| EncodeError::Encode { index, source })?;
    let len = payload.len();
    let len = u32::try_from(len)
        .ok()
        .filter(|l| u64::from(*l) <= MAX_RECORD_BYTES)
        .ok_or(EncodeError::TooLong { index, len })?;
    let payload_crc = crc32fast::hash(&payload);
    let word = length_word(len, format);
    into.extend_from_slice(&header_crc(offset, word, payload_crc).to_le_bytes());
    into.extend_from_slice(&word.to_le_bytes());
    into.extend_from_slice(&payload_crc.to_le_bytes());
    into.extend_from_slice(&payload);
    Ok(len)
}

/// What the bytes at one offset hold.
enum Slot<'a> {
    Good {
        payload: &'a [u8],
        end: usize,
        format: Format,
    },
    Damaged(Damage),
    OverLimit(u32),
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
}

fn slot(bytes: &[u8], at: usize) -> Slot<'_> {
    let header = (
        u32_at(bytes, at),
        u32_at(bytes, at + 4),
        u32_at(bytes, at + 8),
    );
    let (Some(crc), Some(word), Some(payload_crc)) = header else {
        return Slot::Damaged(Damage::HeaderShort);
    };
    let (len, format) = from_length_word(word);
    // No writer writes an empty payload; refusing a zero length also keeps a run of zeros
    // from ever passing for a record, whatever its offset hashes to.
    if len == 0 || header_crc(at as u64, word, payload_crc) != crc {
        return Slot::Damaged(Damage::HeaderChecksum);
    }
    if u64::from(len) > MAX_RECORD_BYTES {
        return Slot::OverLimit(len);
    }
    let start = at + HEADER as usize;
    let end = start + len as usize;
    let Some(payload) = bytes.get(start..end) else {
        return Slot::Damaged(Damage::PayloadShort);
    };
    if crc32fast::hash(payload) != payload_crc {
        return Slot::Damaged(Damage::PayloadChecksum);
    }
    Slot::Good {
        payload,
        end,
        format,
    }
}

/// The first offset from `from` on where a whole good record starts (header and payload both
/// check), looked for at every byte since a damaged length says nothing of where the next
/// record is. Costs a pass over the rest of the segment, only when a record is damaged.
fn first_good_from(bytes: &[u8], from: usize) -> Option<u64> {
    let fits = |at: usize| {
        u32_at(bytes, at + 4).is_some_and(|word| {
            let (len, _) = from_length_word(word);
            len != 0
                && u64::from(len) <= MAX_RECORD_BYTES
                && at + HEADER as usize + len as usize <= bytes.len()
        })
    };
    (from..bytes.len())
        .find(|&at| fits(at) && matches!(slot(bytes, at), Slot::Good { .. }))
        .map(|at| at as u64)
}

/// The damaged rows of the recovery table: a damaged record is a torn tail only if nothing good
/// follows it anywhere, since a crash leaves a prefix of the last write and nothing after it.
/// Nothing but zeros is no record at all: the end of what was written, in allocated blocks.
fn damaged(bytes: &[u8], at: usize, damage: Damage) -> End {
    if bytes[at..].iter().all(|&b| b == 0) {
        return End::Allocated(at as u64);
    }
    match first_good_from(bytes, at + 1) {
        Some(good_at) => End::Corrupt(at as u64, Corruption::DamagedBeforeGood { damage, good_at }),
        None => End::Torn(at as u64),
    }
}

/// A good record of format 1 (`[length u32][crc32 u32][payload]`, no magic) anywhere.
fn holds_format_1(bytes: &[u8]) -> bool {
    (0..bytes.len()).any(|at| {
        let (Some(len), Some(crc)) = (u32_at(bytes, at), u32_at(bytes, at + 4)) else {
            return false;
        };
        let start = at + 8;
        len != 0
            && u64::from(len) <= MAX_RECORD_BYTES
            && bytes
                .get(start..start + len as usize)
                .is_some_and(|payload| crc32fast::hash(payload) == crc)
    })
}

/// Reads a segment's bytes by the recovery table.
pub(super) fn parse_segment(bytes: &[u8]) -> Parsed {
    let mut entries = Vec::new();
    if bytes.is_empty() {
        // Created, and its first append never begun.
        return Parsed {
            entries,
            end: End::Clean,
        };
    }
    if !bytes.starts_with(MAGIC) {
        // The magic goes out with the segment's first append, so a crash can tear it too.
        let end = match damaged(bytes, 0, Damage::Magic) {
            End::Torn(_) if holds_format_1(bytes) => End::OldFormat,
            end => end,
        };
        return Parsed { entries, end };
    }
    let mut at = MAGIC.len();
    while at < bytes.len() {
        match slot(bytes, at) {
            Slot::Good { format, .. } if format > LOG_FORMAT => {
                let end = End::Newer(at as u64, format);
                return Parsed { entries, end };
            }
            Slot::Good { payload, end, .. } => {
                let Ok(entry) = decode::<Entry>(payload) else {
                    let end = End::Corrupt(at as u64, Corruption::Undecodable);
                    return Parsed { entries, end };
                };
                entries.push((entry, at as u64, payload.len() as u32));
                at = end;
            }
            Slot::OverLimit(len) => {
                let end = End::Corrupt(at as u64, Corruption::LengthOverLimit { len });
                return Parsed { entries, end };
            }
            Slot::Damaged(damage) => {
                let end = damaged(bytes, at, damage);
                return Parsed { entries, end };
            }
        }
    }
    Parsed {
        entries,
        end: End::Clean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log_store::tests::entry;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// The disk is not trusted either: whatever a segment holds, parsing it ends in entries
        /// and a verdict, never a panic.
        #[test]
        fn random_and_mutated_segments_parse_without_a_panic(
            random in prop::collection::vec(any::<u8>(), 0..4_096),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let _ = parse_segment(&random);
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&random);
            let _ = parse_segment(&with_magic);
            let (mut bytes, _) = segment(5);
            for (at, value) in flips {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            let _ = parse_segment(&bytes);
            let _ = parse_segment(&bytes[..cut.index(bytes.len() + 1)]);
        }
    }

    /// A segment as appends write it: the magic, then records 1..=n.
    fn segment(n: u64) -> (Vec<u8>, Vec<u64>) {
        let mut bytes = MAGIC.to_vec();
        let mut offsets = Vec::new();
        for i in 1..=n {
            offsets.push(bytes.len() as u64);
            encode_record(&entry(i), bytes.len() as u64, &mut bytes).unwrap();
        }
        (bytes, offsets)
    }

    /// Issue 41, item 8: a record says its log format, and one newer than this build reads is
    /// named as such (a newer Leasehold wrote it), not taken for corruption; a record of format
    /// 1 is, byte for byte, what every build before 0.2.0 wrote, so their data dirs read as
    /// they are.
    #[test]
    fn a_record_of_a_newer_log_format_is_named_so_and_format_1_records_are_as_before() {
        let (mut bytes, offsets) = segment(2);
        let payload = encode(&entry(3)).unwrap();
        let at = bytes.len() as u64;
        let word = length_word(payload.len() as u32, LOG_FORMAT + 1);
        let payload_crc = crc32fast::hash(&payload);
        bytes.extend_from_slice(&header_crc(at, word, payload_crc).to_le_bytes());
        bytes.extend_from_slice(&word.to_le_bytes());
        bytes.extend_from_slice(&payload_crc.to_le_bytes());
        bytes.extend_from_slice(&payload);
        let parsed = parse_segment(&bytes);
        assert_eq!(indexes(&parsed), [1, 2]);
        assert_eq!(parsed.end, End::Newer(at, LOG_FORMAT + 1));
        let first = offsets[0] as usize;
        let len = u32_at(&bytes, first + 4).unwrap();
        assert_eq!(
            len as usize,
            encode(&entry(1)).unwrap().len(),
            "format 1: the length word is the length alone"
        );
    }

    fn indexes(parsed: &Parsed) -> Vec<u64> {
        parsed
            .entries
            .iter()
            .map(|(e, ..)| e.log_id.index)
            .collect()
    }

    #[test]
    fn every_flipped_bit_of_a_segment_is_corruption_but_in_its_last_record() {
        let (pristine, offsets) = segment(5);
        let last = offsets[4];
        for bit in 0..pristine.len() * 8 {
            let mut bytes = pristine.clone();
            bytes[bit / 8] ^= 1 << (bit % 8);
            let parsed = parse_segment(&bytes);
            let at = (bit / 8) as u64;
            if at >= last {
                // Indistinguishable from the last write torn by a crash: the one case cut.
                assert_eq!(parsed.end, End::Torn(last), "bit {bit}");
                assert_eq!(indexes(&parsed), vec![1, 2, 3, 4], "bit {bit}");
            } else {
                let damaged = offsets
                    .iter()
                    .rev()
                    .find(|o| **o <= at)
                    .copied()
                    .unwrap_or(0);
                assert!(
                    matches!(parsed.end, End::Corrupt(o, _) if o == damaged),
                    "bit {bit}: {:?}",
                    parsed.end
                );
            }
        }
    }

    #[test]
    fn a_torn_last_write_is_torn_whatever_follows_its_prefix_and_zeros_alone_are_no_write() {
        let (bytes, offsets) = segment(3);
        let last = offsets[2] as usize;
        // A crash keeps a prefix of the last write, then zeros where the file grew but the
        // blocks never came, or garbage in the block being written.
        for cut in last..bytes.len() {
            for tail in [vec![], vec![0; 300], vec![0xa5; 37]] {
                let mut torn = bytes[..cut].to_vec();
                torn.extend_from_slice(&tail);
                let parsed = parse_segment(&torn);
                // The tail may happen to hold the bytes the cut took (a payload ending in 0).
                let (whole, kept) = if torn.starts_with(&bytes) {
                    (bytes.len(), vec![1, 2, 3])
                } else {
                    (last, vec![1, 2])
                };
                let expected = if torn.len() == whole {
                    End::Clean
                } else if torn[whole..].iter().all(|&b| b == 0) {
                    // Nothing of the next record was written: room allocated for it.
                    End::Allocated(whole as u64)
                } else {
                    End::Torn(whole as u64)
                };
                assert_eq!(parsed.end, expected, "cut at {cut}, tail {}", tail.len());
                assert_eq!(indexes(&parsed), kept, "cut at {cut}, tail {}", tail.len());
            }
        }
        // The first write of a segment, magic and all, can be torn too.
        for cut in 1..MAGIC.len() {
            let mut torn = bytes[..cut].to_vec();
            assert_eq!(parse_segment(&torn).end, End::Torn(0), "cut at {cut}");
            torn.extend_from_slice(&[0xa5; 100]);
            assert_eq!(parse_segment(&torn).end, End::Torn(0), "cut at {cut}");
        }
    }

    #[test]
    fn zeros_after_the_last_record_are_allocated_room_not_a_torn_write() {
        let (bytes, _) = segment(3);
        let mut allocated = bytes.clone();
        allocated.resize(bytes.len() + 5_000, 0);
        let parsed = parse_segment(&allocated);
        assert_eq!(parsed.end, End::Allocated(bytes.len() as u64));
        assert_eq!(indexes(&parsed), vec![1, 2, 3]);
        // A segment allocated before its first write, magic and all, reached the disk.
        assert_eq!(parse_segment(&[0; 4096]).end, End::Allocated(0));
        assert_eq!(
            parse_segment(&[MAGIC.as_slice(), &[0; 100]].concat()).end,
            End::Allocated(MAGIC.len() as u64)
        );
        // One byte not zero in the room is a torn write, and a good record after it corrupt.
        allocated[bytes.len() + 4_000] = 1;
        assert_eq!(parse_segment(&allocated).end, End::Torn(bytes.len() as u64));
        let mut gap = bytes.clone();
        gap.resize(bytes.len() + 64, 0);
        encode_record(&entry(4), gap.len() as u64, &mut gap).unwrap();
        assert!(matches!(
            parse_segment(&gap).end,
            End::Corrupt(at, Corruption::DamagedBeforeGood { .. }) if at == bytes.len() as u64
        ));
    }

    #[test]
    fn a_record_is_good_only_at_the_offset_it_was_written_for() {
        // A value holding a whole record, as a client may write it: still one entry.
        let (mut bytes, _) = segment(1);
        let inner_at = bytes.len() as u64;
        let mut inner = Vec::new();
        encode_record(&entry(2), inner_at, &mut inner).unwrap();
        let mut moved = MAGIC.to_vec();
        moved.extend_from_slice(&inner[..]);
        assert_eq!(
            parse_segment(&moved).end,
            End::Torn(MAGIC.len() as u64),
            "a record moved from where it was written fails its header checksum"
        );
        bytes.extend_from_slice(&inner);
        assert_eq!(indexes(&parse_segment(&bytes)), vec![1, 2]);
    }

    #[test]
    fn an_undecodable_entry_and_an_impossible_length_are_corrupt() {
        let (mut bytes, _) = segment(1);
        let good = bytes.len() as u64;
        let junk = [0xff_u8; 5];
        let payload_crc = crc32fast::hash(&junk);
        bytes.extend_from_slice(&header_crc(good, 5, payload_crc).to_le_bytes());
        bytes.extend_from_slice(&5u32.to_le_bytes());
        bytes.extend_from_slice(&payload_crc.to_le_bytes());
        bytes.extend_from_slice(&junk);
        assert_eq!(
            parse_segment(&bytes).end,
            End::Corrupt(good, Corruption::Undecodable)
        );

        let (mut bytes, _) = segment(1);
        let len = MAX_RECORD_BYTES as u32 + 1;
        bytes.extend_from_slice(&header_crc(good, len, 0).to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            parse_segment(&bytes).end,
            End::Corrupt(good, Corruption::LengthOverLimit { len })
        );
    }

    #[test]
    fn a_format_1_segment_is_old_not_torn() {
        let mut bytes = Vec::new();
        for i in 1..=2 {
            let payload = encode(&entry(i)).unwrap();
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            bytes.extend_from_slice(&payload);
        }
        assert_eq!(parse_segment(&bytes).end, End::OldFormat);
        // Even with its first record damaged.
        bytes[9] ^= 1;
        assert_eq!(parse_segment(&bytes).end, End::OldFormat);
    }
}
