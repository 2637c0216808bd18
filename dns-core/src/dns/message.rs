//! The skeleton every response starts from and the transport it travels by: shared by the
//! query answers and the zone transfers.

use hickory_proto::op::{Edns, Message, MessageType};
use hostport_dns_common::limits::{
    CLASSIC_UDP_PAYLOAD, DEFAULT_UDP_MAX_PAYLOAD, FLAG_DAY_UDP_PAYLOAD, MAX_UDP_MAX_PAYLOAD,
};

/// How the answer travels: UDP answers are limited to what the client accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// The ceiling on UDP answers (`--udp-max-payload`, Knot's `udp-max-payload`): an answer over
/// UDP takes what the client offers up to this, and every OPT record advertises it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpCeiling(u16);

impl UdpCeiling {
    pub const DEFAULT: Self = Self(DEFAULT_UDP_MAX_PAYLOAD);

    /// A ceiling of `bytes`: at least 512 (what every client accepts), at most 65507 (what one
    /// UDP datagram carries over IPv4).
    pub fn new(bytes: u16) -> Result<Self, String> {
        if (CLASSIC_UDP_PAYLOAD..=MAX_UDP_MAX_PAYLOAD).contains(&bytes) {
            Ok(Self(bytes))
        } else {
            Err(format!(
                "a UDP payload ceiling of {bytes} bytes is outside {CLASSIC_UDP_PAYLOAD} (what every client accepts) to {MAX_UDP_MAX_PAYLOAD} (the most an IPv4 datagram carries)"
            ))
        }
    }

    /// The ceiling in bytes.
    pub fn bytes(self) -> u16 {
        self.0
    }

    /// The most an answer may take over UDP: 512 bytes without EDNS (`offered` None), else what
    /// the client offers, within 512 (RFC 6891 §6.2.5) and the ceiling.
    pub fn limit(self, offered: Option<u16>) -> usize {
        usize::from(offered.map_or(CLASSIC_UDP_PAYLOAD, |size| {
            size.clamp(CLASSIC_UDP_PAYLOAD, self.0)
        }))
    }
}

impl Default for UdpCeiling {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// When SRV targets are compressed (`--srv-target-compression`). RFC 2782 writes them in full,
/// which puts about 187 short-named nodes in 8192 bytes; a load balancer in SRV mode takes a
/// truncated answer as an error (HAProxy has no TCP fallback) and fills no slot. Compressed, a
/// target takes its first label and a pointer, and about 305 fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SrvTargetCompression {
    /// Always in full: an answer whose SRV records do not fit is truncated (TC=1).
    Never,
    /// In full whenever the SRV records fit so (their targets' addresses left out first);
    /// compressed where the alternative is TC=1 to a client that asked for more than a DNS
    /// flag day datagram (see [`SrvTargetCompression::allows`]).
    #[default]
    ToFit,
}

impl SrvTargetCompression {
    /// The names operators write (what `from_str` reads).
    pub const NAMES: [&'static str; 2] = ["never", "to-fit"];

    /// Whether an answer of at most `limit` bytes over `transport` may carry compressed SRV
    /// targets: with `ToFit`, over UDP, to a client offering more than 1232 bytes. A client
    /// that asks for a large datagram wants the fleet in one (HAProxy's `accepted_payload_size
    /// 8192`: a truncated answer is an outage for it). A client offering 1232 or less (stub
    /// resolvers: glibc, Go, c-ares) retries over TCP, where the targets go in full; and some
    /// of them reject compressed SRV targets (c-ares 1.34.7 and 1.34.8, Go before x/net
    /// 0.21), so it is sent TC=1 as RFC 2782 has it.
    pub fn allows(self, transport: Transport, limit: usize) -> bool {
        self == Self::ToFit
            && transport == Transport::Udp
            && limit > usize::from(FLAG_DAY_UDP_PAYLOAD)
    }
}

impl std::str::FromStr for SrvTargetCompression {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "never" => Ok(Self::Never),
            "to-fit" => Ok(Self::ToFit),
            other => Err(format!(
                "SRV target compression {other:?} is neither \"never\" nor \"to-fit\""
            )),
        }
    }
}

/// A response skeleton: ID and opcode kept, QR and AA set, RD and CD copied, the question and an
/// OPT record (if the query had one, advertising `ceiling`) echoed. Transfers start from it too.
pub fn response_to(request: &Message, ceiling: UdpCeiling) -> Message {
    let mut response = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.checking_disabled = request.metadata.checking_disabled;
    response.add_queries(request.queries.iter().cloned());
    if let Some(edns) = &request.edns {
        let mut ours = Edns::new();
        ours.set_max_payload(ceiling.bytes());
        ours.set_version(0);
        ours.set_dnssec_ok(edns.flags().dnssec_ok);
        response.set_edns(ours);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srv_target_compression_reads_the_names_it_writes_and_nothing_else() {
        let read: Vec<_> = SrvTargetCompression::NAMES
            .iter()
            .map(|name| name.parse::<SrvTargetCompression>())
            .collect();
        assert_eq!(
            read,
            [
                Ok(SrvTargetCompression::Never),
                Ok(SrvTargetCompression::ToFit)
            ]
        );
        for bad in ["", "always", "To-Fit", "tofit"] {
            let error = bad.parse::<SrvTargetCompression>().expect_err("refused");
            assert!(error.contains("\"to-fit\""), "{error}");
        }
    }

    #[test]
    fn srv_targets_may_be_compressed_only_over_udp_to_clients_offering_more_than_1232() {
        let to_fit = SrvTargetCompression::ToFit;
        assert!(to_fit.allows(Transport::Udp, 1233));
        assert!(to_fit.allows(Transport::Udp, 8192));
        assert!(!to_fit.allows(Transport::Udp, 1232));
        assert!(!to_fit.allows(Transport::Udp, 512));
        assert!(!to_fit.allows(Transport::Tcp, usize::from(u16::MAX)));
        assert!(!SrvTargetCompression::Never.allows(Transport::Udp, 8192));
    }

    #[test]
    fn a_udp_answer_takes_what_the_client_offers_within_512_and_the_ceiling() {
        let ceiling = UdpCeiling::DEFAULT;
        assert_eq!(ceiling.bytes(), 8192);
        assert_eq!(ceiling.limit(None), 512, "no EDNS: 512");
        assert_eq!(ceiling.limit(Some(100)), 512, "less than 512 offered: 512");
        assert_eq!(ceiling.limit(Some(1232)), 1232);
        assert_eq!(ceiling.limit(Some(8192)), 8192);
        assert_eq!(
            ceiling.limit(Some(65535)),
            8192,
            "more offered: the ceiling"
        );
        let flag_day = UdpCeiling::new(1232).expect("a ceiling");
        assert_eq!(flag_day.limit(Some(8192)), 1232);
        assert_eq!(flag_day.limit(None), 512);
    }

    #[test]
    fn a_ceiling_outside_512_to_65507_is_refused_with_the_reason() {
        for bad in [0, 511, 65_508, u16::MAX] {
            let error = UdpCeiling::new(bad).expect_err("refused");
            assert!(error.contains(&bad.to_string()), "{error}");
        }
        for good in [512, 1232, 65_507] {
            assert_eq!(UdpCeiling::new(good).map(UdpCeiling::bytes), Ok(good));
        }
    }
}
