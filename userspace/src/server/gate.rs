//! The client policy on the userspace path, in the kernel's order: sources that cannot have
//! sent the query, the allow-list, then the answer (with its server cookie) and its rate.

use std::net::IpAddr;

use hostport_dns_common::policy::Admission;

use crate::{
    clients::{
        ClientPolicyTable, Outside,
        cookies::{CookieState, Cookies},
        martian::is_martian,
        rate::RateLimiter,
    },
    server::{
        Shared,
        answer::{Answer, Asker, Shape, Transport},
        stats::Decision,
    },
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
        }
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
        query: &[u8],
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
        };
        if !grants.allowed {
            if self.policy.config.outside == Outside::Drop {
                shared.stats.decided(Decision::NotAllowed);
                return None;
            }
            shared.stats.decided(Decision::Refused);
            asker.shape = Shape::Refused;
        }
        let answer = shared.answer_as(query, transport, &asker)?;
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
