//! The chain rule (SPEC 4), to the byte. Other implementations verify it
//! independently, so nothing here may depend on how a record was parsed:
//! every hash is over the exact stored line bytes, without the `\n`.

use sha2::{Digest, Sha256};

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

/// Lowercase hex, the only spelling of a digest in a record.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// A 64-digit lowercase hex digest (what `prev`, heads and `--expect-head` hold).
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
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
