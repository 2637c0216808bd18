//! The client policy on the userspace path, in the kernel's order: sources that cannot have
//! sent the query, the allow-list, then the answer (with its server cookie) and its rate. Every
//! query goes through it, transfer requests over UDP and signed queries included.

use std::net::IpAddr;

use hostport_dns_common::policy::Admission;

use hostport_dns_core::{
    answer::{Answer, Asker, Shape},
    cookies::{CookieState, Cookies},
    dns::{
        Query,
        message::{SrvTargetCompression, Transport, UdpCeiling},
    },
    identity::Identity,
};

use crate::{
    clients::{ClientPolicyTable, Outside, martian::is_martian, rate::RateLimiter},
    server::{Shared, stats::Decision},
};

/// Who sent a query, as the socket saw it.
#[derive(Clone, Copy, Debug)]
pub struct Client {
    pub addr: std::net::SocketAddr,
}

/// The client policy and its state.
#[derive(Default)]
pub struct Gate {
    pub policy: ClientPolicyTable,
    pub rate: Option<RateLimiter>,
    pub cookies: Option<Cookies>,
    /// The identity told by NSID and CHAOS, when either is on.
    pub identity: Option<Identity>,
    /// The ceiling on UDP answers (`--udp-max-payload`).
    pub udp_ceiling: UdpCeiling,
    /// When SRV targets are compressed (`--srv-target-compression`).
    pub srv_targets: SrvTargetCompression,
}

impl Gate {
    pub fn new(policy: ClientPolicyTable, cookies: Option<Cookies>) -> Self {
        let rate = policy
            .config
            .rate_limit
            .enabled()
            .then(|| RateLimiter::new(policy.config.rate_limit.clone()));
        Self {
            policy,
            rate,
            cookies,
            identity: None,
            udp_ceiling: UdpCeiling::DEFAULT,
            srv_targets: SrvTargetCompression::default(),
        }
    }

    /// Answers over UDP up to `ceiling`, and advertises it.
    pub fn with_udp_ceiling(mut self, ceiling: UdpCeiling) -> Self {
        self.udp_ceiling = ceiling;
        self
    }

    /// Compresses SRV targets as `srv_targets` says.
    pub fn with_srv_targets(mut self, srv_targets: SrvTargetCompression) -> Self {
        self.srv_targets = srv_targets;
        self
    }

    /// Tells `identity` to those who ask (NSID, CHAOS), as it says.
    pub fn with_identity(mut self, identity: Identity) -> Self {
        self.identity = (identity.nsid || identity.chaos).then_some(identity);
        self
    }

    /// Whether a TCP connection from `peer` is served at all (drop mode closes it at accept;
    /// refuse mode serves it REFUSED).
    pub fn accepts_connection(&self, peer: IpAddr, shared: &Shared) -> bool {
        let grants = self.policy.grants(peer);
        if grants.allowed || self.policy.config.outside == Outside::Refuse {
            return true;
        }
        shared.stats.decided(Decision::NotAllowed);
        false
    }

    /// The answer to `query` from `client`, or none.
    pub fn answer(
        &self,
        shared: &Shared,
        query: &Query,
        transport: Transport,
        client: Client,
    ) -> Option<Answer> {
        let ip = client.addr.ip();
        if transport == Transport::Udp && is_martian(client.addr) {
            shared.stats.decided(Decision::Martian);
            return None;
        }
        let grants = self.policy.grants(ip);
        let mut asker = Asker {
            client: Some(ip),
            cookies: self.cookies.as_ref(),
            shape: Shape::Full,
            identity: self.identity.as_ref(),
            udp_ceiling: self.udp_ceiling,
            srv_targets: self.srv_targets,
        };
        if !grants.allowed {
            if self.policy.config.outside == Outside::Drop {
                shared.stats.decided(Decision::NotAllowed);
                return None;
            }
            shared.stats.decided(Decision::Refused);
            asker.shape = Shape::Refused;
        }
        let answer = match asker.shape {
            // Admitted: transfers over UDP and signed queries are the transfers' to answer.
            Shape::Full => match shared.answer_by_transfers(query, transport, client) {
                Some(made) => made?,
                None => shared.answer_as(query, transport, &asker)?,
            },
            _ => shared.answer_as(query, transport, &asker)?,
        };
        // TCP is not limited: it is where a limited client is sent.
        let (Some(rate), Transport::Udp) = (&self.rate, transport) else {
            return Some(answer);
        };
        if grants.exempt || matches!(answer.cookie, CookieState::Valid(_)) {
            return Some(answer);
        }
        match rate.admit(ip, answer.class) {
            Admission::Answer => Some(answer),
            Admission::Drop => {
                shared.stats.decided(Decision::RateLimited);
                None
            }
            Admission::Slip => {
                asker.shape = match answer.cookie {
                    CookieState::ClientOnly(_) => Shape::BadCookie,
                    _ => Shape::Slip,
                };
                shared.stats.decided(if asker.shape == Shape::Slip {
                    Decision::Slipped
                } else {
                    Decision::BadCookie
                });
                shared.answer_as(query, transport, &asker)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hickory_proto::{
        op::{Edns, Message, MessageType, OpCode, Query, ResponseCode},
        rr::{
            Name, RecordType,
            rdata::opt::{EdnsCode, EdnsOption},
        },
    };

    use super::*;
    use crate::{
        clients::{ClientsConfig, RateLimit},
        sources::file,
    };
    use hostport_dns_core::table::RecordTable;

    const ZONE: &str =
        "zones:\n  - name: prod.coreha.example\n    records:\n      www: 198.18.0.30\n";

    fn query(cookie: &[u8]) -> Vec<u8> {
        let mut message = Message::new(7, MessageType::Query, OpCode::Query);
        message.add_query(Query::query(
            Name::from_ascii("www.prod.coreha.example.").unwrap(),
            RecordType::A,
        ));
        let mut edns = Edns::new();
        edns.options_mut().insert(EdnsOption::Unknown(
            u16::from(EdnsCode::Cookie),
            cookie.to_vec(),
        ));
        message.set_edns(edns);
        message.to_vec().unwrap()
    }

    fn shared_limiting_to_one_a_second() -> Arc<Shared> {
        let config = ClientsConfig {
            rate_limit: RateLimit {
                responses_per_second: 1,
                negative_per_second: 1,
                errors_per_second: 1,
                slip: 1,
                exempt: Vec::new(),
            },
            ..ClientsConfig::default()
        };
        let cookies = Cookies::with_secrets(vec![[9; 16]]);
        let shared = Shared::with_gate(Gate::new(ClientPolicyTable::new(config), Some(cookies)));
        let snapshot = file::parse(ZONE, "zone".as_ref()).unwrap();
        shared.publish(RecordTable::compile(&snapshot.zones, snapshot.records()).0);
        shared
    }

    fn ask(shared: &Shared, query: &[u8]) -> Message {
        let client = Client {
            addr: "198.18.0.2:5353".parse().unwrap(),
        };
        let bytes = shared
            .answer_client(
                &hostport_dns_core::dns::Query::read(query),
                Transport::Udp,
                client,
            )
            .unwrap();
        Message::from_vec(&bytes).unwrap()
    }

    fn cookie_of(message: &Message) -> Vec<u8> {
        match message
            .edns
            .as_ref()
            .unwrap()
            .options()
            .get(EdnsCode::Cookie)
        {
            Some(EdnsOption::Unknown(_, data)) => data.clone(),
            other => panic!("no cookie: {other:?}"),
        }
    }

    #[test]
    fn a_limited_client_cookie_gets_badcookie_and_its_server_cookie_exempts_it() {
        let shared = shared_limiting_to_one_a_second();
        // Over the budget (one a second: of five quick queries at least one is over it), with a
        // client cookie only: BADCOOKIE, with a server cookie to retry with (RFC 7873 §5.2.3),
        // not a truncated slip.
        let limited = (0..5)
            .map(|_| ask(&shared, &query(&[1; 8])))
            .find(|m| m.metadata.response_code != ResponseCode::NoError)
            .expect("a limited answer");
        assert_eq!(limited.metadata.response_code, ResponseCode::BADCOOKIE);
        assert!(!limited.metadata.truncation && limited.answers.is_empty());
        let cookie = cookie_of(&limited);
        assert_eq!(cookie.len(), 24);
        // With it, the client is answered however often it asks.
        for _ in 0..20 {
            let answered = ask(&shared, &query(&cookie));
            assert_eq!(answered.metadata.response_code, ResponseCode::NoError);
            assert_eq!(answered.answers.len(), 1);
        }
        let decisions: Vec<_> = shared.stats.decisions().collect();
        assert!(
            decisions.iter().any(|(d, n)| *d == "badcookie" && *n >= 1),
            "{decisions:?}"
        );
    }
}
