//! TSIG (RFC 8945) for transfers and NOTIFY: the keys, checking a signed request (BADKEY,
//! BADSIG, BADTIME as §5.2 says), signing the messages of an answer (each one, the first over
//! the request's MAC, the next ones over the previous MAC and the timers, §5.3.1), and signing a
//! NOTIFY and checking its answer.
//!
//! The wire format and the HMACs are hickory-proto's (`TSIG`, `TSigner`); this module holds the
//! protocol around them.

use std::{
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use data_encoding::BASE64;
use hickory_proto::{
    op::Message,
    rr::{
        Name, Record, TSigner,
        rdata::{
            TSIG,
            tsig::{TsigAlgorithm, TsigError, make_tsig_record},
        },
    },
    serialize::binary::{BinEncodable, BinEncoder},
};

use super::config::KeyConfig;

/// Seconds a signature's time may be off (RFC 8945 §10 recommends 300).
pub const FUDGE: u16 = 300;

/// The configured keys.
#[derive(Clone, Default)]
pub struct Keyring {
    signers: Vec<TSigner>,
    /// The secrets as read, to tell whether a file changed.
    secrets: Vec<Vec<u8>>,
}

impl PartialEq for Keyring {
    fn eq(&self, other: &Self) -> bool {
        let names = |k: &Self| -> Vec<(Name, TsigAlgorithm)> {
            k.signers
                .iter()
                .map(|s| (s.signer_name().clone(), s.algorithm().clone()))
                .collect()
        };
        self.secrets == other.secrets && names(self) == names(other)
    }
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .signers
            .iter()
            .map(|s| s.signer_name().to_ascii())
            .collect();
        f.debug_struct("Keyring").field("keys", &names).finish()
    }
}

impl Keyring {
    /// Reads every key's secret (base64, as `tsig-keygen` and `keymgr -t` print it).
    pub fn load(keys: &[KeyConfig]) -> anyhow::Result<Self> {
        let mut ring = Self::default();
        for key in keys {
            let secret =
                read_secret(&key.secret_file).with_context(|| format!("TSIG key {}", key.name))?;
            let signer = TSigner::new(
                secret.clone(),
                key.algorithm.clone(),
                key.name.clone(),
                FUDGE,
            )
            .with_context(|| format!("TSIG key {}", key.name))?;
            ring.signers.push(signer);
            ring.secrets.push(secret);
        }
        Ok(ring)
    }

    /// The key named `name`.
    pub fn get(&self, name: &Name) -> Option<&TSigner> {
        self.signers.iter().find(|s| s.signer_name() == name)
    }
}

fn read_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secret file {}", path.display()))?;
    let secret = BASE64
        .decode(text.trim().as_bytes())
        .with_context(|| format!("{} does not hold a base64 secret", path.display()))?;
    if secret.is_empty() {
        anyhow::bail!("{} holds an empty secret", path.display());
    }
    Ok(secret)
}

/// What a request's TSIG record says.
pub enum Checked {
    /// Not signed.
    Unsigned,
    /// Signed with `signer`, and the MAC and time are right.
    Signed(Signed),
    /// Signed, but not acceptably: answer NOTAUTH with `error`, in a TSIG record made by
    /// [`Checked::error_record`].
    Failed(Failure),
}

/// A verified request: whom to sign the answer with, over what.
#[derive(Clone)]
pub struct Signed {
    pub signer: TSigner,
    pub request_mac: Vec<u8>,
}

pub struct Failure {
    pub error: TsigError,
    key_name: Name,
    algorithm: TsigAlgorithm,
    request_time: u64,
    request_id: u16,
    /// For BADTIME: the key, to sign the error with (RFC 8945 §5.2.3).
    signer: Option<(TSigner, Vec<u8>)>,
}

/// Checks the TSIG record of `request` (the bytes as received) against `keys`.
pub fn check(request: &[u8], parsed: &Message, keys: &Keyring, now: u64) -> Checked {
    let Some(record) = parsed.signature() else {
        return Checked::Unsigned;
    };
    let tsig = &record.data;
    let failure = |error, signer| {
        Checked::Failed(Failure {
            error,
            key_name: record.name.clone(),
            algorithm: tsig.algorithm.clone(),
            request_time: tsig.time,
            request_id: parsed.metadata.id,
            signer,
        })
    };
    let Some(signer) = keys
        .get(&record.name)
        .filter(|s| *s.algorithm() == tsig.algorithm)
    else {
        return failure(TsigError::BadKey, None);
    };
    // hickory checks the MAC, and refuses a truncated one (RFC 8945 §5.2.2.1 allows that).
    if signer.verify_message_byte(request, None, true).is_err() {
        return failure(TsigError::BadSig, None);
    }
    if now.abs_diff(tsig.time) > u64::from(tsig.fudge) {
        return failure(TsigError::BadTime, Some((signer.clone(), tsig.mac.clone())));
    }
    Checked::Signed(Signed {
        signer: signer.clone(),
        request_mac: tsig.mac.clone(),
    })
}

impl Failure {
    /// The TSIG record of the NOTAUTH answer. BADKEY and BADSIG go unsigned (§5.2.1, §5.2.2);
    /// BADTIME is signed, with the request's time and the server's in Other Data (§5.2.3).
    pub fn error_record(&self, response: &Message, now: u64) -> Option<Box<Record<TSIG>>> {
        match &self.signer {
            Some((signer, request_mac)) => {
                let mut other = Vec::with_capacity(6);
                other.extend_from_slice(&((now >> 32) as u16).to_be_bytes());
                other.extend_from_slice(&(now as u32).to_be_bytes());
                let stub = TSIG::new(
                    signer.algorithm().clone(),
                    self.request_time,
                    signer.fudge(),
                    Vec::new(),
                    self.request_id,
                    Some(self.error),
                    other,
                );
                let bytes = response.to_vec().ok()?;
                let tbs = signer
                    .encode_response_tbs(request_mac, &bytes, &stub)
                    .ok()?;
                let mac = signer.sign(&tbs).ok()?;
                Some(Box::new(make_tsig_record(
                    signer.signer_name().clone(),
                    stub.set_mac(mac),
                )))
            }
            None => Some(Box::new(make_tsig_record(
                self.key_name.clone(),
                TSIG::new(
                    self.algorithm.clone(),
                    self.request_time,
                    FUDGE,
                    Vec::new(),
                    self.request_id,
                    Some(self.error),
                    Vec::new(),
                ),
            ))),
        }
    }
}

/// Signs the messages of one answer in order, each over the previous MAC (RFC 8945 §5.3.1).
pub struct StreamSigner {
    signed: Signed,
    previous_mac: Vec<u8>,
    first: bool,
    time: u64,
}

impl StreamSigner {
    pub fn new(signed: Signed, now: u64) -> Self {
        Self {
            previous_mac: signed.request_mac.clone(),
            signed,
            first: true,
            time: now,
        }
    }

    /// `message` with its TSIG record, as bytes.
    pub fn sign(&mut self, message: Message) -> anyhow::Result<Vec<u8>> {
        let signer = &self.signed.signer;
        let bytes = message.to_vec().context("cannot encode the message")?;
        let stub = TSIG::new(
            signer.algorithm().clone(),
            self.time,
            signer.fudge(),
            Vec::new(),
            message.metadata.id,
            None,
            Vec::new(),
        );
        let tbs = if self.first {
            signer.encode_response_tbs(&self.previous_mac, &bytes, &stub)?
        } else {
            timers_tbs(&self.previous_mac, &bytes, self.time, signer.fudge())?
        };
        let mac = signer.sign(&tbs).context("cannot sign")?;
        self.previous_mac = mac.clone();
        self.first = false;
        // The TSIG record goes last (RFC 8945 §4.2), after the bytes already encoded: one more
        // additional record, not a second encoding of the whole message.
        let record = make_tsig_record(signer.signer_name().clone(), stub.set_mac(mac));
        let mut signed = bytes;
        let end = u32::try_from(signed.len()).context("message too long")?;
        let mut encoder = BinEncoder::with_offset(&mut signed, end);
        record.emit(&mut encoder)?;
        let additionals = u16::from_be_bytes([signed[10], signed[11]])
            .checked_add(1)
            .context("too many additional records")?;
        signed[10..12].copy_from_slice(&additionals.to_be_bytes());
        Ok(signed)
    }
}

/// What a later message of a signed answer is signed over: the previous MAC, the message, and
/// only the timers of its TSIG record (RFC 8945 §5.3.1).
fn timers_tbs(
    previous_mac: &[u8],
    message: &[u8],
    time: u64,
    fudge: u16,
) -> anyhow::Result<Vec<u8>> {
    let mut tbs = Vec::with_capacity(previous_mac.len() + message.len() + 10);
    let mut encoder = BinEncoder::new(&mut tbs);
    encoder.emit_u16(previous_mac.len() as u16)?;
    encoder.emit_vec(previous_mac)?;
    encoder.emit_vec(message)?;
    encoder.emit_u16((time >> 32) as u16)?;
    encoder.emit_u32(time as u32)?;
    encoder.emit_u16(fudge)?;
    Ok(tbs)
}

/// Signs a request (a NOTIFY): its bytes and the MAC its answer is signed over.
pub fn sign_request(
    signer: &TSigner,
    mut message: Message,
    now: u64,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let (record, _) = signer
        .sign_message(&message, now)
        .context("cannot sign the request")?;
    let mac = record.data.mac.clone();
    message.set_signature(record);
    Ok((message.to_vec()?, mac))
}

/// Checks the answer to a request signed with `request_mac`.
pub fn verify_response(
    signer: &TSigner,
    response: &[u8],
    request_mac: &[u8],
    now: u64,
) -> anyhow::Result<()> {
    let (_, _, valid) = signer
        .verify_message_byte(response, Some(request_mac), true)
        .map_err(|e| anyhow::anyhow!("the answer's TSIG does not verify: {e}"))?;
    if !valid.contains(&now) {
        anyhow::bail!("the answer's TSIG time is off by more than {FUDGE} s");
    }
    Ok(())
}

/// Seconds since the epoch, as TSIG counts time.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
