//! hostport-dns XDP program: answers A and AAAA queries for the served zones straight from the
//! name table, and passes every packet it does not clearly own up to the stack, where the agent's
//! userspace server answers it.
//!
//! The packet path reads top to bottom: parse (eth → ip → udp), enter the table's read section,
//! check who asks (this host, a plausible source, an allowed client), parse the query, look up,
//! plan the answer, charge it to the client's rate, rewrite the packet into it. Every reason to
//! pass or drop is a [`Counter`], turned into `XDP_PASS` or `XDP_DROP` in exactly one place.
#![no_std]
#![no_main]
// The atomic intrinsics (see `atomic`): the BPF target has no atomic read-modify-write methods.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod answer;
mod atomic;
mod client;
mod csum;
mod dns;
mod eth;
#[cfg(feature = "testbed")]
mod hold;
mod host;
mod ip;
mod lease;
mod lookup;
mod packet;
mod rate;
mod records;
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
    btf_maps,
    macros::{btf_map, map, xdp},
    maps::{Array, LpmTrie, PerCpuArray},
    programs::XdpContext,
};
use aya_log_ebpf::{debug, trace};
use hostport_dns_common::{
    counters::{ALL_COUNTER_SLOTS, Counter, Verdict, ZONE_COUNTER_SLOTS},
    entry::{BigEntry, NameEntry, SmallEntry, ZoneEntry},
    generation::{Capacity, GENERATIONS, Generation, LeaseClock, ReaderSlot},
    host::HostSlot,
    index::Bucket,
    limits::{MAX_CLIENT_PREFIXES, RATE_BUCKETS},
    policy::{ClientPolicy, RateBucket},
};

/// `BPF_F_MMAPABLE`: the agent writes the table through a shared mapping, with plain stores.
const MMAPABLE: u32 = 1 << 10;

/// The table's sizes, as the object declares them. The agent sizes the table maps at load time
/// (`--kernel-names`) and sets `HPD_CAPACITY` to match.
const CAPACITY: Capacity = Capacity::DEFAULT;

/// Which generation is active, the hash seed, the layout (`hostport_dns_common::generation`).
#[map]
static HPD_GEN: Array<Generation> = Array::with_max_entries(1, MMAPABLE);

/// The name index, both generations. Arrays throughout: the verifier inlines their lookups.
#[map]
static HPD_INDEX: Array<Bucket> = Array::with_max_entries(GENERATIONS * CAPACITY.buckets, MMAPABLE);

/// Name entries of three sizes (`hostport_dns_common::entry`), one array each that both
/// generations' indexes refer into (written copy-on-write: `hostport_dns_common::generation`).
#[map]
static HPD_SMALL: Array<SmallEntry> = Array::with_max_entries(CAPACITY.small, MMAPABLE);

#[map]
static HPD_NAMES: Array<NameEntry> = Array::with_max_entries(CAPACITY.names, MMAPABLE);

#[map]
static HPD_BIG: Array<BigEntry> = Array::with_max_entries(CAPACITY.big, MMAPABLE);

#[map]
static HPD_ZONES: Array<ZoneEntry> =
    Array::with_max_entries(GENERATIONS * CAPACITY.zones, MMAPABLE);

/// This host's addresses, both generations (`hostport_dns_common::host`).
#[map]
static HPD_HOST: Array<HostSlot> = Array::with_max_entries(GENERATIONS * CAPACITY.host, MMAPABLE);

/// Runs inside a read section, per CPU and generation (`table`).
#[map]
static HPD_READERS: PerCpuArray<ReaderSlot> = PerCpuArray::with_max_entries(1, 0);

/// The lease's timer, deadline and epoch (`lease`). Defined with BTF: the kernel finds the timer
/// in the value by its type's name.
#[btf_map]
static HPD_LEASE: btf_maps::Array<LeaseClock, 1, 0> = btf_maps::Array::new();

#[map]
static HPD_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(ALL_COUNTER_SLOTS, 0);

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

/// The ceiling on UDP answers (`--udp-max-payload`), which the OPT record advertises; the agent
/// sets it at load time.
#[unsafe(no_mangle)]
static HPD_UDP_MAX_PAYLOAD: u16 = hostport_dns_common::limits::DEFAULT_UDP_MAX_PAYLOAD;

/// The table maps' sizes (the entries', and the index's, zones' and host set's per generation);
/// the agent sets it at load time, with the maps.
#[unsafe(no_mangle)]
static HPD_CAPACITY: Capacity = CAPACITY;

/// The test bed's build only: how long a run stays in its read section (see `hold`).
#[cfg(feature = "testbed")]
#[unsafe(no_mangle)]
static HPD_HOLD: u32 = 0;

// Inlined into the entry the macro makes: the program must stay one function (no BPF-to-BPF
// call; `tests/tests/integration/xdp_calls.rs`), which LLVM's size heuristics would not always give.
#[xdp]
#[inline(always)]
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
/// The table is read inside one read section (`table::Section`), left when it goes out of scope.
#[inline(always)]
fn try_hostport_dns_xdp(ctx: &XdpContext) -> Result<Counter, Counter> {
    let l2 = eth::parse(ctx)?;
    let l3 = ip::parse(ctx, &l2)?;
    let l4 = udp::parse(ctx, &l3)?;
    let table = table::Section::enter()?;
    let host = host::ensure_addressed_to_this_host(ctx, &l3, &table)?;
    source::ensure_plausible(&l2, &l4, &host, &table)?;
    let client = client::admit(&host)?;
    let scratch = scratch::get()?;
    let query = dns::parse(ctx, &l4, scratch, table.seed())?;
    let found = lookup::find(&query, scratch, &table)?;
    let mut plan = answer::plan(&query, &found, scratch, &table)?;
    rate::limit(&client, &query, &mut plan, &table)?;
    rewrite::into_answer(ctx, &l3, &l4, &query, &plan, scratch)?;
    stats::count_zone(plan.counter_slot, query.qtype);
    Ok(plan.counter)
}

/// Renews the table's lease (`lease`): the agent runs it with `BPF_PROG_TEST_RUN` every second,
/// the duration in the frame; never attached.
#[xdp]
pub fn hostport_dns_renew(ctx: XdpContext) -> u32 {
    match lease::renew(&ctx) {
        Ok(()) => xdp_action::XDP_PASS,
        Err(error) => error.action(),
    }
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
