//! The PDF worker's sandbox (docs/contract.md#notes-as-data-and-attachments). Before it reads a byte of the document the worker gives
//! up everything parsing does not need, so that a parser bug yields nothing an attacker can use:
//!
//! - a seccomp filter (Linux on x86-64 and Arm64): an allow-list of the system calls a worker
//!   makes once its streams are open — read stdin, write stdout and stderr, map and unmap its own
//!   memory (never executable), signals to itself, clocks, random bytes, the end. Every other call
//!   answers `EPERM`: no socket, no open of any file, no exec, no fork or clone, no ptrace, no
//!   ioctl, no io_uring, no new filter. The filter is what the worker relies on: a worker without
//!   it does not read the document (unless `[pdf] allow_without_sandbox`).
//! - a Landlock ruleset where the kernel has Landlock: every file right, TCP and UDP port and
//!   scope the crate knows is handled and none granted. A second wall behind the filter, best
//!   effort: its status is reported, never required.
//!
//! Both last for the rest of the process's life; `no_new_privs` comes with them.

use crate::wire::{Landlock, SandboxStatus};

/// Enters the sandbox for the rest of this process's life. Never fails: what could not be set up
/// is in the status, and the caller decides (the worker refuses the document without the filter).
pub(crate) fn enter() -> SandboxStatus {
    imp::enter()
}

/// The status of a worker told to leave its sandbox off (in-process tests, `--probe
/// --no-sandbox`).
pub(crate) fn left_off(why: &str) -> SandboxStatus {
    SandboxStatus {
        seccomp: false,
        seccomp_error: Some(why.to_owned()),
        landlock: Landlock::Off,
        landlock_error: Some(why.to_owned()),
    }
}

// SECURITY(T-PDF3): the allow-list below is the worker's whole reach once it holds the document.
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    use std::collections::BTreeMap;

    use seccompiler::{
        BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
        SeccompFilter, SeccompRule, TargetArch,
    };

    use crate::wire::{Landlock, SandboxStatus};

    pub(super) fn enter() -> SandboxStatus {
        // Landlock first: once the filter holds, Landlock's own system calls are refused too.
        let (landlock, landlock_error) = landlock();
        let (seccomp, seccomp_error) = match seccomp() {
            Ok(()) => (true, None),
            Err(e) => (false, Some(e)),
        };
        SandboxStatus {
            seccomp,
            seccomp_error,
            landlock,
            landlock_error,
        }
    }

    /// Every right Landlock knows, handled and granted nowhere: no path can be opened, created,
    /// executed or changed, no TCP or UDP port bound or reached, no signal or abstract socket
    /// outside the worker. Best effort: an older kernel enforces what it knows.
    fn landlock() -> (Landlock, Option<String>) {
        use landlock::{
            ABI, Access, AccessFs, AccessNet, LandlockStatus, Ruleset, RulesetAttr, RulesetStatus, Scope,
        };
        // The newest ABI this crate knows; an older kernel enforces its own part of it.
        let abi = ABI::V10;
        let restricted = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.handle_access(AccessNet::from_all(abi)))
            .and_then(|r| r.scope(Scope::from_all(abi)))
            .and_then(Ruleset::create)
            .and_then(|r| r.restrict_self());
        let status = match restricted {
            Ok(status) => status,
            Err(e) => return (Landlock::Off, Some(format!("Landlock refused the ruleset: {e}"))),
        };
        let kernel = match status.landlock {
            LandlockStatus::NotEnabled => "Landlock is not enabled in this kernel".to_owned(),
            LandlockStatus::NotImplemented => "this kernel has no Landlock".to_owned(),
            LandlockStatus::Available { effective_abi, .. } => {
                format!(
                    "this kernel's Landlock is ABI {effective_abi} of the {abi} the ruleset is written for"
                )
            }
        };
        match status.ruleset {
            RulesetStatus::FullyEnforced => (Landlock::Full, None),
            RulesetStatus::PartiallyEnforced => (Landlock::Partial, Some(kernel)),
            RulesetStatus::NotEnforced => (Landlock::Off, Some(kernel)),
        }
    }

    fn seccomp() -> Result<(), String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH)
            .map_err(|e| format!("no seccomp filter for this architecture: {e}"))?;
        let program = program(arch).map_err(|e| format!("the seccomp filter does not build: {e}"))?;
        // All threads (the worker has one), and `no_new_privs` first, as the kernel requires.
        seccompiler::apply_filter_all_threads(&program)
            .map_err(|e| format!("the kernel refused the seccomp filter: {e}"))
    }

    pub(super) fn program(arch: TargetArch) -> Result<BpfProgram, seccompiler::Error> {
        let filter = SeccompFilter::new(
            allowed()?,
            // A call not on the list, or with arguments outside its rule, fails with EPERM: the
            // worker's own code sees an error it can answer, an exploit gets nothing.
            SeccompAction::Errno(errno(libc::EPERM)),
            SeccompAction::Allow,
            arch,
        )?;
        Ok(filter.try_into()?)
    }

    fn errno(e: i32) -> u32 {
        u32::try_from(e).unwrap_or(1)
    }

    fn arg_is(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, BackendError> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
    }

    /// A rule per file descriptor: the call is allowed on these only.
    fn on_fds(fds: &[u64]) -> Result<Vec<SeccompRule>, BackendError> {
        fds.iter()
            .map(|fd| SeccompRule::new(vec![arg_is(0, SeccompCmpOp::Eq, *fd)?]))
            .collect()
    }

    /// `mmap` and `mprotect` without `PROT_EXEC` (the third argument): no new code.
    fn not_executable() -> Result<Vec<SeccompRule>, BackendError> {
        let exec = u64::try_from(libc::PROT_EXEC).unwrap_or(4);
        Ok(vec![SeccompRule::new(vec![arg_is(
            2,
            SeccompCmpOp::MaskedEq(exec),
            0,
        )?])?])
    }

    /// The allow-list: system call → the rules one of which its arguments must meet (none: any).
    pub(super) fn allowed() -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for call in [
            // Memory: glibc's allocator, and Rust's stack guard on the way out.
            libc::SYS_brk,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_madvise,
            // Locks (uncontended in one thread, but std may still wake).
            libc::SYS_futex,
            libc::SYS_sched_yield,
            // Signals: a panic's or an abort's own handling, and the stack-overflow handler.
            libc::SYS_rt_sigreturn,
            libc::SYS_rt_sigaction,
            libc::SYS_rt_sigprocmask,
            libc::SYS_sigaltstack,
            libc::SYS_restart_syscall,
            libc::SYS_getpid,
            libc::SYS_gettid,
            // Time and randomness (HashMap keys); clocks are vDSO calls where the kernel can.
            libc::SYS_clock_gettime,
            libc::SYS_clock_getres,
            libc::SYS_gettimeofday,
            libc::SYS_clock_nanosleep,
            libc::SYS_nanosleep,
            libc::SYS_getrandom,
            // Descriptors it already has: closing one, asking its size.
            libc::SYS_close,
            libc::SYS_fstat,
            // The end.
            libc::SYS_exit,
            libc::SYS_exit_group,
        ] {
            rules.insert(call, Vec::new());
        }
        // The document and the header come on stdin; the answer goes to stdout, a panic's
        // message to stderr. No other descriptor is read or written.
        rules.insert(libc::SYS_read, on_fds(&[0])?);
        rules.insert(libc::SYS_readv, on_fds(&[0])?);
        rules.insert(libc::SYS_write, on_fds(&[1, 2])?);
        rules.insert(libc::SYS_writev, on_fds(&[1, 2])?);
        rules.insert(libc::SYS_mmap, not_executable()?);
        rules.insert(libc::SYS_mprotect, not_executable()?);
        // abort() raises SIGABRT with tgkill on itself; no other process can be signalled.
        let pid = u64::from(std::process::id());
        rules.insert(
            libc::SYS_tgkill,
            vec![SeccompRule::new(vec![arg_is(0, SeccompCmpOp::Eq, pid)?])?],
        );
        Ok(rules)
    }
}

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
mod imp {
    use crate::wire::{Landlock, SandboxStatus};

    pub(super) fn enter() -> SandboxStatus {
        SandboxStatus {
            seccomp: false,
            seccomp_error: Some("the PDF worker's sandbox exists only on Linux (x86-64 and Arm64)".into()),
            landlock: Landlock::Off,
            landlock_error: Some("Landlock exists only on Linux".into()),
        }
    }
}

#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// Whatever else changes in the list, these stay off it: the network, new processes and
    /// programs, files by any name, other processes, the kernel's bigger doors.
    #[test]
    fn the_allow_list_holds_no_network_no_process_and_no_file() {
        let allowed = super::imp::allowed().unwrap();
        #[cfg(target_arch = "x86_64")]
        let legacy = [
            libc::SYS_open,
            libc::SYS_creat,
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_stat,
            libc::SYS_lstat,
            libc::SYS_access,
            libc::SYS_readlink,
        ];
        #[cfg(target_arch = "aarch64")]
        let legacy: [i64; 0] = [];
        for call in [
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_connect,
            libc::SYS_bind,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_openat,
            libc::SYS_openat2,
            libc::SYS_open_by_handle_at,
            libc::SYS_name_to_handle_at,
            libc::SYS_newfstatat,
            libc::SYS_statx,
            libc::SYS_faccessat,
            libc::SYS_readlinkat,
            libc::SYS_unlinkat,
            libc::SYS_mkdirat,
            libc::SYS_renameat2,
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_kill,
            libc::SYS_tkill,
            libc::SYS_pidfd_open,
            libc::SYS_pidfd_getfd,
            libc::SYS_ioctl,
            libc::SYS_prctl,
            libc::SYS_seccomp,
            libc::SYS_bpf,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_userfaultfd,
            libc::SYS_perf_event_open,
            libc::SYS_memfd_create,
            libc::SYS_pkey_mprotect,
            libc::SYS_mount,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_chdir,
            libc::SYS_fchdir,
            libc::SYS_dup3,
            libc::SYS_fcntl,
            libc::SYS_pipe2,
            libc::SYS_setrlimit,
            libc::SYS_prlimit64,
        ]
        .into_iter()
        .chain(legacy)
        {
            assert!(!allowed.contains_key(&call), "system call {call} is allowed");
        }
        // The few allowed with conditions have them.
        for call in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_mmap,
            libc::SYS_mprotect,
            libc::SYS_tgkill,
        ] {
            assert!(
                !allowed[&call].is_empty(),
                "system call {call} is allowed unconditionally"
            );
        }
    }

    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH).unwrap();
        assert!(!super::imp::program(arch).unwrap().is_empty());
    }
}
