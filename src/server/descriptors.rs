//! File descriptors: each proxied connection holds two (the client's and,
//! while it is forwarded, the upstream's), so `max_connections` means
//! nothing if the process may not open that many. At start the soft
//! `RLIMIT_NOFILE` is raised to the hard one (systemd and most shells start
//! services at 1024 soft), and when the connections still cannot fit, the
//! log says so, with the numbers and what to change.

/// Descriptors that are not client connections: listeners, idle upstream
/// connections (64 per upstream), the log, and some room.
const RESERVED: u64 = 256;

/// Raises the soft limit to the hard one; logs a warning when
/// `max_connections` cannot fit in it.
pub(super) fn raise_for(max_connections: u64) {
    let Some((soft, hard)) = limits() else {
        return;
    };
    let raised = if soft < hard && set(hard, hard) {
        tracing::info!(from = soft, to = hard, "raised the open-file limit");
        hard
    } else {
        soft
    };
    let needed = max_connections.saturating_mul(2).saturating_add(RESERVED);
    if raised < needed {
        tracing::warn!(
            open_file_limit = raised,
            max_connections,
            needed,
            "server.max_connections cannot fit in the open-file limit: connections \
             beyond it will fail to open; raise the limit (ulimit -n, LimitNOFILE=, \
             the container runtime's nofile) or lower server.max_connections"
        );
    }
}

#[cfg(unix)]
fn limits() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a pointer to a live,
    // properly aligned local.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (read == 0).then_some((limit.rlim_cur, limit.rlim_max))
}

#[cfg(unix)]
fn set(soft: u64, hard: u64) -> bool {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `setrlimit` reads one `rlimit` from a live local; raising the
    // soft limit up to the hard one needs no privilege.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
}

#[cfg(not(unix))]
fn limits() -> Option<(u64, u64)> {
    None
}

#[cfg(not(unix))]
fn set(_: u64, _: u64) -> bool {
    false
}
