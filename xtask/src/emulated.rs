//! The other architecture's agent, run here: under Debian's user-mode emulation
//! (`qemu-user-static`, installed when missing), on its embedded example with XDP off and
//! userspace on loopback, it must answer one of the example's names before its image is packed.

use std::{
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::cmd;

/// A name of the embedded example, with the addresses it holds.
const NAME: &str = "default-nginx.ingress.demo.hostport.example";

/// How long the emulated agent gets to answer: emulation is several times slower than the
/// machine, and the agent reads its example and starts its servers first.
const PATIENCE: Duration = Duration::from_secs(90);

/// Runs `agent` (built for another architecture) under `emulator` (`qemu-aarch64-static`) until
/// it answers.
pub fn answers_under_emulation(emulator: &str, agent: &Path) -> anyhow::Result<()> {
    install_emulator(emulator)?;
    let port = free_udp_port()?;
    let metrics = free_udp_port()?;
    let child = Command::new(emulator)
        .arg(agent)
        .args(["run", "--xdp-mode", "off", "--listen", "127.0.0.1"])
        .args(["--port", &port.to_string(), "--metrics-listen"])
        .arg(format!("127.0.0.1:{metrics}"))
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {} under {emulator}", agent.display()))?;
    let mut child = Killed(child);
    let server = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.0.try_wait()? {
            bail!("the agent under {emulator} exited ({status}) before it answered");
        }
        match ask(server) {
            Ok(answers) if answers > 0 => {
                println!(
                    "image: the agent under {emulator} answered {NAME} A with {answers} records"
                );
                return Ok(());
            }
            Ok(_) => bail!("the agent under {emulator} answered {NAME} A with nothing"),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
            Err(error) => {
                return Err(error.context(format!(
                    "the agent under {emulator} did not answer in {} s",
                    PATIENCE.as_secs()
                )));
            }
        }
    }
}

/// Kills the emulated agent however the check ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn install_emulator(emulator: &str) -> anyhow::Result<()> {
    if cmd::have(emulator) {
        return Ok(());
    }
    if !cmd::is_root() {
        bail!("missing {emulator}: apt-get install qemu-user-static (as root)");
    }
    println!("setup: installing qemu-user-static (running the image's other-architecture agent)");
    cmd::run(
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "qemu-user-static",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// A port free on loopback now (the kernel's choice).
fn free_udp_port() -> anyhow::Result<u16> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).context("a free port")?;
    Ok(socket.local_addr()?.port())
}

/// Asks `server` for NAME A once; the number of answer records of a NOERROR answer.
fn ask(server: SocketAddr) -> anyhow::Result<u16> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    socket.set_read_timeout(Some(Duration::from_secs(1)))?;
    let id: u16 = 0x5eed;
    let mut query = Vec::new();
    query.extend_from_slice(&id.to_be_bytes());
    // RD; one question.
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in NAME.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&query, server)?;
    let mut answer = [0u8; 1500];
    let (len, _) = socket.recv_from(&mut answer)?;
    let header = answer
        .get(..12)
        .filter(|_| len >= 12)
        .context("a short answer")?;
    if header[..2] != id.to_be_bytes() || header[2] & 0x80 == 0 {
        bail!("not an answer to the query");
    }
    let rcode = header[3] & 0x0f;
    if rcode != 0 {
        bail!("rcode {rcode}");
    }
    Ok(u16::from_be_bytes([header[6], header[7]]))
}
