//! hostport-dns XDP program: answers A and AAAA queries for the served zones straight from the
//! name table, and passes every packet it does not clearly own up to the stack, where the agent's
//! userspace server answers it.
//!
//! The packet path reads top to bottom: parse (eth → ip → udp), check who asks (this host, a
//! plausible source, an allowed client), parse the query, look up, plan the answer, charge it to
//! the client's rate, rewrite the packet into it. Every reason to pass or drop is a [`Counter`],
//! turned into `XDP_PASS` or `XDP_DROP` in exactly one place.
#![no_std]
#![no_main]

mod answer;
mod client;
mod csum;
mod dns;
mod eth;
mod host;
mod ip;
mod lookup;
mod packet;
mod rate;
#[cfg(feature = "testbed")]
mod reflect;
mod rewrite;
mod scratch;
mod source;
mod stats;
mod table;
mod udp;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::{Array, HashMap, LpmTrie, PerCpuArray},
    programs::XdpContext,
};
use aya_log_ebpf::{debug, trace};
use hostport_dns_common::{
    counters::{COUNTER_SLOTS, Counter, Verdict, ZONE_COUNTER_SLOTS},
    generation::{GENERATIONS, Generation},
    limits::{MAX_CLIENT_PREFIXES, NAMES_CAPACITY, RATE_BUCKETS, ZONES_CAPACITY},
    policy::{ClientPolicy, RateBucket},
    record::{LocalAddrs, NameEntry, NameKey, ZoneEntry},
};

/// `BPF_F_NO_PREALLOC`: entries are allocated per update, so the map costs memory for the names
/// it holds, not for its capacity. (Freed elements may be reused at once; that is harmless here
/// because the agent only writes the generation no program run reads: see `table`.)
const NO_PREALLOC: u32 = 1;

/// Which generation is active, and the hash seed (`hostport_dns_common::generation`).
#[map]
static HPD_GEN: Array<Generation> = Array::with_max_entries(1, 0);

#[map]
static HPD_NAMES: HashMap<NameKey, NameEntry> =
    HashMap::with_max_entries(GENERATIONS * NAMES_CAPACITY, NO_PREALLOC);

/// An array, so that its lookup is inlined by the verifier (no helper call).
#[map]
static HPD_ZONES: Array<ZoneEntry> = Array::with_max_entries(GENERATIONS * ZONES_CAPACITY, 0);

#[map]
static HPD_LOCAL: Array<LocalAddrs> = Array::with_max_entries(GENERATIONS, 0);

#[map]
static HPD_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

#[map]
static HPD_ZONE_ANSW: PerCpuArray<u64> = PerCpuArray::with_max_entries(ZONE_COUNTER_SLOTS, 0);

#[map]
static HPD_SCRATCH: PerCpuArray<scratch::Scratch> = PerCpuArray::with_max_entries(1, 0);

/// Client prefixes → grants (`hostport_dns_common::policy`), written once by the agent at load.
#[map]
static HPD_CLIENTS4: LpmTrie<[u8; 4], u32> = LpmTrie::with_max_entries(MAX_CLIENT_PREFIXES, 0);

#[map]
static HPD_CLIENTS6: LpmTrie<[u8; 16], u32> = LpmTrie::with_max_entries(MAX_CLIENT_PREFIXES, 0);

/// The rate limiter's buckets, shared by every CPU (an array: its lookup is inlined).
#[map]
static HPD_RATE: Array<RateBucket> = Array::with_max_entries(RATE_BUCKETS, 0);

/// Who is served and how much; the agent sets it at load time.
#[unsafe(no_mangle)]
static HPD_POLICY: ClientPolicy = ClientPolicy::OPEN;

/// The UDP port served; the agent sets it at load time.
#[unsafe(no_mangle)]
static HPD_DNS_PORT: u16 = hostport_dns_common::limits::DEFAULT_DNS_PORT;

#[xdp]
pub fn hostport_dns_xdp(ctx: XdpContext) -> u32 {
    match try_hostport_dns_xdp(&ctx) {
        Ok(answered) => {
            stats::count(answered);
            trace!(&ctx, "answered: {}", answered.label());
            xdp_action::XDP_TX
        }
        Err(reason) => {
            stats::count(reason);
            // Off unless the agent is started with --ebpf-log-level: then one load and a branch.
            if reason.verdict() == Verdict::Dropped {
                debug!(&ctx, "dropped: {}", reason.label());
                xdp_action::XDP_DROP
            } else {
                debug!(&ctx, "passed: {}", reason.label());
                xdp_action::XDP_PASS
            }
        }
    }
}

/// Answers the packet in place and returns what kind of answer it got, or the reason to pass it.
#[inline(always)]
fn try_hostport_dns_xdp(ctx: &XdpContext) -> Result<Counter, Counter> {
    let l2 = eth::parse(ctx)?;
    let l3 = ip::parse(ctx, &l2)?;
    let l4 = udp::parse(ctx, &l3)?;
    let table = table::current()?;
    let host = host::ensure_addressed_to_this_host(ctx, &l3, table)?;
    source::ensure_plausible(&l2, &l4, &host)?;
    let client = client::admit(&host)?;
    let scratch = scratch::get()?;
    let query = dns::parse(ctx, &l4, scratch, table)?;
    let found = lookup::find(&query, scratch, table)?;
    let mut plan = answer::plan(&query, &found, scratch, table)?;
    rate::limit(&client, &query, &mut plan, table)?;
    rewrite::into_answer(ctx, &l3, &l4, &query, &plan, scratch)?;
    stats::count_zone(plan.zone, query.qtype);
    Ok(plan.counter)
}

/// Passes every packet. Attached to the far end of a veth pair, it makes native-mode XDP_TX
/// frames from this end get delivered (veth hands them only to a peer with a program); the
/// test bed uses it. Only in the test bed's object.
#[cfg(feature = "testbed")]
#[xdp]
pub fn hostport_dns_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// Benchmark ceiling: reflects DNS queries without any DNS work (see `reflect`). Only in the
/// test bed's object.
#[cfg(feature = "testbed")]
#[xdp]
pub fn hostport_dns_reflect(ctx: XdpContext) -> u32 {
    reflect::try_reflect(&ctx).unwrap_or(xdp_action::XDP_PASS)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects programs that can reach a panic; nothing gets here.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
