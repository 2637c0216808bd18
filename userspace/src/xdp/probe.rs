//! What the kernel must offer before the program is loaded: XDP programs, and every helper the
//! program calls. The helpers are read from the object itself (its call instructions), so the
//! probe cannot fall behind the program. A kernel below the documented floor (5.12) lacks some
//! of them: the probe names the first one missing, and with `--xdp-mode auto` the agent then
//! serves from userspace alone. The lease's timer helpers (Linux 5.15) are only required of a
//! kernel that will hold a pinned table: only a pinned table is leased.

use aya::{
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported, is_program_supported},
};
use object::{Object, ObjectSection, SectionKind};

use crate::xdp::{XdpError, loader::chain};

/// Names a helper the probe reports missing whatever the kernel says (`xdp_adjust_tail`, ...):
/// how the tests stand for a kernel that lacks one.
pub const PRETEND_MISSING_ENV: &str = "HOSTPORT_DNS_TEST_MISSING_HELPER";

/// eBPF instruction: a call (BPF_JMP | BPF_CALL); source register 0 marks a helper call (1 is a
/// call into the program's own functions, 2 a kernel function).
const CALL_OPCODE: u8 = 0x85;
const INSTRUCTION_BYTES: usize = 8;

/// The helpers only the lease's renewal program calls (`xdp::lease`).
const LEASE_HELPERS: [&str; 3] = ["timer_init", "timer_set_callback", "timer_start"];

/// Checks that the kernel runs XDP programs and offers each helper `object` calls (the lease's
/// only when the table is `leased`); the error names what is missing.
pub fn kernel_supports(object: &[u8], leased: bool) -> Result<(), XdpError> {
    let missing = |what: String| XdpError::Unsupported(what);
    match is_program_supported(ProgramType::Xdp) {
        Ok(true) => {}
        Ok(false) => return Err(missing("XDP programs".into())),
        Err(err) => return Err(probe_failed(&chain(&err))),
    }
    let pretend = std::env::var(PRETEND_MISSING_ENV).unwrap_or_default();
    for id in helper_calls(object)? {
        let (name, helper) = known_helper(id).ok_or_else(|| {
            XdpError::Load(format!(
                "the program calls helper {id}, which the agent cannot probe"
            ))
        })?;
        if !leased && LEASE_HELPERS.contains(&name) {
            continue;
        }
        if name == pretend {
            return Err(missing(format!("the bpf_{name} helper (pretended)")));
        }
        match is_helper_supported(ProgramType::Xdp, helper) {
            Ok(true) => {}
            Ok(false) => return Err(missing(format!("the bpf_{name} helper"))),
            Err(err) => return Err(probe_failed(&chain(&err))),
        }
    }
    Ok(())
}

/// A probe the kernel refused outright: no capability to load programs at all.
fn probe_failed(reason: &str) -> XdpError {
    if reason.contains("Operation not permitted") || reason.contains("Permission denied") {
        XdpError::Permission(reason.to_owned())
    } else {
        XdpError::Load(format!("probing the kernel's BPF support failed: {reason}"))
    }
}

/// The helper ids the object's code calls, each once, in order.
pub fn helper_calls(object: &[u8]) -> Result<Vec<i32>, XdpError> {
    let file = object::File::parse(object)
        .map_err(|e| XdpError::Load(format!("cannot read the program's object: {e}")))?;
    let mut ids = Vec::new();
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let code = section
            .data()
            .map_err(|e| XdpError::Load(format!("cannot read the program's code: {e}")))?;
        for instruction in code.chunks_exact(INSTRUCTION_BYTES) {
            let is_helper_call = instruction[0] == CALL_OPCODE && instruction[1] >> 4 == 0;
            if is_helper_call {
                let imm = [
                    instruction[4],
                    instruction[5],
                    instruction[6],
                    instruction[7],
                ];
                ids.push(i32::from_le_bytes(imm));
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The helpers the program may call, by kernel id: what the probe can check.
fn known_helper(id: i32) -> Option<(&'static str, BpfHelper)> {
    use BpfHelper as H;
    let known = [
        ("map_lookup_elem", H::BPF_FUNC_map_lookup_elem),
        ("map_update_elem", H::BPF_FUNC_map_update_elem),
        ("map_delete_elem", H::BPF_FUNC_map_delete_elem),
        ("ktime_get_ns", H::BPF_FUNC_ktime_get_ns),
        ("get_prandom_u32", H::BPF_FUNC_get_prandom_u32),
        ("get_smp_processor_id", H::BPF_FUNC_get_smp_processor_id),
        ("perf_event_output", H::BPF_FUNC_perf_event_output),
        ("csum_diff", H::BPF_FUNC_csum_diff),
        ("xdp_adjust_head", H::BPF_FUNC_xdp_adjust_head),
        ("xdp_adjust_tail", H::BPF_FUNC_xdp_adjust_tail),
        ("ringbuf_output", H::BPF_FUNC_ringbuf_output),
        ("ringbuf_reserve", H::BPF_FUNC_ringbuf_reserve),
        ("ringbuf_submit", H::BPF_FUNC_ringbuf_submit),
        ("ringbuf_discard", H::BPF_FUNC_ringbuf_discard),
        ("ktime_get_coarse_ns", H::BPF_FUNC_ktime_get_coarse_ns),
        ("loop", H::BPF_FUNC_loop),
        ("xdp_get_buff_len", H::BPF_FUNC_xdp_get_buff_len),
        ("xdp_load_bytes", H::BPF_FUNC_xdp_load_bytes),
        ("xdp_store_bytes", H::BPF_FUNC_xdp_store_bytes),
        ("timer_init", H::BPF_FUNC_timer_init),
        ("timer_set_callback", H::BPF_FUNC_timer_set_callback),
        ("timer_start", H::BPF_FUNC_timer_start),
    ];
    known.into_iter().find(|(_, helper)| *helper as i32 == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_helper_the_program_calls_can_be_probed() {
        let calls = helper_calls(crate::EBPF_OBJECT).expect("the object parses");
        assert!(
            calls.len() >= 3,
            "the program calls at least adjust_head, adjust_tail and ktime: {calls:?}"
        );
        for id in &calls {
            assert!(known_helper(*id).is_some(), "helper {id} cannot be probed");
        }
        let names: Vec<_> = calls
            .iter()
            .filter_map(|id| known_helper(*id))
            .map(|(n, _)| n)
            .collect();
        assert!(names.contains(&"xdp_adjust_tail"), "{names:?}");
        for lease in LEASE_HELPERS {
            assert!(names.contains(&lease), "{names:?}");
        }
    }
}
