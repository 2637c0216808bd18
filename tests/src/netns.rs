//! Network namespaces, veth pairs, and running code or processes inside a namespace.

use std::{
    fs::File,
    os::fd::AsRawFd,
    process::{Command, Output, Stdio},
    sync::{
        Once,
        atomic::{AtomicU32, Ordering},
    },
};

use aya::{
    Ebpf,
    programs::{Xdp, XdpMode},
};

/// A suffix unique to this process and call, `<pid>-<n>`: names from concurrent tests and runs
/// never collide, and a name says which process made it (see [`remove_orphans`]). An interface
/// named `xx<suffix>` stays within 15 bytes (a pid has at most 7 digits).
pub fn unique_suffix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes the namespaces (with the interfaces and XDP programs in them) of test processes
/// that were killed: a guard's drop does not run on SIGKILL or SIGTERM, so a run stopped by hand
/// leaves them behind. Only this test bed's names (`hpd-<tag>-<pid>-<n>`) whose process is gone
/// and in which nothing runs. Done once per process, before its first namespace.
pub fn remove_orphans() {
    let Ok(listed) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&listed.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let gone = creator(name)
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if gone && nothing_runs_in(name) {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// The process that made a namespace of this test bed, from its name.
fn creator(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix("hpd-")?.rsplitn(3, '-');
    let (counter, pid, tag) = (parts.next()?, parts.next()?, parts.next()?);
    (!tag.is_empty() && counter.parse::<u32>().is_ok()).then_some(())?;
    pid.parse().ok()
}

fn nothing_runs_in(name: &str) -> bool {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii().is_empty())
}

/// Runs a command, panicking with its output if it fails.
pub fn sh(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace, deleted (with every interface in it) on drop.
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    pub fn new(tag: &str) -> Self {
        static ORPHANS: Once = Once::new();
        ORPHANS.call_once(remove_orphans);
        let name = format!("hpd-{tag}-{}", unique_suffix());
        sh(Command::new("ip").args(["netns", "add", &name]));
        let ns = Self { name };
        sh(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]));
        ns
    }

    /// A handle on an existing namespace that is not deleted on drop.
    pub fn borrowed(name: &str) -> std::mem::ManuallyDrop<Self> {
        std::mem::ManuallyDrop::new(Self {
            name: name.to_owned(),
        })
    }

    /// `program args...` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// `ip -n <ns> args...`
    pub fn ip(&self, args: &[&str]) -> Output {
        sh(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// Runs `f` on a thread that has entered the namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let ns = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns on this thread only, with a namespace descriptor.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

impl Drop for NetNs {
    /// Deletes the namespace, trying again for a while: the deletion fails (EBUSY) while a
    /// process that was started in it is still tearing down its mounts. A namespace that stays
    /// is said on stderr, with the command that removes it.
    fn drop(&mut self) {
        let mut last = String::new();
        for _ in 0..40 {
            match Command::new("ip")
                .args(["netns", "del", &self.name])
                .stderr(Stdio::piped())
                .output()
            {
                Ok(out) if out.status.success() => return,
                Ok(out) => last = String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                Err(e) => last = e.to_string(),
            }
            if !std::path::Path::new("/run/netns").join(&self.name).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        eprintln!(
            "network namespace {} not deleted ({last}): remove it with `ip netns del {}`",
            self.name, self.name
        );
    }
}

/// One end of a veth pair, inside a namespace.
pub struct End {
    pub ifname: String,
    pub ipv4: &'static str,
    pub ipv6: &'static str,
    pub mac: String,
}

/// Two namespaces joined by a veth pair: the server end and the client end, with static
/// neighbour entries both ways (kxdpgun does no ARP) and a pass-through XDP program on the client
/// end so that native-mode XDP_TX from the server end is delivered.
pub struct Link {
    // Field order is drop order: the program before the namespaces.
    pass_program: Option<Ebpf>,
    pub server: End,
    pub client: End,
    pub client_ns: NetNs,
    pub server_ns: NetNs,
}

pub const SERVER_V4: &str = "198.18.0.1";
pub const CLIENT_V4: &str = "198.18.0.2";
pub const SERVER_V6: &str = "2001:db8::1";
pub const CLIENT_V6: &str = "2001:db8::2";
/// An address inside the server's subnet that is not the server's: "a pod behind the node".
pub const BEHIND_SERVER_V4: &str = "198.18.0.99";

impl Link {
    /// Gives the server what IPVS gives every node: an interface named `kube-ipvs0` holding
    /// `address` (a Service's ClusterIP). A veth stands in for the dummy device this kernel
    /// lacks; the name is what marks IPVS's interface.
    pub fn add_ipvs_address(&self, address: &str) {
        let ns = &self.server_ns;
        ns.ip(&[
            "link",
            "add",
            "kube-ipvs0",
            "type",
            "veth",
            "peer",
            "name",
            "ipvs-peer",
        ]);
        ns.ip(&["addr", "add", &format!("{address}/32"), "dev", "kube-ipvs0"]);
        ns.ip(&["link", "set", "kube-ipvs0", "up"]);
    }

    pub fn new(tag: &str) -> Self {
        Self::build(tag, true)
    }

    /// A link without the pass-through program on the client end, for generators that attach
    /// their own XDP program there (kxdpgun).
    pub fn bare(tag: &str) -> Self {
        Self::build(tag, false)
    }

    fn build(tag: &str, pass_program: bool) -> Self {
        let server_ns = NetNs::new(&format!("{tag}-s"));
        let client_ns = NetNs::new(&format!("{tag}-c"));
        let suffix = unique_suffix();
        let server_if = format!("hs{suffix}");
        let client_if = format!("hc{suffix}");
        sh(Command::new("ip").args([
            "link",
            "add",
            &server_if,
            "netns",
            &server_ns.name,
            "type",
            "veth",
            "peer",
            "name",
            &client_if,
            "netns",
            &client_ns.name,
        ]));
        let configure = |ns: &NetNs, ifname: &str, v4: &str, v6: &str| {
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", ifname]);
            ns.ip(&["addr", "add", &format!("{v6}/64"), "dev", ifname, "nodad"]);
            ns.ip(&["link", "set", ifname, "up"]);
            mac_of(ns, ifname)
        };
        let server = End {
            mac: configure(&server_ns, &server_if, SERVER_V4, SERVER_V6),
            ifname: server_if,
            ipv4: SERVER_V4,
            ipv6: SERVER_V6,
        };
        let client = End {
            mac: configure(&client_ns, &client_if, CLIENT_V4, CLIENT_V6),
            ifname: client_if,
            ipv4: CLIENT_V4,
            ipv6: CLIENT_V6,
        };
        for (ns, dev, peer) in [
            (&server_ns, &server.ifname, &client),
            (&client_ns, &client.ifname, &server),
        ] {
            for addr in [peer.ipv4, peer.ipv6] {
                ns.ip(&[
                    "neigh",
                    "replace",
                    addr,
                    "lladdr",
                    &peer.mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ]);
            }
        }
        let mut link = Self {
            pass_program: None,
            server,
            client,
            client_ns,
            server_ns,
        };
        if pass_program {
            link.pass_program = Some(attach_pass_program(&link.client_ns, &link.client.ifname));
        }
        link
    }
}

pub fn mac_of(ns: &NetNs, ifname: &str) -> String {
    let out = ns.ip(&["-j", "link", "show", ifname]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j link output");
    json[0]["address"]
        .as_str()
        .expect("a MAC address")
        .to_owned()
}

/// Loads the pass-through program and attaches it to `ifname` in native mode.
pub fn attach_pass_program(ns: &NetNs, ifname: &str) -> Ebpf {
    let ifname = ifname.to_owned();
    ns.run(move || {
        let mut ebpf = Ebpf::load(hostport_dns::TESTBED_OBJECT).expect("load the eBPF object");
        let program: &mut Xdp = ebpf
            .program_mut(hostport_dns_common::maps::PASS_PROGRAM)
            .expect("the pass program")
            .try_into()
            .expect("an XDP program");
        program.load().expect("load the pass program");
        program
            .attach(&ifname, XdpMode::Driver)
            .expect("attach the pass program");
        ebpf
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_names_its_creator() {
        assert_eq!(creator("hpd-stopflow-17615-25"), Some(17615));
        assert_eq!(creator("hpd-x-c-2049-3"), Some(2049));
        assert_eq!(creator("hpd-17615-25"), None, "no tag");
        assert_eq!(creator("other-x-17615-25"), None, "not the test bed's");
        assert_eq!(creator("hpd-x-17615-n"), None);
    }

    /// A namespace left by a process that is gone is removed; this process's are kept.
    #[test]
    fn the_namespaces_of_killed_runs_are_removed() {
        crate::require_root();
        let mut child = Command::new("true").spawn().expect("a child");
        let dead = child.id();
        child.wait().expect("it ends");
        let orphan = format!("hpd-orphan-{dead}-0");
        sh(Command::new("ip").args(["netns", "add", &orphan]));
        let ours = NetNs::new("kept");
        remove_orphans();
        let listed = sh(Command::new("ip").args(["netns", "list"]));
        let listed = String::from_utf8_lossy(&listed.stdout);
        let present = |name: &str| {
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name))
        };
        let orphan_left = present(&orphan);
        if orphan_left {
            let _ = Command::new("ip").args(["netns", "del", &orphan]).status();
        }
        assert!(!orphan_left, "{orphan} was left");
        assert!(present(&ours.name), "{} was removed", ours.name);
    }
}
