//! [`compare`]: runs every query on both sides, reads the server metrics, judges, and gathers
//! flamegraph samples of the queries that changed.

use crate::explain;
use crate::flame::{self, PROFILER_PERIOD_NS};
use crate::metrics::{self, MetricsSource, RunMetrics};
use crate::result::{
    CompareResult, FlameSide, MetricResult, OptionsEcho, QueryResult, SideInfo, Sides, Summary, SCHEMA,
};
use crate::runner::{QueryExec, Runner, Windows};
use crate::schedule::{self, QueryRuns, Side, Stop};
use crate::sequential;
use crate::stats::{self, derive_seed, Verdict};
use crate::{table, CompareError, CompareOptions, QuerySpec};
use chstorm_load::Template;
use chstorm_proto::rules::TOO_MANY_SIMULTANEOUS_QUERIES;
use chstorm_proto::{ProtoError, Protocol, Target};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::HashMap;
use std::sync::Arc;

/// Fewest measured runs per side for a slower/faster verdict. With fewer, a 1 % threshold cannot
/// be had: 4+4 runs split into halves only 35 ways, so the largest split difference is reached
/// by chance 1 time in 35.
pub const MIN_RUNS_FOR_VERDICT: usize = 5;

/// Compares every query of `opts` on the two servers. `progress` gets one line per finished
/// query; `interrupted` is polled between runs (the queries not run yet are left out, and the
/// result says it was interrupted).
pub fn compare(
    opts: &CompareOptions,
    progress: &mut dyn FnMut(&str),
    interrupted: &dyn Fn() -> bool,
) -> Result<CompareResult, CompareError> {
    check_options(opts)?;
    let templates = opts
        .queries
        .iter()
        .map(|q| {
            Template::parse(&q.sql, &opts.base_dir)
                .map_err(|e| CompareError::Invalid(format!("query '{}': {e}", table::truncate(&q.sql, 80))))
        })
        .collect::<Result<Vec<Arc<Template>>, _>>()?;
    let left = parse_target(Side::Left, &opts.left)?;
    let right = parse_target(Side::Right, &opts.right)?;
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let run_id = new_run_id();
    let mut runner = Runner::open(&left, &right, &opts.tls, opts.timeout, &run_id)?;
    let windows = (opts.concurrency > 1).then_some(Windows { clients: opts.concurrency, length: opts.window });
    if let Some(w) = windows {
        for (side, target) in [(Side::Left, &left), (Side::Right, &right)] {
            check_concurrency(&mut runner, side, target, w.clients)?;
        }
    }

    let mut infos = [side_info(&left, runner.version(Side::Left)), side_info(&right, runner.version(Side::Right))];
    let mut sources: [Option<MetricsSource>; 2] = [None, None];
    for (side, target, explicit) in [(Side::Left, &left, &opts.left_http), (Side::Right, &right, &opts.right_http)] {
        let i = side as usize;
        if windows.is_some() {
            infos[i].notes.push(format!(
                "no server metrics or flamegraphs: with --concurrency {} each run is a window of many queries, judged by its QPS",
                opts.concurrency
            ));
            continue;
        }
        let url = match (explicit, target.protocol.is_http()) {
            (Some(u), _) => u.clone(),
            (None, true) => http_url_of(target),
            (None, false) => {
                infos[i].notes.push(format!(
                    "no server metrics: the URL is native; give --{}-http with an http(s) URL of the same server",
                    side.as_str()
                ));
                continue;
            }
        };
        match MetricsSource::open(&url, &opts.tls, opts.timeout) {
            Ok(s) => {
                infos[i].metrics_url = Some(s.url.clone());
                sources[i] = Some(s);
            }
            Err(e) => infos[i].notes.push(format!("no server metrics: cannot query {}: {e}", redact(&url))),
        }
    }

    let has_profiler = |s: &Option<MetricsSource>| s.as_ref().is_some_and(|s| s.caps.profiler_setting);
    let profiler = opts.profiler && sources.iter().all(has_profiler);
    if profiler {
        for side in [Side::Left, Side::Right] {
            runner.add_setting(side, "query_profiler_real_time_period_ns", &PROFILER_PERIOD_NS.to_string());
        }
    } else if opts.profiler && sources.iter().any(has_profiler) {
        for info in &mut infos {
            info.notes.push(
                "the query profiler was left as configured: only one server has it, and turning it on for one side \
                 would skew the comparison"
                    .into(),
            );
        }
    }

    // Run every query, in a seeded random order.
    let n = opts.queries.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(derive_seed(opts.seed, &["order"])));
    let mut done: Vec<(QueryResult, QueryRuns)> = Vec::with_capacity(n);
    let mut was_interrupted = false;
    for (k, &i) in order.iter().enumerate() {
        if interrupted() {
            was_interrupted = true;
            break;
        }
        let seed = derive_seed(opts.seed, &["placeholders", &i.to_string()]);
        let mut exec = QueryExec::new(&mut runner, &templates[i], seed, windows);
        let judged = judge_seed(opts, &opts.queries[i]);
        let mut judge = |l: &[f64], r: &[f64]| sequential::look(l, r, judged, &opts.rules).decided;
        let runs = schedule::run_query(&mut exec, &opts.plan, &mut judge, interrupted);
        was_interrupted |= runs.stop == Stop::Interrupted;
        let q = client_result(i, &opts.queries[i], &runs, opts);
        progress(&format!("[{}/{}] {}", k + 1, n, table::progress_line(&q)));
        done.push((q, runs));
    }
    drop(runner);
    done.sort_by_key(|(q, _)| q.index);

    // Server metrics of every run.
    for (i, src) in sources.iter_mut().enumerate() {
        if let Some(s) = src {
            match s.flush() {
                Ok(()) => {
                    infos[i].profile_events = Some(s.caps.profile_events);
                    infos[i].trace_log = s.caps.trace_log;
                }
                Err(e) => {
                    infos[i].notes.push(format!("no server metrics: SYSTEM FLUSH LOGS failed: {e}"));
                    *src = None;
                }
            }
        }
    }
    let mut rows: Vec<[HashMap<String, RunMetrics>; 2]> = Vec::with_capacity(done.len());
    let mut found = [0usize; 2];
    let mut asked = [0usize; 2];
    for (q, _) in &done {
        let mut r: [HashMap<String, RunMetrics>; 2] = Default::default();
        for (i, ids) in [&q.ids.left, &q.ids.right].into_iter().enumerate() {
            let Some(s) = sources[i].as_mut() else { continue };
            asked[i] += ids.len();
            match s.fetch(ids) {
                Ok(m) => {
                    found[i] += m.len();
                    r[i] = m;
                }
                Err(e) => {
                    infos[i].notes.push(format!("no server metrics: reading system.query_log failed: {e}"));
                    sources[i] = None;
                }
            }
        }
        rows.push(r);
    }
    for i in 0..2 {
        infos[i].query_log = found[i] > 0;
        if sources[i].is_some() && found[i] < asked[i] {
            infos[i].notes.push(format!(
                "system.query_log has rows for {} of {} runs{}",
                found[i],
                asked[i],
                if found[i] == 0 { " (is log_queries off? add ?log_queries=1 to the URL)" } else { "" }
            ));
        }
    }

    for ((q, runs), rows) in done.iter_mut().zip(&rows) {
        if q.verdict == Verdict::Unstable {
            explain_unstable(q, runs, rows, opts);
        }
    }
    let mut queries: Vec<QueryResult> = done.into_iter().map(|(q, _)| q).collect();
    compare_metrics(&mut queries, &rows, opts);

    // Flamegraph samples of the queries that changed.
    let native_only =
        [!left.protocol.is_http() && opts.left_http.is_none(), !right.protocol.is_http() && opts.right_http.is_none()];
    let reasons: [Option<String>; 2] = [Side::Left, Side::Right].map(|side| {
        let i = side as usize;
        if windows.is_some() {
            return None;
        }
        match (&sources[i], native_only[i]) {
            (None, false) => Some(format!(
                "no flamegraphs for the {} server (version {}): its logs could not be read (see the notes above)",
                side.long(),
                infos[i].version
            )),
            (s, _) => flame::unavailable_reason(side.long(), s.as_ref().map(|s| &s.caps), &infos[i].version),
        }
    });
    for (i, r) in reasons.iter().enumerate() {
        if let Some(r) = r {
            infos[i].notes.push(r.clone());
        }
    }
    for q in queries.iter_mut().filter(|q| matches!(q.verdict, Verdict::Slower | Verdict::Faster)) {
        let mut sides = [FlameSide::NotGathered, FlameSide::NotGathered];
        for (i, ids) in [&q.ids.left, &q.ids.right].into_iter().enumerate() {
            sides[i] = match (&reasons[i], sources[i].as_mut()) {
                (Some(r), _) => FlameSide::Unavailable(r.clone()),
                (None, Some(s)) => match flame::fetch(&mut s.client, &s.caps, ids) {
                    Ok(f) if f.is_empty() => FlameSide::Failed(
                        "system.trace_log has no samples of these runs (is the query profiler on?)".into(),
                    ),
                    Ok(f) => FlameSide::Samples(f),
                    Err(e) => FlameSide::Failed(e),
                },
                (None, None) => FlameSide::Unavailable("no server metrics".into()),
            };
        }
        let [l, r] = sides;
        q.flames = Sides { left: l, right: r };
    }

    let [left_info, right_info] = infos;
    Ok(CompareResult {
        schema: SCHEMA,
        chstorm_version: env!("CARGO_PKG_VERSION").to_string(),
        run_id,
        date,
        left: left_info,
        right: right_info,
        options: OptionsEcho {
            plan: opts.plan,
            rules: opts.rules,
            seed: opts.seed,
            fail_on: opts.fail_on,
            timeout_s: opts.timeout.as_secs_f64(),
            iterations: sequential::LOOK_ITERATIONS,
            quantile: sequential::LOOK_QUANTILE,
            look_growth: sequential::LOOK_GROWTH,
            metric_quantile: stats::QUANTILE,
            concurrency: opts.concurrency,
            window_s: windows.map(|w| w.length.as_secs_f64()),
            profiler,
        },
        summary: Summary::of(&queries),
        interrupted: was_interrupted,
        queries,
    })
}

fn check_options(opts: &CompareOptions) -> Result<(), CompareError> {
    opts.plan.validate().map_err(CompareError::Invalid)?;
    let r = &opts.rules;
    if !(r.min_change.is_finite() && r.min_change >= 0.0) {
        return Err(CompareError::Invalid(format!(
            "--min-change {} must be a fraction >= 0, e.g. 0.05 or 5%",
            r.min_change
        )));
    }
    if !(r.unstable.is_finite() && r.unstable > 0.0) {
        return Err(CompareError::Invalid(format!(
            "--unstable {} must be a fraction > 0, e.g. 0.1 or 10%",
            r.unstable
        )));
    }
    if opts.queries.is_empty() {
        return Err(CompareError::Invalid("no queries to compare".into()));
    }
    if !(1..=MAX_CONCURRENCY).contains(&opts.concurrency) {
        return Err(CompareError::Invalid(format!(
            "--concurrency {} must be 1 to {MAX_CONCURRENCY} clients per side",
            opts.concurrency
        )));
    }
    if opts.concurrency > 1 {
        let p = &opts.plan;
        if opts.window.is_zero() {
            return Err(CompareError::Invalid("--window must be longer than 0, e.g. 1s".into()));
        }
        // Windows end after their last answer, so a budget of exactly this many windows fits
        // one fewer: one window more is asked for.
        let windows = p.runs.max(sequential::MIN_RUNS_FOR_CHANGE);
        let needed = opts.window * (windows as u32 + 1);
        if needed > p.max_time {
            return Err(CompareError::Invalid(format!(
                "--max-time {} cannot fit {windows} windows of {} per side (a change is told from noise from \
                 {} runs a side): raise --max-time to at least {}, or lower --window",
                schedule::show(p.max_time),
                schedule::show(opts.window),
                sequential::MIN_RUNS_FOR_CHANGE,
                schedule::show(needed)
            )));
        }
    }
    Ok(())
}

/// Most concurrent clients per side.
pub const MAX_CONCURRENCY: usize = 1000;

/// How long each query of the concurrency check holds its place on the server, seconds.
const PROBE_HOLD_S: f64 = 0.5;

/// Asks `side`'s server to run `clients` queries at once, before any run: a server that queues
/// some of them or refuses them (TOO_MANY_SIMULTANEOUS_QUERIES) would have the comparison measure
/// its queue, so that is a one-line error that says how many it ran at once.
fn check_concurrency(runner: &mut Runner, side: Side, target: &Target, clients: usize) -> Result<(), CompareError> {
    let limit = |at_once: Option<usize>, how: &str| {
        let m = at_once.map(|m| format!(" ({m})")).unwrap_or_default();
        let to = at_once.map(|m| format!(" to at most {m}")).unwrap_or_default();
        CompareError::Invalid(format!(
            "--concurrency {clients} is beyond what the {side} server runs at once{m}: {how}; lower --concurrency{to}, \
             or raise its max_concurrent_queries (or the user's max_concurrent_queries_for_user)"
        ))
    };
    match runner.probe_concurrency(side, clients, PROBE_HOLD_S) {
        Ok(n) if n >= clients => Ok(()),
        Ok(n) => Err(limit(Some(n), &format!("of {clients} queries sent together, {n} ran and the others waited"))),
        Err(e) => {
            let code = match &e {
                ProtoError::HttpStatus { code, .. } => *code,
                ProtoError::Server { code, .. } => Some(*code),
                _ => None,
            };
            if code != Some(TOO_MANY_SIMULTANEOUS_QUERIES) {
                return Err(CompareError::Server { side, target: target.to_string(), source: e });
            }
            let text = e.to_string();
            let max = text
                .split("Maximum: ")
                .nth(1)
                .and_then(|t| t.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<usize>().ok());
            Err(limit(max, "it refused some of them (Too many simultaneous queries)"))
        }
    }
}

/// The seed of a query's client-time thresholds: the same at every look, so the last look's
/// threshold can be had again from the JSON's `times_s`.
fn judge_seed(opts: &CompareOptions, spec: &QuerySpec) -> u64 {
    derive_seed(opts.seed, &[&spec.sql, "client_time"])
}

/// Attaches the explanation of an unstable query, from its runs and their query_log rows.
fn explain_unstable(
    q: &mut QueryResult,
    runs: &QueryRuns,
    rows: &[HashMap<String, RunMetrics>; 2],
    opts: &CompareOptions,
) {
    let Some(t) = q.threshold else { return };
    let per_side = |s: &schedule::SideRuns, rows: &HashMap<String, RunMetrics>| {
        let wait = s
            .runs
            .iter()
            .map(|r| {
                let (mut wait, mut real) = (0.0, 0.0);
                for m in r.query_ids.iter().filter_map(|id| rows.get(id)) {
                    wait += m.get("OSCPUWaitMicroseconds").copied().unwrap_or(0.0);
                    real += m.get("RealTimeMicroseconds").copied().unwrap_or(0.0);
                }
                (real > 0.0).then(|| wait / real)
            })
            .collect();
        (s.runs.iter().map(|r| r.wall_s).collect(), wait, s.runs.iter().map(|r| r.steal).collect())
    };
    let (lw, lc, ls) = per_side(&runs.left, &rows[0]);
    let (rw, rc, rs) = per_side(&runs.right, &rows[1]);
    let seen = explain::Runs {
        values: q.times_s.clone(),
        wall_s: Sides { left: lw, right: rw },
        cpu_wait: Sides { left: lc, right: rc },
        steal: Sides { left: ls, right: rs },
    };
    let spec_seed = derive_seed(opts.seed, &[&q.query, "client_time"]);
    let e = explain::unstable(&seen, t, spec_seed, &opts.rules, &opts.plan, q.stop);
    q.note = Some(e.text.clone());
    q.explanation = Some(e);
}

fn parse_target(side: Side, url: &str) -> Result<Target, CompareError> {
    Target::parse(url)
        .map(Target::with_env_credentials)
        .map_err(|e| CompareError::Invalid(format!("--{} {e}", side.as_str())))
}

fn side_info(t: &Target, version: &str) -> SideInfo {
    SideInfo {
        target: t.to_string(),
        protocol: t.protocol.as_str().to_string(),
        version: version.to_string(),
        metrics_url: None,
        query_log: false,
        profile_events: None,
        trace_log: false,
        notes: Vec::new(),
    }
}

/// The http(s) address of an HTTP target, with its credentials but without its settings (they are
/// for the compared queries, not for reading the logs).
fn http_url_of(t: &Target) -> String {
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    let scheme = if t.protocol == Protocol::Https { "https" } else { "http" };
    let creds = match (&t.user, &t.password) {
        (Some(u), Some(p)) => format!("{}:{}@", enc(u), enc(p)),
        (Some(u), None) => format!("{}@", enc(u)),
        _ => String::new(),
    };
    format!("{scheme}://{creds}{}{}", t.authority(), t.path)
}

fn redact(url: &str) -> String {
    Target::parse(url).map(|t| t.to_string()).unwrap_or_else(|_| "the --*-http URL".into())
}

/// A short id, different for every comparison.
fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let h = derive_seed(nanos as u64, &[&std::process::id().to_string()]);
    format!("{:08x}", h as u32)
}

/// The client-time comparison of one query, right after its runs.
fn client_result(index: usize, spec: &QuerySpec, runs: &QueryRuns, opts: &CompareOptions) -> QueryResult {
    let times = Sides { left: runs.left.times(), right: runs.right.times() };
    let ids = Sides {
        left: runs.left.runs.iter().flat_map(|r| r.query_ids.iter().cloned()).collect(),
        right: runs.right.runs.iter().flat_map(|r| r.query_ids.iter().cloned()).collect(),
    };
    let mut q = QueryResult {
        index,
        name: spec.name.clone(),
        query: spec.sql.clone(),
        verdict: Verdict::NotSignificant,
        old_s: None,
        new_s: None,
        ratio: None,
        diff: None,
        threshold: None,
        runs: Sides { left: times.left.len(), right: times.right.len() },
        stop: runs.stop,
        metrics: Vec::new(),
        error: None,
        note: None,
        times_s: times,
        qps: None,
        explanation: None,
        all_metrics: Vec::new(),
        ids,
        flames: Sides::default(),
    };
    match (&runs.left.error, &runs.right.error) {
        (Some(l), Some(r)) => {
            q.verdict = Verdict::ErrorBoth;
            q.error = Some(format!("left (old): {l}; right (new): {r}"));
            return q;
        }
        (Some(l), None) => {
            q.verdict = Verdict::ErrorLeft;
            q.error = Some(format!("left (old): {l}"));
            return q;
        }
        (None, Some(r)) => {
            q.verdict = Verdict::ErrorRight;
            q.error = Some(format!("right (new): {r}"));
            return q;
        }
        (None, None) => {}
    }
    if q.times_s.left.is_empty() || q.times_s.right.is_empty() {
        q.note = Some("no measured runs (interrupted)".into());
        return q;
    }
    let look = sequential::look(&q.times_s.left, &q.times_s.right, judge_seed(opts, spec), &opts.rules);
    let c = look.comparison;
    q.old_s = Some(c.old);
    q.new_s = Some(c.new);
    q.ratio = c.ratio();
    q.diff = c.diff;
    q.threshold = c.threshold;
    q.verdict = look.verdict;
    if opts.concurrency > 1 {
        q.qps = Some(Sides { left: 1.0 / c.old, right: 1.0 / c.new });
    }
    // Fewer runs than a verdict needs (a slow query cut by --max-time): unstable, explained later.
    if q.runs.left.min(q.runs.right) < MIN_RUNS_FOR_VERDICT {
        q.verdict = Verdict::Unstable;
    }
    q.all_metrics.push(MetricResult {
        name: "client_time".into(),
        old: c.old,
        new: c.new,
        diff: c.diff,
        threshold: c.threshold,
        verdict: q.verdict,
    });
    q
}

/// Compares every server metric of every query (in parallel over queries).
fn compare_metrics(queries: &mut [QueryResult], rows: &[[HashMap<String, RunMetrics>; 2]], opts: &CompareOptions) {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
    let chunk = queries.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (qs, rs) in queries.chunks_mut(chunk).zip(rows.chunks(chunk)) {
            s.spawn(move || {
                for (q, r) in qs.iter_mut().zip(rs) {
                    metrics_of_query(q, r, opts);
                }
            });
        }
    });
}

fn metrics_of_query(q: &mut QueryResult, rows: &[HashMap<String, RunMetrics>; 2], opts: &CompareOptions) {
    if q.verdict.is_error() {
        return;
    }
    let names = metrics::metric_names(rows[0].values().chain(rows[1].values()));
    for name in names {
        let l = metrics::series(&rows[0], &q.ids.left, &name);
        let r = metrics::series(&rows[1], &q.ids.right, &name);
        if l.len() < MIN_RUNS_FOR_VERDICT || r.len() < MIN_RUNS_FOR_VERDICT {
            continue;
        }
        let c = stats::compare(&l, &r, derive_seed(opts.seed, &[&q.query, &name]));
        let m = MetricResult {
            name,
            old: c.old,
            new: c.new,
            diff: c.diff,
            threshold: c.threshold,
            verdict: c.verdict(&opts.rules),
        };
        if c.moved(&opts.rules) {
            q.metrics.push(m.clone());
        }
        q.all_metrics.push(m);
    }
    q.metrics
        .sort_by(|a, b| b.diff.unwrap_or(0.0).abs().total_cmp(&a.diff.unwrap_or(0.0).abs()).then(a.name.cmp(&b.name)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_urls_keep_credentials_and_drop_settings() {
        let t = Target::parse("https://bob:p%40ss@h:8443/?max_block_size=256&database=x").unwrap();
        assert_eq!(http_url_of(&t), "https://bob:p%40ss@h:8443/");
        let t = Target::parse("http://127.0.0.1:8123/?max_threads=1").unwrap();
        assert_eq!(http_url_of(&t), "http://127.0.0.1:8123/");
        assert_eq!(new_run_id().len(), 8);
    }
}
