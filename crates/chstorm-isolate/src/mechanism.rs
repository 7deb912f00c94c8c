//! The mechanisms, how to tell whether this machine offers each, and choosing among them.

use crate::cgroupfs::{self, CgroupMount, Hierarchy};
use crate::error::IsolateError;
use crate::{procfs, sched, DEFAULT_CGROUP};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A way to put work into the lowest CPU class. [`Mechanism::ORDER`] is the detection order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// openEuler `cpu.qos_level = -1` on a cgroup v1 `cpu` child cgroup.
    QosLevel,
    /// `cpu.idle = 1` on a cgroup v2 child cgroup (Linux 5.15+).
    CgroupV2Idle,
    /// `cpu.idle = 1` on a cgroup v1 `cpu` child cgroup (Linux 5.15+).
    CgroupV1Idle,
    /// `SCHED_IDLE` on every thread.
    SchedIdle,
    /// Minimum `cpu.shares` (2) or `cpu.weight` (1) when a cgroup is writable, plus nice 19.
    MinWeight,
}

/// Linux release that added `cpu.idle`.
const CPU_IDLE_SINCE: (u32, u32) = (5, 15);

impl Mechanism {
    /// Best first: the order `auto` tries them in.
    pub const ORDER: [Mechanism; 5] = [
        Mechanism::QosLevel,
        Mechanism::CgroupV2Idle,
        Mechanism::CgroupV1Idle,
        Mechanism::SchedIdle,
        Mechanism::MinWeight,
    ];

    /// The name used on the command line and in JSON: `qos-level`, `cgroup-v2-idle`,
    /// `cgroup-v1-idle`, `sched-idle`, `min-weight`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::QosLevel => "qos-level",
            Mechanism::CgroupV2Idle => "cgroup-v2-idle",
            Mechanism::CgroupV1Idle => "cgroup-v1-idle",
            Mechanism::SchedIdle => "sched-idle",
            Mechanism::MinWeight => "min-weight",
        }
    }

    /// What it does, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Mechanism::QosLevel => "openEuler cpu.qos_level=-1 (cgroup v1)",
            Mechanism::CgroupV2Idle => "cgroup v2 cpu.idle=1",
            Mechanism::CgroupV1Idle => "cgroup v1 cpu.idle=1",
            Mechanism::SchedIdle => "SCHED_IDLE on every thread",
            Mechanism::MinWeight => "minimum cpu.shares/cpu.weight plus nice 19",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn parse(s: &str) -> Option<Mechanism> {
        Mechanism::ORDER.into_iter().find(|m| m.name() == s)
    }

    /// The hierarchy a cgroup mechanism works on (for [`MinWeight`](Mechanism::MinWeight): the
    /// writable one, v2 first, if any).
    pub(crate) fn mount(self) -> Result<CgroupMount, IsolateError> {
        match self {
            Mechanism::QosLevel | Mechanism::CgroupV1Idle => v1_mount(),
            Mechanism::CgroupV2Idle => v2_cpu_mount(),
            Mechanism::MinWeight => v2_cpu_mount().and_then(usable).or_else(|_| v1_mount().and_then(usable)),
            Mechanism::SchedIdle => Err(IsolateError::Internal("sched-idle uses no cgroup".into())),
        }
    }

    /// The cgroup file and value this mechanism writes, if it writes one.
    pub(crate) fn setting(self, h: Hierarchy) -> Option<(&'static str, &'static str)> {
        match (self, h) {
            (Mechanism::QosLevel, _) => Some(("cpu.qos_level", "-1")),
            (Mechanism::CgroupV2Idle | Mechanism::CgroupV1Idle, _) => Some(("cpu.idle", "1")),
            (Mechanism::MinWeight, Hierarchy::V1) => Some(("cpu.shares", "2")),
            (Mechanism::MinWeight, Hierarchy::V2) => Some(("cpu.weight", "1")),
            (Mechanism::SchedIdle, _) => None,
        }
    }

    /// Whether this machine offers the mechanism, checked without changing anything. `Ok`
    /// holds a short description of where it would act.
    pub fn detect(self) -> Result<String, IsolateError> {
        match self {
            Mechanism::QosLevel => detect_qos(),
            Mechanism::CgroupV2Idle | Mechanism::CgroupV1Idle => {
                let m = usable(self.mount()?)?;
                need_cpu_idle(&m)?;
                Ok(format!("cpu.idle=1 on a child cgroup of {}", m.mount.display()))
            }
            Mechanism::SchedIdle => sched::probe_sched_idle()
                .map(|_| "sched_setscheduler(SCHED_IDLE) on every thread".to_string())
                .map_err(|e| IsolateError::Unavailable {
                    mechanism: self.name().into(),
                    why: format!("SCHED_IDLE refused: {e}"),
                }),
            Mechanism::MinWeight => Ok(match self.mount() {
                Ok(m) => {
                    let (file, value) = self.setting(m.hierarchy).unwrap_or(("cpu.shares", "2"));
                    format!("{file}={value} on a child cgroup of {} plus nice 19", m.mount.display())
                }
                Err(e) => format!("nice 19 only (no cgroup weight: {e})"),
            }),
        }
    }
}

fn v1_mount() -> Result<CgroupMount, IsolateError> {
    cgroupfs::v1_cpu_mount()
        .ok_or_else(|| IsolateError::NoWritableCgroup("no cgroup v1 hierarchy has the cpu controller".into()))
}

fn v2_cpu_mount() -> Result<CgroupMount, IsolateError> {
    let m = cgroupfs::v2_mount().ok_or_else(|| IsolateError::NoWritableCgroup("cgroup v2 is not mounted".into()))?;
    let controllers = cgroupfs::read_trim(&m.mount.join("cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "cpu") {
        let have = if controllers.is_empty() { "none".to_string() } else { controllers };
        return Err(IsolateError::NoWritableCgroup(format!(
            "the cgroup v2 hierarchy at {} lacks the cpu controller (it has: {have}; cpu is bound to a cgroup v1 hierarchy)",
            m.mount.display()
        )));
    }
    Ok(m)
}

/// `m` if this process can create cgroups in it.
fn usable(m: CgroupMount) -> Result<CgroupMount, IsolateError> {
    if m.read_only {
        return Err(IsolateError::NoWritableCgroup(format!("{} is mounted read-only", m.mount.display())));
    }
    let ours = m.mount.join(DEFAULT_CGROUP);
    if cgroupfs::writable(&m.mount) || (ours.is_dir() && cgroupfs::writable(&ours)) {
        Ok(m)
    } else {
        Err(IsolateError::NoPermission {
            what: format!("create a cgroup in {}", m.mount.display()),
            hint: crate::error::CGROUP_HINT,
        })
    }
}

fn need_cpu_idle(m: &CgroupMount) -> Result<(), IsolateError> {
    // v1 shows cpu.idle on the root cgroup; v2 only on children, so ask the kernel version.
    let release = procfs::kernel_release();
    let present = m.mount.join("cpu.idle").exists() || m.mount.join(DEFAULT_CGROUP).join("cpu.idle").exists();
    let new_enough = procfs::kernel_version().is_some_and(|v| v >= CPU_IDLE_SINCE);
    match (m.hierarchy, present, new_enough) {
        (_, true, _) | (Hierarchy::V2, false, true) => Ok(()),
        _ => Err(IsolateError::OldKernel { release, what: "no cpu.idle (added in Linux 5.15)".into() }),
    }
}

fn detect_qos() -> Result<String, IsolateError> {
    let m = v1_mount()?;
    let found = has_qos_file(&m.mount) || kernel_config_has_qos();
    if !found {
        return Err(IsolateError::Unavailable {
            mechanism: Mechanism::QosLevel.name().into(),
            why: format!("kernel {} has no cpu.qos_level (openEuler's CONFIG_QOS_SCHED)", procfs::kernel_release()),
        });
    }
    let m = usable(m)?;
    Ok(format!("cpu.qos_level=-1 on a child cgroup of {}", m.mount.display()))
}

/// True if the root or any first-level cgroup of `mount` has `cpu.qos_level` (openEuler hides
/// it on the root).
fn has_qos_file(mount: &Path) -> bool {
    if mount.join("cpu.qos_level").exists() {
        return true;
    }
    std::fs::read_dir(mount).map(|d| d.flatten().any(|e| e.path().join("cpu.qos_level").exists())).unwrap_or(false)
}

fn kernel_config_has_qos() -> bool {
    let path = format!("/boot/config-{}", procfs::kernel_release());
    std::fs::read_to_string(path).is_ok_and(|c| c.lines().any(|l| l.trim() == "CONFIG_QOS_SCHED=y"))
}

/// One mechanism and whether this machine offers it.
#[derive(Debug)]
pub struct Availability {
    pub mechanism: Mechanism,
    /// `Ok(where it would act)` or why it is unavailable.
    pub result: Result<String, IsolateError>,
}

/// Checks every mechanism, in [`Mechanism::ORDER`].
pub fn detect_all() -> Vec<Availability> {
    Mechanism::ORDER.into_iter().map(|m| Availability { mechanism: m, result: m.detect() }).collect()
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The first available in detection order.
    Auto,
    /// Every available one.
    All,
    /// cgroup v2 `cpu.idle` if available, else cgroup v1.
    CgroupIdle,
    /// Exactly this one.
    One(Mechanism),
}

impl Request {
    /// The name used on the command line and in JSON: `auto`, `all`, `cgroup-idle`, or the
    /// mechanism's [`name`](Mechanism::name).
    pub fn name(self) -> &'static str {
        match self {
            Request::Auto => "auto",
            Request::All => "all",
            Request::CgroupIdle => "cgroup-idle",
            Request::One(m) => m.name(),
        }
    }
}

/// The mechanisms to use for `request`, given what [`detect_all`] found. Asking for one that
/// is unavailable is an error that says why.
pub fn choose(request: Request, found: &[Availability]) -> Result<Vec<Mechanism>, IsolateError> {
    let available: Vec<Mechanism> = found.iter().filter(|a| a.result.is_ok()).map(|a| a.mechanism).collect();
    let why = |m: Mechanism| -> IsolateError {
        let reason = found
            .iter()
            .find(|a| a.mechanism == m)
            .and_then(|a| a.result.as_ref().err())
            .map(|e| e.reason())
            .unwrap_or_else(|| "not detected".into());
        let others: Vec<&str> = available.iter().map(|m| m.name()).collect();
        IsolateError::Unavailable {
            mechanism: m.name().into(),
            why: format!("{reason}; available here: {}", others.join(", ")),
        }
    };
    match request {
        Request::All => Ok(available.clone()),
        Request::Auto => available.first().map(|m| vec![*m]).ok_or_else(|| why(Mechanism::MinWeight)),
        Request::CgroupIdle => [Mechanism::CgroupV2Idle, Mechanism::CgroupV1Idle]
            .into_iter()
            .find(|m| available.contains(m))
            .map(|m| vec![m])
            .ok_or_else(|| why(Mechanism::CgroupV1Idle)),
        Request::One(m) if available.contains(&m) => Ok(vec![m]),
        Request::One(m) => Err(why(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(ok: &[Mechanism]) -> Vec<Availability> {
        Mechanism::ORDER
            .into_iter()
            .map(|m| Availability {
                mechanism: m,
                result: if ok.contains(&m) { Ok("here".into()) } else { Err(IsolateError::Internal("absent".into())) },
            })
            .collect()
    }

    #[test]
    fn choosing() {
        let f = found(&[Mechanism::CgroupV1Idle, Mechanism::SchedIdle, Mechanism::MinWeight]);
        assert_eq!(choose(Request::Auto, &f).unwrap(), vec![Mechanism::CgroupV1Idle]);
        assert_eq!(choose(Request::CgroupIdle, &f).unwrap(), vec![Mechanism::CgroupV1Idle]);
        assert_eq!(choose(Request::All, &f).unwrap().len(), 3);
        let e = choose(Request::One(Mechanism::QosLevel), &f).unwrap_err().to_string();
        assert!(
            e.contains("qos-level is not available here") && e.contains("absent") && e.contains("sched-idle"),
            "{e}"
        );
        assert!(choose(Request::CgroupIdle, &found(&[Mechanism::SchedIdle])).is_err());
    }

    #[test]
    fn names_round_trip() {
        for m in Mechanism::ORDER {
            assert_eq!(Mechanism::parse(m.name()), Some(m));
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{}\"", m.name()));
        }
    }

    #[test]
    fn detection_runs_and_sched_idle_is_there() {
        let all = detect_all();
        assert_eq!(all.len(), 5);
        assert!(all[3].result.is_ok(), "SCHED_IDLE: {:?}", all[3].result);
        assert!(all[4].result.is_ok(), "min-weight never fails detection");
    }
}
