//! The XDP program loaded in this process with a table written into its maps, driven through
//! BPF_PROG_TEST_RUN.

use std::{net::IpAddr, time::Duration};

use aya::{
    Ebpf,
    maps::{Map, MapData},
    programs::{TestRun, TestRunOptions, Xdp},
};
use hostport_dns::{
    clients::{ClientPolicyTable, ClientsConfig},
    sources::file,
    xdp::{
        EbpfLogLevel,
        counters::Counters,
        hostset::HostAddresses,
        lease::Lease,
        loader::{self, Settings},
        writer::MapWriter,
    },
};
use hostport_dns_common::{generation::Capacity, maps};
use hostport_dns_core::{dns::message::UdpCeiling, table::RecordTable};

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;

pub struct Program {
    pub ebpf: Ebpf,
    pub table: RecordTable,
    pub counters: Counters,
    pub writer: MapWriter,
    /// Kernel ids of the table maps (to open them beside the writer), by name.
    pub map_ids: Vec<(&'static str, u32)>,
    /// The ceiling on UDP answers it was loaded with: userspace answers alike with it.
    pub udp_ceiling: UdpCeiling,
}

impl Program {
    /// Loads the program for port 1053, writes the zones of `records_yaml` into its maps and
    /// `local` into its local-address sets.
    pub fn load(records_yaml: &str, local: &[IpAddr]) -> Self {
        let snapshot = file::parse(records_yaml, "test zones".as_ref()).expect("valid zones");
        let (table, warnings) = RecordTable::compile(&snapshot.zones, snapshot.records());
        assert!(warnings.is_empty(), "{warnings:?}");
        Self::load_table(table, local, Capacity::DEFAULT)
    }

    /// Leases the table for `duration` from now, as an agent with a pin directory does (the
    /// renewal program arms the lease's timer); renewed by the returned lease only.
    pub fn lease(&self, duration: Duration) -> Lease {
        let map = MapData::from_id(self.map_id(maps::GENERATION)).expect("open the generation map");
        Lease::take_over_map(&map, &self.ebpf, duration).expect("lease the table")
    }

    /// Loads the program with the client policy of `clients`, and the zones of `records_yaml`.
    pub fn load_with_clients(records_yaml: &str, local: &[IpAddr], clients: ClientsConfig) -> Self {
        let snapshot = file::parse(records_yaml, "test zones".as_ref()).expect("valid zones");
        let (table, warnings) = RecordTable::compile(&snapshot.zones, snapshot.records());
        assert!(warnings.is_empty(), "{warnings:?}");
        let ebpf = loader::load_with_policy(1053, &ClientPolicyTable::new(clients))
            .expect("load the XDP program");
        let mut program = Self::from_ebpf(ebpf, local, Capacity::DEFAULT);
        program.writer.write_table(&table).expect("write the table");
        program.table = table;
        program
    }

    /// Loads the program and writes `table` with a writer of `capacity`.
    pub fn load_table(table: RecordTable, local: &[IpAddr], capacity: Capacity) -> Self {
        let mut program = Self::unwritten(local, capacity);
        program.writer.write_table(&table).expect("write the table");
        program.table = table;
        program
    }

    /// Loads the program with no table written yet (only the local addresses handed over).
    pub fn unwritten(local: &[IpAddr], capacity: Capacity) -> Self {
        Self::from_object(hostport_dns::EBPF_OBJECT, local, capacity)
    }

    /// Loads `object` (the agent's, or the test bed's) with a table of `capacity`, nothing
    /// written yet but the local addresses.
    pub fn from_object(object: &[u8], local: &[IpAddr], capacity: Capacity) -> Self {
        Self::holding_readers(object, local, capacity, 0)
    }

    /// [`Program::load`] with `ceiling` on UDP answers (`--udp-max-payload`) instead of the
    /// default.
    pub fn load_with_ceiling(records_yaml: &str, local: &[IpAddr], ceiling: u16) -> Self {
        let snapshot = file::parse(records_yaml, "test zones".as_ref()).expect("valid zones");
        let (table, warnings) = RecordTable::compile(&snapshot.zones, snapshot.records());
        assert!(warnings.is_empty(), "{warnings:?}");
        let object = hostport_dns::EBPF_OBJECT;
        let mut program = Self::loaded(object, local, Capacity::DEFAULT, 0, ceiling);
        program.writer.write_table(&table).expect("write the table");
        program.table = table;
        program
    }

    /// [`Program::from_object`] whose runs stay `hold` spin iterations in their read section
    /// (the test bed's object only).
    pub fn holding_readers(object: &[u8], local: &[IpAddr], capacity: Capacity, hold: u32) -> Self {
        let ceiling = hostport_dns_common::limits::DEFAULT_UDP_MAX_PAYLOAD;
        Self::loaded(object, local, capacity, hold, ceiling)
    }

    fn loaded(
        object: &[u8],
        local: &[IpAddr],
        capacity: Capacity,
        hold: u32,
        ceiling: u16,
    ) -> Self {
        let clients = ClientPolicyTable::default();
        let settings = Settings {
            port: 1053,
            pins: None,
            log: EbpfLogLevel::Off,
            clients: &clients,
            capacity,
            udp_max_payload: ceiling,
            hold_readers: hold,
        };
        let ebpf = loader::load_object(object, &settings).expect("load the XDP program");
        let mut program = Self::from_ebpf(ebpf, local, capacity);
        program.udp_ceiling = UdpCeiling::new(ceiling).expect("a ceiling of 512 to 65507");
        program
    }

    fn from_ebpf(mut ebpf: Ebpf, local: &[IpAddr], capacity: Capacity) -> Self {
        let map_ids = maps::pinned_maps(&capacity)
            .iter()
            .filter_map(|(name, _, _)| {
                let info = match ebpf.map(name)? {
                    Map::Array(data) | Map::PerCpuArray(data) => data.info().ok()?,
                    _ => return None,
                };
                Some((*name, info.id()))
            })
            .collect();
        let mut writer = MapWriter::new(&mut ebpf, capacity).expect("the maps");
        writer
            .write_host(HostAddresses::answering(local.iter().copied()))
            .expect("the local addresses");
        let counters =
            Counters::new(&mut ebpf, writer.zone_counters().names()).expect("the counters");
        Self {
            ebpf,
            table: RecordTable::compile(
                &[],
                Vec::<hostport_dns_core::records::SourceRecord>::new(),
            )
            .0,
            counters,
            writer,
            map_ids,
            udp_ceiling: UdpCeiling::DEFAULT,
        }
    }

    /// The kernel id of the table map `name`.
    pub fn map_id(&self, name: &str) -> u32 {
        self.map_ids
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, id)| *id)
            .expect("a table map")
    }

    /// The measurement's own floor, from a program that only returns XDP_PASS: the median time
    /// BPF_PROG_TEST_RUN reports for it, and the median of its own run time as the kernel's BPF
    /// statistics account it (their clock reads, with next to no program between them).
    pub fn floor(&mut self, frame: &[u8], runs: usize) -> (u128, u128) {
        let mut testbed = Ebpf::load(hostport_dns::TESTBED_OBJECT).expect("the test bed's object");
        let program: &mut Xdp = testbed
            .program_mut(maps::PASS_PROGRAM)
            .expect("the pass program")
            .try_into()
            .expect("XDP");
        program.load().expect("load the pass program");
        let program: &Xdp = program;
        let mut times: Vec<u128> = (0..runs)
            .map(|_| single_run(program, frame).as_nanos())
            .collect();
        times.sort();
        let mut own = run_times(program, frame, runs);
        own.sort();
        (times[runs / 2], own[runs / 2].as_nanos())
    }

    /// The XDP program that answers (the one the agent attaches).
    fn answering_program(&self) -> &Xdp {
        self.ebpf
            .program(maps::PROGRAM)
            .expect("the program")
            .try_into()
            .expect("XDP")
    }

    /// The answering program's own run time for `runs` single runs of `frame`, as the kernel's
    /// BPF statistics (BPF_ENABLE_STATS, what `bpftool prog` shows as run_time_ns) account it:
    /// only the program, without BPF_PROG_TEST_RUN's set-up and timer around it.
    pub fn program_times(&self, frame: &[u8], runs: usize) -> Vec<Duration> {
        run_times(self.answering_program(), frame, runs)
    }

    /// Runs one frame once: the verdict, the frame as the program left it, and the time the
    /// kernel measured.
    pub fn run(&self, frame: &[u8]) -> (u32, Vec<u8>, Duration) {
        run_once(self.answering_program(), frame)
    }

    /// Runs one frame once as if it arrived on interface `ifindex` (of the calling thread's
    /// network namespace): the verdict and the frame as the program left it.
    pub fn run_on(&self, frame: &[u8], ifindex: u32) -> (u32, Vec<u8>) {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex; BPF_PROG_TEST_RUN wants data 0 and data_end the frame's length.
        let md: [u32; 6] = [0, frame.len() as u32, 0, ifindex, 0, 0];
        let ctx: Vec<u8> = md.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let mut out = vec![0u8; 4096];
        let result = self
            .answering_program()
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx),
                repeat: 1,
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN with an ingress interface");
        out.truncate(result.data_size_out as usize);
        (result.return_value, out)
    }

    /// The answering program, for runs from other threads while the table changes.
    pub fn program(&self) -> &Xdp {
        self.answering_program()
    }
}

/// Runs one frame once through `program`: the verdict, the frame as the program left it, and the
/// time the kernel measured.
pub fn run_once(program: &Xdp, frame: &[u8]) -> (u32, Vec<u8>, Duration) {
    let mut out = vec![0u8; 4096];
    let result = program
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            repeat: 1,
            ..Default::default()
        })
        .expect("BPF_PROG_TEST_RUN");
    out.truncate(result.data_size_out as usize);
    (result.return_value, out, result.duration)
}

/// One BPF_PROG_TEST_RUN of `frame`: the time the kernel reports.
fn single_run(program: &Xdp, frame: &[u8]) -> Duration {
    program
        .test_run(TestRunOptions {
            data_in: Some(frame),
            repeat: 1,
            ..Default::default()
        })
        .expect("BPF_PROG_TEST_RUN")
        .duration
}

/// `program`'s own run time in each of `runs` single runs of `frame`, from the kernel's BPF
/// statistics.
fn run_times(program: &Xdp, frame: &[u8], runs: usize) -> Vec<Duration> {
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF_ENABLE_STATS");
    let run_time = || program.info().expect("the program's info").run_time();
    (0..runs)
        .map(|_| {
            let before = run_time();
            single_run(program, frame);
            run_time().saturating_sub(before)
        })
        .collect()
}

/// How a test drives many runs of one frame from a CPU without a system call between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepeatedRuns {
    /// BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES: each repeat starts from the frame as
    /// given, and XDP_TX frames leave through the context's interface.
    LiveFrames,
    /// One plain run a system call (a plain run with `repeat > 1` hands each repeat the frame
    /// the previous one left: after an answer, a response, not the query).
    OneAtATime,
}

/// Finds out whether this kernel lets this process run `program` on live frames: some refuse it
/// (EPERM on 6.18 for a root without `cap_sys_resource`, as on this project's CI machines), and
/// a test that needs many runs must then make them one at a time. Says which, and why.
pub fn repeated_runs(program: &Xdp, frame: &[u8], ctx: &[u8]) -> RepeatedRuns {
    let probe = program.test_run(TestRunOptions {
        data_in: Some(frame),
        ctx_in: Some(ctx),
        repeat: 1,
        attrs: aya::programs::TestRunAttrs::new().xdp_live_frames(1),
        ..Default::default()
    });
    match probe {
        Ok(_) => RepeatedRuns::LiveFrames,
        Err(error) => {
            let errno = os_error(&error);
            let refused = [libc::EPERM, libc::EACCES, libc::EINVAL, libc::EOPNOTSUPP];
            assert!(
                errno.is_some_and(|e| refused.contains(&e)),
                "BPF_PROG_TEST_RUN with live frames failed otherwise than by a refusal: {error:?}"
            );
            println!(
                "this kernel refuses live-frame test runs ({}): runs one at a time instead",
                std::io::Error::from_raw_os_error(errno.unwrap_or_default())
            );
            RepeatedRuns::OneAtATime
        }
    }
}

/// Runs `program` on `frame` (with the context `ctx`) about `runs` times, as `how` says.
pub fn run_repeatedly(program: &Xdp, frame: &[u8], ctx: &[u8], runs: u32, how: RepeatedRuns) {
    match how {
        RepeatedRuns::LiveFrames => {
            program
                .test_run(TestRunOptions {
                    data_in: Some(frame),
                    ctx_in: Some(ctx),
                    repeat: runs,
                    attrs: aya::programs::TestRunAttrs::new().xdp_live_frames(64),
                    ..Default::default()
                })
                .expect("BPF_PROG_TEST_RUN with live frames");
        }
        RepeatedRuns::OneAtATime => {
            for _ in 0..runs {
                program
                    .test_run(TestRunOptions {
                        data_in: Some(frame),
                        ctx_in: Some(ctx),
                        repeat: 1,
                        ..Default::default()
                    })
                    .expect("BPF_PROG_TEST_RUN");
            }
        }
    }
}

/// The errno in an error's chain of sources, if any.
fn os_error(error: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        cause = e.source();
    }
    None
}
