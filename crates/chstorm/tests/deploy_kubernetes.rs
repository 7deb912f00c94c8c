//! deploy/kubernetes/: the manifests validate against Kubernetes' own schemas (kubeconform,
//! strict, for the oldest and newest API versions they are written for), agree with each other,
//! and their pods' command lines do what the docs say when run as written: four segments
//! against a real server, started together, then the merge.
//!
//! kubeconform and the schemas are installed into target/tools by scripts/install-deps
//! (`make test` runs it first).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tools() -> PathBuf {
    repo().join("target/tools")
}

/// The API versions the manifests are checked against: `backoffLimitPerIndex` (Indexed Jobs
/// whose failed segment neither reruns nor stops the others) is on by default from 1.29.
const VERSIONS: [&str; 2] = ["1.29.0", "1.37.0"];

fn manifests() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

/// kubeconform -strict on `files` for `version`: (success, output).
fn kubeconform(version: &str, files: &[PathBuf]) -> (bool, String) {
    let bin = tools().join("bin/kubeconform");
    let schemas = tools().join("kube-schemas");
    assert!(
        bin.exists() && schemas.join(format!("v{version}-local-strict/job-batch-v1.json")).exists(),
        "kubeconform or the Kubernetes schemas are missing from {}: run scripts/install-deps",
        tools().display()
    );
    let location = format!(
        "{}/{{{{ .NormalizedKubernetesVersion }}}}-local{{{{ .StrictSuffix }}}}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
        schemas.display()
    );
    let out = Command::new(bin)
        .args(["-strict", "-summary", "-kubernetes-version", version, "-schema-location", &location])
        .args(files)
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let files = manifests();
    assert_eq!(files.len(), 3, "{files:?}");
    for v in VERSIONS {
        let (ok, said) = kubeconform(v, &files);
        assert!(ok, "Kubernetes {v}: {said}");
        assert!(
            said.contains("3 resources found in 3 files - Valid: 3, Invalid: 0, Errors: 0, Skipped: 0"),
            "{v}: {said}"
        );
    }
    // The check constrains: a misspelt field and a wrong type are refused.
    let dir = tempfile::tempdir().unwrap();
    let job = std::fs::read_to_string(repo().join("deploy/kubernetes/bench-job.yaml")).unwrap();
    for (bad, needle) in [
        (job.replace("completionMode: Indexed", "completionMode: Indexed\n  completion: 4"), "completion"),
        (job.replace("parallelism: 4", "parallelism: four"), "parallelism"),
    ] {
        let p = dir.path().join("bad.yaml");
        std::fs::write(&p, bad).unwrap();
        let (ok, said) = kubeconform(VERSIONS[1], &[p]);
        assert!(!ok && said.contains(needle), "{said}");
    }
}

fn yaml(name: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo().join("deploy/kubernetes").join(name)).unwrap()).unwrap()
}

fn env_of(container: &serde_yaml::Value, name: &str) -> String {
    container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("no env {name}"))
        .to_string()
}

/// The Indexed Job and the merge Job agree: N everywhere, the same volume, run folder and image,
/// every segment's file where the merge reads them.
#[test]
fn the_jobs_agree_with_each_other() {
    let (bench, merge) = (yaml("bench-job.yaml"), yaml("merge-job.yaml"));
    let spec = &bench["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let n = spec["completions"].as_u64().unwrap();
    assert_eq!(spec["parallelism"].as_u64(), Some(n), "every segment at once");
    let c = &spec["template"]["spec"]["containers"][0];
    let m = &merge["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env_of(c, "SEGMENTS"), n.to_string());
    assert_eq!(env_of(c, "RUN"), env_of(m, "RUN"));
    assert_eq!(c["image"], m["image"]);
    let claim = |j: &serde_yaml::Value| {
        j["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].clone()
    };
    assert_eq!(claim(&bench), claim(&merge));
    assert_eq!(claim(&bench), yaml("results-pvc.yaml")["metadata"]["name"]);
    let cmd = c["args"][0].as_str().unwrap();
    for part in [
        "--segment \"$JOB_COMPLETION_INDEX/$SEGMENTS\"",
        "--start-at \"$START_AT\"",
        "--json \"/results/$RUN/segment-$JOB_COMPLETION_INDEX.json\"",
    ] {
        assert!(cmd.contains(part), "{cmd}");
    }
    assert!(m["args"][0].as_str().unwrap().contains("chstorm merge /results/$RUN/segment-*.json"));
}

/// The pods' shell commands, exactly as the manifests hold them, with the volume and the
/// scenario file in a temporary folder: four segments against a real server, then the merge.
#[test]
fn the_pods_commands_run_a_merged_test() {
    let s = chstorm_local::shared_server();
    let (bench, merge) = (yaml("bench-job.yaml"), yaml("merge-job.yaml"));
    let c = &bench["spec"]["template"]["spec"]["containers"][0];
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let local = |cmd: &str| {
        cmd.replace("/etc/chstorm", &root.join("etc").display().to_string())
            .replace("/results", &root.join("results").display().to_string())
    };
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(
        root.join("etc/scenarios.yaml"),
        "scenarios:\n  - name: lookups\n    queries: [\"SELECT {i:seq(1)}\"]\n    rate: 200\n    concurrency: 4\n    requests: 200\n    thresholds: [\"errors<1\"]\n  - name: pings\n    ping: true\n    concurrency: 4\n    requests: 100\n",
    )
    .unwrap();
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_chstorm"), bin.join("chstorm")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let start = (chrono::Utc::now() + chrono::Duration::seconds(4)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let n: u32 = env_of(c, "SEGMENTS").parse().unwrap();
    let run = env_of(c, "RUN");
    let pods: Vec<_> = (0..n)
        .map(|i| {
            Command::new("/bin/sh")
                .arg("-c")
                .arg(local(c["args"][0].as_str().unwrap()))
                .env("PATH", &path)
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .env("SEGMENTS", n.to_string())
                .env("START_AT", &start)
                .env("RUN", &run)
                .env("CHSTORM_URL", s.http_url())
                .output()
                .unwrap()
        })
        .collect();
    for (i, o) in pods.iter().enumerate() {
        assert!(o.status.success(), "segment {i}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let m = &merge["spec"]["template"]["spec"]["containers"][0];
    let o = Command::new("/bin/sh")
        .arg("-c")
        .arg(local(m["args"][0].as_str().unwrap()))
        .env("PATH", &path)
        .env("RUN", &run)
        .output()
        .unwrap();
    assert!(o.status.success(), "merge: {}", String::from_utf8_lossy(&o.stderr));
    let merged: chstorm_output::BenchReport =
        serde_json::from_str(&std::fs::read_to_string(root.join("results").join(&run).join("merged.json")).unwrap())
            .unwrap();
    assert_eq!((merged.queries, merged.errors, merged.merged_from.len()), (300, 0, n as usize));
    assert_eq!((merged.scenarios[0].queries, merged.scenarios[1].queries), (200, 100));
    assert_eq!(merged.scenarios[0].verdict.as_deref(), Some("pass"), "the scenario's errors<1, judged once");
    assert_eq!(merged.verdict.as_deref(), Some("pass"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("verdict: pass"));
}
