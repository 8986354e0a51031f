//! The one encoding for everything Leasehold writes to disk or sends to a peer.

use serde::{de::DeserializeOwned, Serialize};

/// `value`'s bytes.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(value)
}

/// `value`'s bytes in one buffer of their exact size, for a table (a snapshot's or a
/// backup's: 45 to 47 MB at a million leases as `bench` names them). A buffer grown by
/// doubling frees its smaller steps (those under glibc's largest mmap threshold, 32 MiB) into
/// a malloc arena, where glibc keeps them resident: 27 and 41 MB free in arenas of their own
/// on nodes filled to a million leases (`malloc_info`). One allocation this large is mapped
/// and unmapped whole. Sizing first is a pass that writes nothing (92 to 122 ms for a million
/// leases in a probe), off the runtime's threads like the encoding.
pub fn encode_sized<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    let size = postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default())?;
    let mut bytes = vec![0; size];
    let written = postcard::to_slice(value, &mut bytes)?.len();
    // Both passes encode the same value; a difference would mean an encoding that is not a
    // function of the value, which replicated state must never have.
    debug_assert_eq!(written, size, "the sizing pass and the writing pass agree");
    bytes.truncate(written);
    Ok(bytes)
}

/// A value from its bytes, or why they are not one.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use leasehold_core::{Command, LeaseTable, Op};

    #[test]
    fn a_table_encoded_at_its_size_is_its_encoding_with_no_room_to_spare() {
        let mut table = LeaseTable::default();
        for i in 0..1_000 {
            table.apply(&Command {
                at_ms: Some(i),
                request: None,
                op: Op::Acquire {
                    lease: format!("lease-{i}"),
                    holder: format!("holder-{}", i % 7),
                    ttl_ms: 60_000,
                },
            });
        }
        let sized = super::encode_sized(&table).unwrap();
        assert_eq!(sized, super::encode(&table).unwrap());
        assert_eq!(
            sized.capacity(),
            sized.len(),
            "never grown, never more room"
        );
    }
}
