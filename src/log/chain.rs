//! The chain rule (docs/audit-log.md), to the byte. Other implementations verify it
//! independently, so nothing here may depend on how a record was parsed:
//! every hash is over the exact stored line bytes, without the `\n`.

use sha2::{Digest, Sha256};

/// Digest spelling (defined in [`crate::vocab`]).
pub use crate::vocab::{hex, is_digest};

/// Domain-separation prefix of the genesis hash.
pub const GENESIS_PREFIX: &[u8] = b"rea-audit/v1 genesis\n";

/// `prev` of record 0: hex SHA-256 of `"rea-audit/v1 genesis\n" ++ run_id`.
pub fn genesis(run_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(GENESIS_PREFIX);
    h.update(run_id.as_bytes());
    hex(&h.finalize())
}

/// `prev` of the next record, and the head when `line` is the last one.
pub fn line_hash(line: &[u8]) -> String {
    hex(&Sha256::digest(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn genesis_is_sha256_of_prefix_and_run() {
        // sha256("rea-audit/v1 genesis\nR") computed with coreutils:
        // printf 'rea-audit/v1 genesis\nR' | sha256sum
        assert_eq!(
            genesis("R"),
            line_hash(b"rea-audit/v1 genesis\nR"),
            "genesis must hash prefix ++ run id as one message"
        );
        assert_ne!(genesis("R"), genesis("S"));
    }

    #[test]
    fn hex_and_digest_shape() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert!(is_digest(&line_hash(b"")));
        assert_eq!(
            line_hash(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(!is_digest(&line_hash(b"").to_uppercase()));
        assert!(!is_digest("abc"));
    }
}
