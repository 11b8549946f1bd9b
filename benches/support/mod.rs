//! Shared by the end-to-end benches: the release `probity` binary, started
//! on a configuration text, and what can be read of it from outside.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A running `probity`, killed when dropped.
pub struct Probity {
    child: Child,
    pub addr: SocketAddr,
}

impl Probity {
    /// Starts the binary on `config` (listen on ports 0) and waits for the
    /// address it bound.
    pub fn start(config: &str) -> Self {
        let path = std::env::temp_dir().join(format!("probity-bench-{}.toml", std::process::id()));
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_probity"))
            .arg("--config")
            .arg(&path)
            .env("PROBITY_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines.next().expect("probity exited").unwrap();
            if line.contains("probity listening") {
                let json: serde_json::Value = serde_json::from_str(&line).unwrap();
                break json["proxy"].as_str().unwrap().parse().unwrap();
            }
        };
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, addr }
    }

    /// Resident memory, from /proc.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Probity {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
