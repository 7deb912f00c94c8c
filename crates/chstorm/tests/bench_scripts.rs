//! `make bench`'s scripts leave nothing behind: each one's servers, configs and logs live in a
//! folder from `scratch_dir` (scripts/bench_gateway.py), removed when the script exits, however it
//! exits. The benchmarks themselves run only under `make bench`; these tests check the helper and
//! that every script uses it, and the differential check that `make release-pgo` makes of its
//! build before keeping it.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// Runs `body` in python3 after `from bench_gateway import scratch_dir`, with `tmp` bound to a
/// new scratch folder whose path is printed first; returns (exit code, or 128 + the signal that
/// ended it, as a shell shows it; whether that folder is still there; stdout).
fn run_with_scratch(body: &str) -> (i32, bool, String) {
    let parent = tempfile::tempdir().unwrap();
    let program = format!(
        "import os, signal, sys\nsys.path.insert(0, {:?})\nfrom bench_gateway import scratch_dir\n\
         tmp = scratch_dir('chstorm-scratch-test-')\nprint(tmp, flush=True)\n\
         open(os.path.join(tmp, 'data'), 'w').write('x' * 4096)\n{body}\n",
        scripts().display()
    );
    let out = Command::new("python3").arg("-c").arg(&program).env("TMPDIR", parent.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let path = PathBuf::from(stdout.lines().next().unwrap_or_else(|| panic!("no path printed: {out:?}")));
    assert!(path.starts_with(parent.path()), "{path:?} is not under TMPDIR");
    let code = out.status.code().or(out.status.signal().map(|s| 128 + s)).unwrap_or(-1);
    (code, path.exists(), stdout)
}

#[test]
fn the_scratch_folder_goes_however_the_script_ends() {
    let cases = [
        ("normal exit", "print('done')", 0),
        ("an error", "raise RuntimeError('benchmark failed')", 1),
        ("SystemExit", "raise SystemExit('bench: bad flag')", 1),
        ("Ctrl-C", "raise KeyboardInterrupt", 128 + 2), // python ends itself with SIGINT
        ("SIGTERM", "os.kill(os.getpid(), signal.SIGTERM)\nimport time\ntime.sleep(5)", 128 + 15),
    ];
    for (how, body, code) in cases {
        let (got, left, stdout) = run_with_scratch(body);
        assert_eq!(got, code, "{how}: exit code");
        assert!(!left, "{how}: {} was left behind", stdout.lines().next().unwrap_or_default());
    }
}

#[test]
fn a_sigterm_runs_the_scripts_finally_blocks_before_the_folder_goes() {
    // A script stops its servers in `finally`; that must run while the folder still exists.
    let body = "try:\n    os.kill(os.getpid(), signal.SIGTERM)\n    import time\n    time.sleep(5)\n\
                finally:\n    print('finally', os.path.exists(os.path.join(tmp, 'data')), flush=True)";
    let (code, left, stdout) = run_with_scratch(body);
    assert_eq!(code, 143);
    assert!(stdout.contains("finally True"), "{stdout}");
    assert!(!left, "{stdout}");
}

#[test]
fn every_script_makes_its_temporary_folder_with_scratch_dir() {
    let mut checked = 0;
    for entry in std::fs::read_dir(scripts()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("py") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let makes = text.matches("tempfile.mkdtemp(").count();
        let allowed = usize::from(name == "bench_gateway.py"); // scratch_dir itself
        assert_eq!(makes, allowed, "{name} makes a temporary folder without scratch_dir, which removes it at exit");
        assert!(!text.contains("shutil.rmtree(tmp"), "{name} removes its scratch folder itself; scratch_dir does");
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} scripts found in {:?}", scripts());
}

/// `make release-pgo` keeps its build only when the build's gateway answers as the server does
/// (scripts/build_pgo.py, `keep_if_verified`): the check passes this build's gateway and keeps
/// the binary, and fails one whose answers differ (the same gateway, its answers cut by
/// `max_result_rows`) and removes the binary. The binary checked is a copy of this build's.
#[test]
fn the_profile_guided_builds_differential_check_keeps_same_answers_and_removes_changed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let check = |wrap: &str| {
        let binary = dir.path().join("chstorm");
        std::fs::copy(env!("CARGO_BIN_EXE_chstorm"), &binary).unwrap();
        let run = run_with_scratch(&format!(
            "import build_pgo\norig = build_pgo.start_gateway\n\
             def start(*a):\n    p, u = orig(*a)\n    return p, u{wrap}\n\
             build_pgo.start_gateway = start\ntry:\n    build_pgo.keep_if_verified({binary:?}, tmp, queries=20)\n\
             except SystemExit as e:\n    print(e, flush=True)\n    raise\nprint('verified', flush=True)"
        ));
        (run, binary.exists())
    };
    let ((code, left, stdout), kept) = check("");
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("verified") && !left && kept, "{stdout}");
    let ((code, left, stdout), kept) = check(" + '/?max_result_rows=5'");
    assert_eq!(code, 1, "a changed answer must fail the check: {stdout}");
    assert!(stdout.contains("the optimised gateway answered") && !stdout.contains("verified") && !left, "{stdout}");
    assert!(!kept, "a build that answered otherwise is removed");
}

/// `make release-pgo`'s BOLT step (scripts/build_pgo.py, `bolt`) with stand-ins for `llvm-bolt`
/// and `merge-fdata` that do what the real ones do to files: the instrumented binary it trains is
/// this build's chstorm behind a wrapper that writes a profile file per process, the merged
/// profile is the files' text, and the laid-out binary replaces the build. Then with an
/// `llvm-bolt` that fails: the build is left as it was, with a note.
#[test]
fn the_bolt_step_trains_the_instrumented_binary_and_keeps_the_build_when_a_step_fails() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("chstorm");
    let fake = dir.path().join("llvm-bolt");
    let merge = dir.path().join("merge-fdata");
    let real = env!("CARGO_BIN_EXE_chstorm");
    // -instrument -o OUT -instrumentation-file=P: OUT runs chstorm after writing P.<pid>.fdata.
    // Else (the layout): -o OUT gets the data file's text and the word "laid-out".
    std::fs::write(
        &fake,
        format!(
            "#!/usr/bin/env python3\nimport os, sys\na = sys.argv[1:]\nout = a[a.index('-o') + 1]\n\
             if '-instrument' in a:\n    p = next(x.split('=', 1)[1] for x in a if x.startswith('-instrumentation-file='))\n\
             \x20   open(out, 'w').write('#!/bin/sh\\necho trained > ' + p + '.$$.fdata\\nexec {real} \"$@\"\\n')\n\
             \x20   os.chmod(out, 0o755)\nelse:\n    d = next(x.split('=', 1)[1] for x in a if x.startswith('-data='))\n\
             \x20   open(out, 'w').write('laid-out ' + open(d).read().splitlines()[0])\n"
        ),
    )
    .unwrap();
    std::fs::write(&merge, "#!/bin/sh\ncat \"$@\"\n").unwrap();
    for f in [&fake, &merge] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let step = |tools: String| {
        std::fs::copy(real, &binary).unwrap();
        run_with_scratch(&format!(
            "import build_pgo\nprint('bolted', build_pgo.bolt({binary:?}, {tools}, 1, tmp), flush=True)"
        ))
    };
    let (code, left, stdout) = step(format!("({fake:?}, {merge:?})"));
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("bolted True") && !left, "{stdout}");
    assert_eq!(std::fs::read(&binary).unwrap(), b"laid-out trained", "the layout replaces the build");
    let (code, _, stdout) = step("('/bin/false', '/bin/false')".into());
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("bolted False"), "{stdout}");
    assert_eq!(
        std::fs::read(&binary).unwrap(),
        std::fs::read(real).unwrap(),
        "a failed step leaves the build as it was"
    );
}

#[test]
fn the_cpu_benchmarks_server_threads_by_name() {
    // Two connection threads (one new during the run), one log-flushing thread and one other, over
    // 10 queries; then the names of this very process's threads, read from /proc.
    let program = format!(
        "import os, sys\nsys.path.insert(0, {:?})\nimport bench_gateway_cpu as b\n\
         t = b.TICK\n\
         before = {{1: (0, 5, 1, 'HTTPHandler'), 2: (0, 3, 0, 'SystemLogFlush'), 3: (t, 0, 0, 'BackgrProcPool')}}\n\
         after = {{1: (2 * t, 15, 4, 'HTTPHandler'), 4: (t, 4, 2, 'HTTPHandler'), 2: (t, 10, 1, 'SystemLogFlush'), 3: (3 * t, 1, 9, 'BackgrProcPool')}}\n\
         f = b.thread_figures(before, after, 10)\n\
         print(*(round(f[k], 2) for k in ('server_handler_cpu_us_per_query', 'server_handler_preempted_per_query', \
         'server_log_flush_cpu_us_per_query', 'server_log_flush_waits_per_query', \
         'server_voluntary_switches_per_query', 'server_involuntary_switches_per_query')))\n\
         print(sorted(set(n for *_, n in b.threads_now(os.getpid()).values())))",
        scripts().display()
    );
    let out = Command::new("python3").arg("-c").arg(&program).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("300000.0 0.5 100000.0 0.7 2.2 1.5"), "{out:?}");
    assert_eq!(lines.next(), Some("['python3']"), "{out:?}");
}

#[test]
fn the_scheduler_benchmark_counts_by_thread() {
    // `perf script -F comm,tid,event,trace` lines: server threads 10, 11 (connections) and 12
    // (log flushing), the proxy's 20, over 2 queries.
    let trace = [
        "chstorm-gw-0    20 sched:sched_wakeup: comm=HTTPHandler pid=10 prio=120 target_cpu=000",
        "     HTTPHandler    10 sched:sched_wakeup: comm=SystemLogFlush pid=12 prio=120 target_cpu=000",
        "     HTTPHandler    10 sched:sched_switch: prev_comm=HTTPHandler prev_pid=10 prev_prio=120 prev_state=R ==> next_comm=SystemLogFlush next_pid=12 next_prio=120",
        "  SystemLogFlush    12 sched:sched_switch: prev_comm=SystemLogFlush prev_pid=12 prev_prio=120 prev_state=S ==> next_comm=HTTPHandler next_pid=11 next_prio=120",
        "     HTTPHandler    11 sched:sched_switch: prev_comm=HTTPHandler prev_pid=11 prev_prio=120 prev_state=R+ ==> next_comm=chstorm-gw-0 next_pid=20 next_prio=120",
        "     HTTPHandler    11 sched:sched_wakeup: comm=HTTPHandler pid=10 prio=120 target_cpu=001",
        "            wrk    30 sched:sched_wakeup: comm=SystemLogFlush pid=12 prio=120 target_cpu=001",
    ]
    .join("\n");
    let program = format!(
        "import sys\nsys.path.insert(0, {:?})\nimport bench_gateway_sched as b\n\
         c = b.count(sys.stdin.read(), {{'10', '11', '12'}}, {{'20'}}, 2)\n\
         print(*(round(c[k], 2) for k in b.KEYS))",
        scripts().display()
    );
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(&program)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), trace.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    // woken by server, by proxy, preempted, by server, by proxy, by log flush, log flush woken
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1.0 0.5 1.0 0.5 0.5 0.5 1.0", "{out:?}");
}

#[test]
fn the_cpu_benchmarks_nice_reaches_every_thread_and_child() {
    // A shell with a child (as nginx's master has its worker): both at nice 19 after renice (as
    // this test's own nice before it: renice with 0 changes nothing), and the values out of range
    // refused in one line.
    let program = format!(
        "import os, subprocess, sys, time\nsys.path.insert(0, {:?})\nimport bench_gateway_cpu as b\n\
         p = subprocess.Popen(['sh', '-c', 'sleep 30 & wait'])\n\
         for _ in range(100):\n\
         \x20   kids = sorted(b.children({{p.pid}}))\n\
         \x20   if kids: break\n\
         \x20   time.sleep(0.05)\n\
         nice = lambda pid: os.getpriority(os.PRIO_PROCESS, pid)\n\
         b.renice([p], 0)\n\
         own = nice(os.getpid())\n\
         before = (nice(p.pid) - own, nice(kids[0]) - own)\n\
         b.renice([p], 19)\n\
         print(before, (nice(p.pid), nice(kids[0])))\n\
         p.kill(); os.kill(kids[0], 9); p.wait()",
        scripts().display()
    );
    let out = Command::new("python3").arg("-c").arg(&program).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(0, 0) (19, 19)", "{out:?}");
    for bad in ["-21", "20"] {
        let out =
            Command::new("python3").arg(scripts().join("bench_gateway_cpu.py")).args(["--nice", bad]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("--nice: {bad} is not a nice value; give -20 to 19")), "{stderr}");
    }
}

/// The benchmarks' round order (`round_order`): for 2 to 7 rows, every round runs every row once,
/// and over a whole cycle (n rounds, 2n when n is odd) each row runs in each place, and right
/// after each other row, equally often; a rotation of one order fails the second count.
#[test]
fn the_benchmarks_rounds_put_every_row_after_every_other_alike() {
    let program = format!(
        "import collections, sys\nsys.path.insert(0, {:?})\nimport bench_gateway as b\n\
         for n in range(2, 8):\n\
         \x20   rows = [f'r{{i}}' for i in range(n)]\n\
         \x20   cycle = n if n % 2 == 0 else 2 * n\n\
         \x20   places, after = collections.Counter(), collections.Counter()\n\
         \x20   for rnd in range(cycle):\n\
         \x20       order = b.round_order(rows, rnd)\n\
         \x20       assert sorted(order) == sorted(rows), order\n\
         \x20       places.update(enumerate(order))\n\
         \x20       after.update(zip(order, order[1:]))\n\
         \x20   print(n, len(places), set(places.values()), len(after), set(after.values()))",
        scripts().display()
    );
    let out = Command::new("python3").arg("-c").arg(&program).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want: Vec<String> = (2..8)
        .map(|n: usize| {
            let (places, after) = if n.is_multiple_of(2) { (1, 1) } else { (2, 2) };
            format!("{n} {} {{{places}}} {} {{{after}}}", n * n, n * (n - 1))
        })
        .collect();
    assert_eq!(stdout.lines().collect::<Vec<_>>(), want, "{out:?}");
}

/// The instruction benchmark's cache simulation takes the host's second-level cache as the last
/// level (`--LL=size,assoc,line` from getconf, each a positive number, or nothing where getconf
/// does not know it), and prints both levels' misses, naming the last level as simulated.
#[test]
fn the_instruction_benchmark_simulates_the_cores_own_caches() {
    let program = format!(
        "import sys\nsys.path.insert(0, {:?})\nimport bench_gateway_instructions as b\n\
         print(b.second_level())\n\
         m = dict(I1mr=1, D1mr=2, D1mw=3, ILmr=4, DLmr=5, DLmw=6)\n\
         print(b.misses({{'misses_per_query': m}}))\nprint(repr(b.misses({{}})))\n\
         print(b.misses({{'misses_per_query': m, 'last_level': 'last level'}}))",
        scripts().display()
    );
    let out = Command::new("python3").arg("-c").arg(&program).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{out:?}");
    let ll = lines[0];
    let fields: Vec<u64> =
        ll.strip_prefix("--LL=").map_or(vec![], |v| v.split(',').filter_map(|x| x.parse().ok()).collect());
    assert!(ll == "None" || (fields.len() == 3 && fields.iter().all(|v| *v > 0)), "{ll}");
    assert_eq!(
        lines[1],
        "; misses per query: I1 1, D1 read 2, D1 write 3; L2 instruction 4, L2 data read 5, L2 data write 6"
    );
    assert_eq!(lines[2], "''");
    assert!(
        lines[3].ends_with("; last level instruction 4, last level data read 5, last level data write 6"),
        "{}",
        lines[3]
    );
}

/// The paired verdicts of scripts/bench_gateway_cpu.py: the interval of the median is the
/// textbook pair of order statistics (none below 6 rounds), the sign test's p is the binomial
/// one, and `--pool` judges the rounds of several runs' JSONs together, pointing out runs of
/// other binaries and refusing, in one line, runs with no row in common and files that are not
/// a run's JSON.
#[test]
fn the_cpu_benchmarks_paired_verdicts_and_their_pooling() {
    let program = format!(
        "import sys\nsys.path.insert(0, {:?})\nimport bench_gateway_cpu as b\n\
         print(b.median_interval(list(range(1, 12))), b.median_interval(list(range(1, 32))), \
         b.median_interval([1, 2, 3, 4, 5]), round(b.sign_p([1.1] * 8 + [0.9] * 3), 3))",
        scripts().display()
    );
    let out = Command::new("python3").arg("-c").arg(&program).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(2, 10) (10, 22) None 0.227", "{out:?}");

    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, rounds: &[f64], sha: &str| {
        let path = dir.path().join(name);
        let json = format!(
            "{{\"binaries\": {{\"pgo\": \"{sha}\"}}, \"paired\": {{\"gateway_pgo http cpu\": {{\"rounds\": {rounds:?}}}}}}}"
        );
        std::fs::write(&path, json).unwrap();
        path
    };
    // Alone each run is one-sided; pooled, 22 rounds split evenly around 1.
    let a = run("a.json", &[0.9; 11], "x");
    let b = run("b.json", &[1.1; 11], "x");
    let c = run("c.json", &[1.1; 11], "y");
    let pool = |files: &[&Path]| {
        let out = Command::new("python3")
            .arg(scripts().join("bench_gateway_cpu.py"))
            .arg("--pool")
            .args(files)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, stderr) = pool(&[&a, &b]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("pooled, 2 runs: gateway_pgo http cpu / HAProxy: median 1.00 (95 % interval 0.90 to 1.10, sign test p 1.00)")
            && stdout.contains("the gateway better in 11 of 22"),
        "{stdout}"
    );
    assert!(stderr.is_empty(), "runs of the same binaries: {stderr}");
    let (code, _, stderr) = pool(&[&a, &c]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("did not all record the same binaries"), "{stderr}");
    let other = dir.path().join("d.json");
    std::fs::write(&other, "{\"paired\": {\"gateway_pgo many qps\": {\"rounds\": [1.0]}}}").unwrap();
    let (code, _, stderr) = pool(&[&a, &other]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no paired row in common"), "{stderr}");
    let broken = dir.path().join("e.json");
    std::fs::write(&broken, "{\"paired\": ").unwrap();
    let not_a_run = dir.path().join("f.json");
    std::fs::write(&not_a_run, "{\"runs\": []}").unwrap();
    for bad in [broken.as_path(), not_a_run.as_path(), Path::new("/nonexistent/gateway_cpu.json")] {
        let (code, _, stderr) = pool(&[&a, bad]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("is not a gateway_cpu.json") && stderr.lines().count() == 1, "{stderr}");
    }
}
