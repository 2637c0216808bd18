//! One UPDATE and its answer, over TCP: an UPDATE may be larger than a UDP answer allows, a
//! primary answers it as well over TCP (RFC 2136 §6.2 allows either; RFC 7766 makes TCP a
//! full transport), and there is no truncation to retry on. One connection per message: an
//! UPDATE is rare, and a connection held open would have to survive the primary's idle
//! timeout.

use std::{net::SocketAddr, time::Duration};

use hickory_proto::{
    op::{Message, MessageType, OpCode, ResponseCode},
    rr::{TSigner, rdata::tsig::TsigError},
    serialize::binary::BinDecodable,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::transfer::tsig::{self, unix_now};

/// How long a connection, and then the answer, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How an exchange ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// NOERROR: applied.
    Applied,
    /// A prerequisite did not hold (NXRRSET, YXRRSET, NXDOMAIN, YXDOMAIN): another writer, or
    /// a hand edit, changed a name since it was last written.
    PrerequisiteFailed(ResponseCode),
    /// The key was not accepted: NOTAUTH (with BADKEY, BADSIG or BADTIME when the TSIG was
    /// the reason).
    NotAuthorized(String),
    /// REFUSED: the primary does not allow this key (or address) to update the zone.
    Refused,
    /// No answer, no connection, or another error.
    Failed(String),
}

/// Every `result` label, as [`Outcome::label`] gives them.
pub const RESULTS: [&str; 5] = [
    "applied",
    "prerequisite_failed",
    "not_authorized",
    "refused",
    "failed",
];

impl Outcome {
    /// The `result` label of `hostport_dns_update_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::PrerequisiteFailed(_) => "prerequisite_failed",
            Self::NotAuthorized(_) => "not_authorized",
            Self::Refused => "refused",
            Self::Failed(_) => "failed",
        }
    }
}

/// Sends `message` to `server`, signed with `signer` if given, and reads its answer.
pub async fn exchange(server: SocketAddr, signer: Option<&TSigner>, message: Message) -> Outcome {
    match try_exchange(server, signer, message).await {
        Ok(outcome) => outcome,
        Err(err) => Outcome::Failed(format!("{err:#}")),
    }
}

async fn try_exchange(
    server: SocketAddr,
    signer: Option<&TSigner>,
    message: Message,
) -> anyhow::Result<Outcome> {
    let id = message.metadata.id;
    let (bytes, request_mac) = match signer {
        Some(signer) => {
            let (bytes, mac) = tsig::sign_request(signer, message, unix_now())?;
            (bytes, Some(mac))
        }
        None => (message.to_vec()?, None),
    };
    let length = u16::try_from(bytes.len()).map_err(|_| {
        anyhow::anyhow!("the UPDATE is {} bytes, more than TCP carries", bytes.len())
    })?;
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(server))
        .await
        .map_err(|_| anyhow::anyhow!("no connection within {CONNECT_TIMEOUT:?}"))??;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(&bytes);
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
        stream.write_all(&framed).await?;
        let len = stream.read_u16().await?;
        let mut answer = vec![0u8; usize::from(len)];
        stream.read_exact(&mut answer).await?;
        anyhow::Ok(answer)
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {ANSWER_TIMEOUT:?}"))??;
    let parsed = Message::from_bytes(&answer)
        .map_err(|e| anyhow::anyhow!("an answer that does not parse: {e}"))?;
    if parsed.metadata.id != id
        || parsed.metadata.message_type != MessageType::Response
        || parsed.metadata.op_code != OpCode::Update
    {
        anyhow::bail!("an answer that is not to this UPDATE");
    }
    Ok(judge(&parsed, &answer, signer, request_mac.as_deref()))
}

/// What the answer says. A TSIG error (BADKEY, BADSIG, BADTIME) comes unsigned or signed with
/// the key in doubt: it is reported as such, never verified; any other answer to a signed
/// UPDATE must verify.
fn judge(
    parsed: &Message,
    answer: &[u8],
    signer: Option<&TSigner>,
    request_mac: Option<&[u8]>,
) -> Outcome {
    let rcode = parsed.metadata.response_code;
    let tsig_error = parsed.signature().and_then(|s| s.data.error);
    if let Some(error) = tsig_error {
        return Outcome::NotAuthorized(format!("NOTAUTH, TSIG error {}", tsig_error_name(error)));
    }
    if rcode == ResponseCode::NotAuth {
        return Outcome::NotAuthorized("NOTAUTH".to_owned());
    }
    // A primary that refuses by address (an ACL checked before the key) answers unsigned
    // (RFC 8945 §5.3): a refusal is what it says whatever the signature, it changes nothing.
    if rcode == ResponseCode::Refused && parsed.signature().is_none() {
        return Outcome::Refused;
    }
    if let (Some(signer), Some(mac)) = (signer, request_mac)
        && let Err(err) = tsig::verify_response(signer, answer, mac, unix_now())
    {
        return Outcome::Failed(format!("answered {rcode}, but {err:#}"));
    }
    match rcode {
        ResponseCode::NoError => Outcome::Applied,
        ResponseCode::NXRRSet
        | ResponseCode::YXRRSet
        | ResponseCode::NXDomain
        | ResponseCode::YXDomain => Outcome::PrerequisiteFailed(rcode),
        ResponseCode::Refused => Outcome::Refused,
        other => Outcome::Failed(format!("answered {other}")),
    }
}

fn tsig_error_name(error: TsigError) -> String {
    match error {
        TsigError::BadSig => "BADSIG".to_owned(),
        TsigError::BadKey => "BADKEY".to_owned(),
        TsigError::BadTime => "BADTIME".to_owned(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(rcode: ResponseCode) -> (Message, Vec<u8>) {
        let mut message = Message::new(7, MessageType::Response, OpCode::Update);
        message.metadata.response_code = rcode;
        let bytes = message.to_vec().expect("encodes");
        (message, bytes)
    }

    #[test]
    fn an_unsigned_refusal_to_a_signed_update_is_a_refusal() {
        let signer = TSigner::new(
            b"0123456789abcdef0123456789abcdef".to_vec(),
            hickory_proto::rr::rdata::tsig::TsigAlgorithm::HmacSha256,
            hickory_proto::rr::Name::from_ascii("update-key.").expect("a name"),
            300,
        )
        .expect("a signer");
        let (parsed, bytes) = answer(ResponseCode::Refused);
        assert!(matches!(
            judge(&parsed, &bytes, Some(&signer), Some(&[0; 32])),
            Outcome::Refused
        ));
        // Any other unsigned answer to a signed UPDATE does not verify.
        let (parsed, bytes) = answer(ResponseCode::NoError);
        assert!(matches!(
            judge(&parsed, &bytes, Some(&signer), Some(&[0; 32])),
            Outcome::Failed(_)
        ));
    }
}
