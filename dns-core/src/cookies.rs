//! DNS Cookies (RFC 7873) with the interoperable server cookie of RFC 9018: SipHash-2-4 over the
//! client cookie, version, reserved bytes, timestamp and client address, keyed by a secret every
//! node of the DaemonSet shares (so a client behind a VIP keeps a valid cookie whichever node
//! answers).
//!
//! Rotation (RFC 9018 §4.3): the secret file holds one secret per line, 32 hex digits. The first
//! makes cookies; every line is accepted when checking. To rotate, add the new secret as the
//! second line on every node, then swap the two lines, then remove the old one: at no step does
//! a node reject a cookie another node made.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use arc_swap::ArcSwap;
use siphasher::sip::SipHasher24;

/// A client cookie's length (RFC 7873 §4).
pub const CLIENT_COOKIE_LEN: usize = 8;
/// A server cookie's length in the RFC 9018 format.
pub const SERVER_COOKIE_LEN: usize = 16;
/// Server cookies of any format are 8 to 32 bytes (RFC 7873 §4).
const SERVER_COOKIE_MIN: usize = 8;
const SERVER_COOKIE_MAX: usize = 32;
/// RFC 9018 §4.2: version 1.
const VERSION: u8 = 1;
/// RFC 9018 §4.3: a cookie older than an hour, or more than five minutes in the future, is not
/// valid.
const MAX_AGE_SECONDS: i64 = 3600;
const MAX_AHEAD_SECONDS: i64 = 300;

/// What a query's COOKIE option says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieState {
    /// No COOKIE option.
    Absent,
    /// A client cookie, and no server cookie or one that does not check out.
    ClientOnly([u8; CLIENT_COOKIE_LEN]),
    /// A server cookie this server (or a sibling node) made for this client, still fresh.
    Valid([u8; CLIENT_COOKIE_LEN]),
    /// A COOKIE option of an impossible length: FORMERR (RFC 7873 §5.2.2).
    Malformed,
}

impl CookieState {
    pub fn client_cookie(&self) -> Option<[u8; CLIENT_COOKIE_LEN]> {
        match self {
            CookieState::ClientOnly(c) | CookieState::Valid(c) => Some(*c),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read the cookie secret file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: a cookie secret is 32 hex digits (16 bytes)")]
    Format { path: PathBuf, line: usize },
    #[error("{0}: no cookie secret in the file")]
    Empty(PathBuf),
}

/// The secrets in use: the first makes cookies, all are accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Secrets(Vec<[u8; 16]>);

pub struct Cookies {
    secrets: ArcSwap<Secrets>,
    file: Option<PathBuf>,
}

impl Cookies {
    /// Cookies with the secrets of `secret_file` (a random one without a file).
    pub fn new(secret_file: Option<PathBuf>) -> Result<Self, SecretError> {
        let secrets = match &secret_file {
            Some(path) => read_secrets(path)?,
            None => Secrets(vec![random_secret()]),
        };
        Ok(Self {
            secrets: ArcSwap::from_pointee(secrets),
            file: secret_file,
        })
    }

    /// Cookies with fixed secrets (tests).
    pub fn with_secrets(secrets: Vec<[u8; 16]>) -> Self {
        Self {
            secrets: ArcSwap::from_pointee(Secrets(secrets)),
            file: None,
        }
    }

    /// Reads the secret file again; true when the secrets changed. A file that became unreadable
    /// or invalid keeps the secrets in use (and the error is returned).
    pub fn reload(&self) -> Result<bool, SecretError> {
        let Some(path) = &self.file else {
            return Ok(false);
        };
        let fresh = read_secrets(path)?;
        if **self.secrets.load() == fresh {
            return Ok(false);
        }
        self.secrets.store(Arc::new(fresh));
        Ok(true)
    }

    /// Reads the COOKIE option's data (`None`: no option) for a query from `client`.
    pub fn check(&self, option: Option<&[u8]>, client: IpAddr) -> CookieState {
        self.check_at(option, client, now())
    }

    fn check_at(&self, option: Option<&[u8]>, client: IpAddr, now: u32) -> CookieState {
        let Some(data) = option else {
            return CookieState::Absent;
        };
        let server_len = data.len().wrapping_sub(CLIENT_COOKIE_LEN);
        let well_formed = data.len() == CLIENT_COOKIE_LEN
            || (SERVER_COOKIE_MIN..=SERVER_COOKIE_MAX).contains(&server_len);
        if !well_formed {
            return CookieState::Malformed;
        }
        let mut client_cookie = [0u8; CLIENT_COOKIE_LEN];
        client_cookie.copy_from_slice(&data[..CLIENT_COOKIE_LEN]);
        let server = &data[CLIENT_COOKIE_LEN..];
        if server.len() == SERVER_COOKIE_LEN && self.is_valid(&client_cookie, server, client, now) {
            CookieState::Valid(client_cookie)
        } else {
            CookieState::ClientOnly(client_cookie)
        }
    }

    fn is_valid(&self, client_cookie: &[u8; 8], server: &[u8], client: IpAddr, now: u32) -> bool {
        if server[0] != VERSION {
            return false;
        }
        let stamp = u32::from_be_bytes([server[4], server[5], server[6], server[7]]);
        // RFC 1982 arithmetic: how far the stamp lies behind now (negative: ahead).
        let age = now.wrapping_sub(stamp) as i32 as i64;
        if age > MAX_AGE_SECONDS || -age > MAX_AHEAD_SECONDS {
            return false;
        }
        let secrets = self.secrets.load();
        secrets.0.iter().any(|secret| {
            hash(secret, client_cookie, &server[..8], client) == server[8..SERVER_COOKIE_LEN]
        })
    }

    /// The COOKIE option data of an answer to `client`: its client cookie and a fresh server
    /// cookie made with the first secret.
    pub fn answer_option(&self, client_cookie: [u8; CLIENT_COOKIE_LEN], client: IpAddr) -> Vec<u8> {
        self.answer_option_at(client_cookie, client, now())
    }

    fn answer_option_at(&self, client_cookie: [u8; 8], client: IpAddr, now: u32) -> Vec<u8> {
        let mut head = [0u8; 8];
        head[0] = VERSION;
        head[4..8].copy_from_slice(&now.to_be_bytes());
        let secrets = self.secrets.load();
        let secret = secrets.0.first().copied().unwrap_or_default();
        let mut out = Vec::with_capacity(CLIENT_COOKIE_LEN + SERVER_COOKIE_LEN);
        out.extend_from_slice(&client_cookie);
        out.extend_from_slice(&head);
        out.extend_from_slice(&hash(&secret, &client_cookie, &head, client));
        out
    }
}

/// RFC 9018 §4.4: SipHash-2-4 over client cookie | version | reserved | timestamp | client IP.
fn hash(secret: &[u8; 16], client_cookie: &[u8; 8], head: &[u8], client: IpAddr) -> [u8; 8] {
    use std::hash::Hasher;
    let mut hasher = SipHasher24::new_with_key(secret);
    hasher.write(client_cookie);
    hasher.write(head);
    match client.to_canonical() {
        IpAddr::V4(a) => hasher.write(&a.octets()),
        IpAddr::V6(a) => hasher.write(&a.octets()),
    }
    // The RFC's test vectors take the 64-bit result in little-endian byte order.
    hasher.finish().to_le_bytes()
}

fn now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

fn read_secrets(path: &Path) -> Result<Secrets, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut secrets = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let format = || SecretError::Format {
            path: path.to_owned(),
            line: i + 1,
        };
        if line.len() != 32 {
            return Err(format());
        }
        let mut secret = [0u8; 16];
        for (j, byte) in secret.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&line[2 * j..2 * j + 2], 16).map_err(|_| format())?;
        }
        secrets.push(secret);
    }
    if secrets.is_empty() {
        return Err(SecretError::Empty(path.to_owned()));
    }
    Ok(Secrets(secrets))
}

/// 16 random bytes from the kernel.
fn random_secret() -> [u8; 16] {
    let mut secret = [0u8; 16];
    fill_random(&mut secret);
    secret
}

/// A random 64-bit value from the kernel (hash seeds).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    fill_random(&mut bytes);
    u64::from_ne_bytes(bytes)
}

fn fill_random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: getrandom writes at most the given length into the buffer.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 9018 Appendix A.1: the first test vector (IPv4, secret e5e973e5a6b2a43f48e7dc849e37bfcf,
    /// client cookie 2464c4abcf10c957, timestamp 1559731985).
    #[test]
    fn the_rfc_9018_test_vector_comes_out() {
        let secret: [u8; 16] = hex("e5e973e5a6b2a43f48e7dc849e37bfcf").try_into().unwrap();
        let cookies = Cookies::with_secrets(vec![secret]);
        let client: IpAddr = "198.51.100.100".parse().unwrap();
        let client_cookie: [u8; 8] = hex("2464c4abcf10c957").try_into().unwrap();
        let option = cookies.answer_option_at(client_cookie, client, 1559731985);
        assert_eq!(
            option,
            hex("2464c4abcf10c957010000005cf79f111f8130c3eee29480")
        );
        assert_eq!(
            cookies.check_at(Some(&option), client, 1559731985 + 10),
            CookieState::Valid(client_cookie)
        );
    }

    #[test]
    fn a_cookie_checks_out_only_for_its_client_secret_and_time() {
        let cookies = Cookies::with_secrets(vec![[7; 16]]);
        let client: IpAddr = "198.18.0.2".parse().unwrap();
        let option = cookies.answer_option_at([1; 8], client, 1_000_000);
        let check =
            |c: &Cookies, addr: &str, at: u32| c.check_at(Some(&option), addr.parse().unwrap(), at);
        assert_eq!(
            check(&cookies, "198.18.0.2", 1_000_100),
            CookieState::Valid([1; 8])
        );
        assert_eq!(
            check(&cookies, "198.18.0.3", 1_000_100),
            CookieState::ClientOnly([1; 8])
        );
        assert_eq!(
            check(&cookies, "198.18.0.2", 1_003_601),
            CookieState::ClientOnly([1; 8])
        );
        assert_eq!(
            check(&cookies, "198.18.0.2", 999_600),
            CookieState::ClientOnly([1; 8])
        );
        let other = Cookies::with_secrets(vec![[8; 16]]);
        assert_eq!(
            check(&other, "198.18.0.2", 1_000_100),
            CookieState::ClientOnly([1; 8])
        );
        // Rotation: a node that accepts the old secret as its second keeps the cookie valid.
        let rotated = Cookies::with_secrets(vec![[8; 16], [7; 16]]);
        assert_eq!(
            check(&rotated, "198.18.0.2", 1_000_100),
            CookieState::Valid([1; 8])
        );
    }

    #[test]
    fn impossible_lengths_are_malformed() {
        let cookies = Cookies::with_secrets(vec![[7; 16]]);
        let client: IpAddr = "198.18.0.2".parse().unwrap();
        for len in [0usize, 7, 9, 15, 41] {
            assert_eq!(
                cookies.check_at(Some(&vec![0; len]), client, 0),
                CookieState::Malformed,
                "{len}"
            );
        }
        assert_eq!(
            cookies.check_at(Some(&[3; 8]), client, 0),
            CookieState::ClientOnly([3; 8])
        );
    }
}
