//! The lane's wire, shared by the client lane (frames of `BatchCall` and `BatchAnswer`, see the
//! proto file) and the nodes' peer lane: length-prefixed frames, and (for the peer lane's
//! envelope) gRPC metadata as the ASCII pairs a frame carries.
//!
//! A frame is a big-endian `u32` length and that many bytes. Reading one is bounded twice: a
//! length over the reader's limit is refused before any of its body is read, and the body's
//! buffer grows as its bytes arrive, so a caller that sends a length and stalls holds no more
//! memory than it sent. (tokio-util's `LengthDelimitedCodec`, which the same framing would
//! otherwise come from, reserves the whole length a frame's head gives before any of its body
//! arrives: a peer's lane that announced a frame at the limit (8 MiB and a little) and stalled
//! would hold that much, on each of its lanes.)

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::metadata::{AsciiMetadataKey, KeyAndValueRef, MetadataMap};

pub use crate::wire::CLIENT_LANE_GREETING as CLIENT_GREETING;

/// The largest request message a node takes from a client, over gRPC and on a lane: a put of
/// the largest value with the longest key and lease name, with room to spare. A client sends
/// a bigger one over gRPC, where the node's refusal names the limit.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// The largest client-lane frame a node reads: one `BatchCall`, no bigger than a request
/// message over gRPC. A bigger one ends the connection unanswered, since its body is left
/// unread; a client sends such a call on its `Batch` stream or as a unary call, where the
/// node's refusal names the limit.
pub const MAX_CALL_BYTES: usize = MAX_REQUEST_BYTES;

/// The most bytes of metadata (keys and values) a frame may carry: HTTP/2's default bound on
/// a header list.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// The most metadata entries a frame may carry (a gRPC call of a peer's carries three, a
/// client's two): HTTP/2 bounds a header list, and a
/// `MetadataMap` panics past its own size (some 24,000 entries), which a frame could carry.
pub const MAX_METADATA: usize = 16;

/// What a frame's buffer starts at; it grows as its bytes arrive.
const FIRST_READ_BYTES: usize = 64 * 1024;

/// Writes `body` as one frame (at most `max_bytes`) and flushes it.
pub async fn write_frame(
    io: &mut (impl AsyncWrite + Unpin),
    body: &[u8],
    max_bytes: usize,
) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len as usize <= max_bytes)
        .ok_or_else(|| {
            io::Error::other(format!(
                "a {}-byte frame is over the {max_bytes}-byte limit",
                body.len()
            ))
        })?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    io.write_all(&frame).await?;
    io.flush().await
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// Its length is over the reader's limit: nothing of its body was read.
    TooBig {
        /// The length the frame gave.
        len: usize,
        /// The reader's limit.
        max_bytes: usize,
    },
    /// The connection failed, or ended inside a frame.
    Io(io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooBig { len, max_bytes } => {
                write!(f, "a {len}-byte frame is over the {max_bytes}-byte limit")
            }
            FrameError::Io(e) => e.fmt(f),
        }
    }
}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        match e {
            FrameError::Io(e) => e,
            too_big => io::Error::other(too_big.to_string()),
        }
    }
}

/// Reads one frame's body, refusing one over `max_bytes` before reading it; `None` at a clean
/// end of the connection, between frames.
pub async fn read_frame(
    io: &mut (impl AsyncRead + Unpin),
    max_bytes: usize,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0; 4];
    match io.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max_bytes {
        return Err(FrameError::TooBig { len, max_bytes });
    }
    let mut body = Vec::with_capacity(len.min(FIRST_READ_BYTES));
    let read = io.take(len as u64).read_to_end(&mut body).await;
    read.map_err(FrameError::Io)?;
    if body.len() < len {
        return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(Some(body))
}

/// The ASCII entries of `metadata`, as a frame carries them (binary ones are left out).
pub fn metadata_pairs(metadata: &MetadataMap) -> Vec<(String, String)> {
    metadata
        .iter()
        .filter_map(|entry| match entry {
            KeyAndValueRef::Ascii(key, value) => {
                Some((key.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            }
            KeyAndValueRef::Binary(..) => None,
        })
        .collect()
}

/// `pairs` as gRPC metadata; an entry that is not valid metadata is refused, and so are more
/// than [`MAX_METADATA`] entries, before any is parsed, and more than [`MAX_METADATA_BYTES`].
pub fn metadata_map(
    pairs: impl ExactSizeIterator<Item = (String, String)>,
) -> Result<MetadataMap, String> {
    if pairs.len() > MAX_METADATA {
        return Err(format!(
            "{} metadata entries, over the limit of {MAX_METADATA}",
            pairs.len()
        ));
    }
    let mut map = MetadataMap::new();
    let mut bytes = 0;
    for (key, value) in pairs {
        bytes += key.len() + value.len();
        if bytes > MAX_METADATA_BYTES {
            return Err(format!(
                "more than {MAX_METADATA_BYTES} bytes of metadata, over the limit"
            ));
        }
        let name = AsciiMetadataKey::from_bytes(key.as_bytes())
            .map_err(|_| format!("{key:?} is not a metadata key"))?;
        let value = value
            .parse()
            .map_err(|_| format!("the value of {key} is not metadata"))?;
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_before_its_body_is_read() {
        // A header and no body: the refusal cannot have waited for one.
        let header = 101u32.to_be_bytes();
        let refused = read_frame(&mut &header[..], 100).await.unwrap_err();
        assert!(matches!(
            refused,
            FrameError::TooBig {
                len: 101,
                max_bytes: 100
            }
        ));
        assert!(read_frame(&mut &[][..], 100).await.unwrap().is_none());
        let mut frame = Vec::new();
        assert!(write_frame(&mut frame, &[0; 101], 100).await.is_err());
    }

    #[test]
    fn more_metadata_entries_than_the_limit_are_refused_before_any_is_parsed() {
        let entry = |i: usize| (format!("k{i}"), "v".to_owned());
        let within = (0..MAX_METADATA).map(entry);
        assert_eq!(metadata_map(within).unwrap().len(), MAX_METADATA);
        let refused = metadata_map((0..30_000).map(entry)).unwrap_err();
        assert!(refused.contains("over the limit of 16"), "{refused}");
        let big = (0..2).map(|i| (format!("k{i}"), "v".repeat(MAX_METADATA_BYTES / 2)));
        let refused = metadata_map(big).unwrap_err();
        assert!(refused.contains("bytes of metadata"), "{refused}");
    }
}
