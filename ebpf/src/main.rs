//! hostport-dns XDP program: answers A and AAAA queries for the served zones straight from the
//! name table, and passes every packet it does not clearly own up to the stack, where the agent's
//! userspace server answers it.
//!
//! The packet path reads top to bottom: parse (eth → ip → udp → dns), look up, plan the answer,
//! rewrite the packet into it. Every reason to pass is a [`Counter`], turned into `XDP_PASS` in
//! exactly one place.
#![no_std]
#![no_main]

mod answer;
mod csum;
mod dns;
mod eth;
mod host;
mod ip;
mod lookup;
mod packet;
#[cfg(feature = "testbed")]
mod reflect;
mod rewrite;
mod scratch;
mod stats;
mod table;
mod udp;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::{Array, HashMap, PerCpuArray},
    programs::XdpContext,
};
use aya_log_ebpf::{debug, trace};
use hostport_dns_common::{
    counters::{COUNTER_SLOTS, Counter},
    generation::{GENERATIONS, Generation},
    limits::{NAMES_CAPACITY, ZONES_CAPACITY},
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
static HPD_SCRATCH: PerCpuArray<scratch::Scratch> = PerCpuArray::with_max_entries(1, 0);

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
            debug!(&ctx, "passed: {}", reason.label());
            xdp_action::XDP_PASS
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
    host::ensure_addressed_to_this_host(ctx, &l3, table)?;
    let scratch = scratch::get()?;
    let query = dns::parse(ctx, &l4, scratch, table)?;
    let found = lookup::find(&query, scratch, table)?;
    let plan = answer::plan(&query, &found, scratch, table)?;
    rewrite::into_answer(ctx, &l3, &l4, &query, &plan, scratch)?;
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
