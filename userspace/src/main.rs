fn main() -> anyhow::Result<()> {
    let mut ebpf = aya::EbpfLoader::new().verifier_log_level(aya::VerifierLogLevel::STATS)
        .override_global("HPD_DNS_PORT", &1053u16, true)
        .load(hostport_dns::EBPF_OBJECT)?;
    let prog: &mut aya::programs::Xdp = ebpf.program_mut("hostport_dns_xdp").unwrap().try_into()?;
    match prog.load() {
        Ok(()) => { println!("loaded"); let info = prog.info()?; println!("insns: {:?} verified: {:?}", info.size_translated(), info.verified_instruction_count()); },
        Err(e) => { eprintln!("{e:#}"); if let aya::programs::ProgramError::LoadError{verifier_log, ..} = &e { let s = format!("{verifier_log}"); std::fs::write("/tmp/verifier.log", &s).ok(); eprintln!("{}", &s[s.len().saturating_sub(3000)..]); } }
    }
    Ok(())
}
