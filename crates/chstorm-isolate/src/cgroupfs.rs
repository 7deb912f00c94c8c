//! Where the cgroup hierarchies are mounted (from `/proc/self/mountinfo`), which cgroup a task
//! is in (from `/proc/PID/cgroup`), and reading and writing cgroup files.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A cgroup hierarchy version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hierarchy {
    /// A cgroup v1 hierarchy with the `cpu` controller.
    V1,
    /// The cgroup v2 unified hierarchy.
    V2,
}

/// A mounted hierarchy that can carry CPU settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub hierarchy: Hierarchy,
    /// Where it is mounted, e.g. `/sys/fs/cgroup/cpu,cpuacct`.
    pub mount: PathBuf,
    /// The cgroup at the mount point, as paths in `/proc/PID/cgroup` name it (`/` unless the
    /// mount shows only a subtree).
    pub root: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// One line of `/proc/self/mountinfo`: (mount root, mount point, mount options, fs type, super options).
fn mountinfo_lines() -> Vec<(String, String, String, String, String)> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let lf: Vec<&str> = left.split(' ').collect();
            let rf: Vec<&str> = right.split(' ').collect();
            Some((
                unescape(lf.get(3)?),
                unescape(lf.get(4)?),
                lf.get(5)?.to_string(),
                rf.first()?.to_string(),
                rf.get(2).unwrap_or(&"").to_string(),
            ))
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn has_opt(opts: &str, name: &str) -> bool {
    opts.split(',').any(|o| o == name)
}

/// The cgroup v1 hierarchy that carries the `cpu` controller, if one is mounted.
pub fn v1_cpu_mount() -> Option<CgroupMount> {
    mountinfo_lines().into_iter().find(|(_, _, _, fstype, sopts)| fstype == "cgroup" && has_opt(sopts, "cpu")).map(
        |(root, mount, mopts, _, _)| CgroupMount {
            hierarchy: Hierarchy::V1,
            mount: mount.into(),
            root,
            read_only: has_opt(&mopts, "ro"),
        },
    )
}

/// Where the cgroup v1 `cpu` controller is mounted, when cgroups with `cpu.idle` can be made
/// there (kernel 5.15 or later, and the right to create cgroups); else why not, in words that
/// fit after "cannot use cgroup v1 cpu.idle: ". Used by the integration tests of this crate and
/// of the CLI to skip, with the reason, where the machine cannot run them.
pub fn v1_cpu_idle_mount() -> Result<PathBuf, String> {
    let Some(m) = v1_cpu_mount() else {
        return Err("no cgroup v1 cpu controller is mounted".into());
    };
    if !m.mount.join("cpu.idle").exists() {
        return Err(format!("{} has no cpu.idle (kernel older than 5.15)", m.mount.display()));
    }
    let probe = m.mount.join(format!("chstorm-probe-{}", std::process::id()));
    if fs::create_dir(&probe).is_err() {
        return Err(format!("cannot create cgroups in {} (not root?)", m.mount.display()));
    }
    let _ = fs::remove_dir(&probe);
    Ok(m.mount)
}

/// The cgroup v2 unified hierarchy, if mounted (whatever its controllers).
pub fn v2_mount() -> Option<CgroupMount> {
    mountinfo_lines().into_iter().find(|(_, _, _, fstype, _)| fstype == "cgroup2").map(|(root, mount, mopts, _, _)| {
        CgroupMount { hierarchy: Hierarchy::V2, mount: mount.into(), root, read_only: has_opt(&mopts, "ro") }
    })
}

impl CgroupMount {
    /// The mount for `hierarchy`, if any.
    pub fn find(hierarchy: Hierarchy) -> Option<CgroupMount> {
        match hierarchy {
            Hierarchy::V1 => v1_cpu_mount(),
            Hierarchy::V2 => v2_mount(),
        }
    }

    /// The directory of the cgroup named `path` as `/proc/PID/cgroup` writes it.
    pub fn dir_of(&self, path: &str) -> PathBuf {
        let rel = if self.root != "/" { path.strip_prefix(self.root.as_str()).unwrap_or(path) } else { path };
        let rel = rel.trim_start_matches('/');
        if rel.is_empty() {
            self.mount.clone()
        } else {
            self.mount.join(rel)
        }
    }

    /// The name of cgroup directory `dir` as `/proc/PID/cgroup` writes it (the inverse of [`dir_of`](Self::dir_of)).
    pub fn name_of(&self, dir: &Path) -> String {
        let rel = dir.strip_prefix(&self.mount).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let root = self.root.trim_end_matches('/');
        if rel.is_empty() {
            if root.is_empty() {
                "/".into()
            } else {
                root.into()
            }
        } else {
            format!("{root}/{rel}")
        }
    }

    /// The cgroup directory task `tid` of process `pid` is in, in this hierarchy.
    pub fn cgroup_of(&self, pid: u32, tid: Option<u32>) -> io::Result<PathBuf> {
        let file = match tid {
            Some(t) => format!("/proc/{pid}/task/{t}/cgroup"),
            None => format!("/proc/{pid}/cgroup"),
        };
        let text = fs::read_to_string(&file)?;
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let ours = match self.hierarchy {
                Hierarchy::V1 => id != "0" && has_opt(ctrls, "cpu"),
                Hierarchy::V2 => id == "0" && ctrls.is_empty(),
            };
            if ours {
                return Ok(self.dir_of(path));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{file} has no line for the {:?} cpu hierarchy", self.hierarchy),
        ))
    }

    /// The file listing one thread id per line: `tasks` (v1) or `cgroup.threads` (v2).
    pub fn threads_file(&self) -> &'static str {
        match self.hierarchy {
            Hierarchy::V1 => "tasks",
            Hierarchy::V2 => "cgroup.threads",
        }
    }

    /// True if `dir` is this mount or below it.
    pub fn contains(&self, dir: &Path) -> bool {
        dir.starts_with(&self.mount)
    }
}

/// Reads a cgroup file, trimmed.
pub fn read_trim(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

/// Writes `value` to an existing cgroup file in one `write` (cgroup files want that), without
/// creating or truncating it.
pub fn write_value(path: &Path, value: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// True if this process may create a directory in `dir` (root, or a delegated cgroup).
pub fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The thread ids listed in cgroup `dir`.
pub fn threads_in(mount: &CgroupMount, dir: &Path) -> io::Result<Vec<u32>> {
    let text = fs::read_to_string(dir.join(mount.threads_file()))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/sys/fs/cgroup/cpu,cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
        assert_eq!(unescape("x\\04"), "x\\04");
    }

    #[test]
    fn maps_names_and_dirs() {
        let m = CgroupMount {
            hierarchy: Hierarchy::V1,
            mount: "/sys/fs/cgroup/cpu".into(),
            root: "/".into(),
            read_only: false,
        };
        assert_eq!(m.dir_of("/"), PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(m.dir_of("/a/b"), PathBuf::from("/sys/fs/cgroup/cpu/a/b"));
        assert_eq!(m.name_of(Path::new("/sys/fs/cgroup/cpu")), "/");
        assert_eq!(m.name_of(Path::new("/sys/fs/cgroup/cpu/a/b")), "/a/b");
        let sub = CgroupMount { root: "/docker/x".into(), ..m };
        assert_eq!(sub.dir_of("/docker/x/y"), PathBuf::from("/sys/fs/cgroup/cpu/y"));
        assert_eq!(sub.name_of(Path::new("/sys/fs/cgroup/cpu/y")), "/docker/x/y");
        assert_eq!(sub.name_of(Path::new("/sys/fs/cgroup/cpu")), "/docker/x");
    }

    #[test]
    fn own_cgroup_resolves_when_mounted() {
        for m in [v1_cpu_mount(), v2_mount()].into_iter().flatten() {
            let dir = m.cgroup_of(std::process::id(), None).unwrap();
            assert!(m.contains(&dir), "{dir:?} under {:?}", m.mount);
        }
    }
}
