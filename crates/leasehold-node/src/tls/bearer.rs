//! Bearer tokens, for clients that cannot show a certificate: a random secret the client sends
//! as `authorization: Bearer TOKEN` over TLS, which the node turns into an identity through the
//! policy. The policy keeps only each token's SHA-256, so neither the log, a snapshot nor a
//! backup holds a token, and a node never logs one.

use rand::RngCore;

/// What every token starts with, so that one found in a file or a log is recognised.
const PREFIX: &str = "lh_";

/// A new token: 32 random bytes from the operating system, in hex, after [`PREFIX`].
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{PREFIX}{}", hex(&bytes))
}

/// The token's SHA-256 in lowercase hex, as the policy keeps it.
pub fn sha256(token: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_new_each_time_and_hash_as_sha256() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), PREFIX.len() + 64);
        assert_eq!(
            sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
