//! `users:`: who may connect, from where, to which cluster, with which limits and settings, as
//! which ClickHouse user (`backend`), and whether it may read the gateway's metrics.

use super::login::{self, Login, RawBackend};
use super::{Cluster, ConfigError, Ctx, Dur};
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chstorm_sql::statement::Operator;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUser {
    name: String,
    #[serde(default)]
    password_sha256: String,
    #[serde(default = "loopback")]
    networks: Vec<String>,
    cluster: String,
    #[serde(default = "default_user_concurrency")]
    max_concurrency: usize,
    #[serde(default = "default_user_queue")]
    queue_size: usize,
    #[serde(default = "default_user_wait")]
    queue_max_wait: Dur,
    #[serde(default)]
    requests_per_second: u32,
    max_execution_time: Option<Dur>,
    #[serde(default = "any_setting")]
    allowed_settings: Vec<String>,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    settings: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    operator_statements: Vec<String>,
    #[serde(default)]
    own_databases: Vec<String>,
    #[serde(default)]
    table_functions: Vec<String>,
    backend: Option<RawBackend>,
    #[serde(default)]
    metrics: bool,
    cache: Option<super::cache::RawUserCache>,
}

fn loopback() -> Vec<String> {
    vec!["127.0.0.0/8".into(), "::1/128".into()]
}
fn default_user_concurrency() -> usize {
    64
}
fn default_user_queue() -> usize {
    1024
}
fn default_user_wait() -> Dur {
    Dur(Duration::from_millis(500))
}
fn any_setting() -> Vec<String> {
    vec!["*".into()]
}

/// Which settings a user may set.
#[derive(Debug, Clone, PartialEq)]
pub enum AllowedSettings {
    Any,
    Only(BTreeSet<String>),
}

impl AllowedSettings {
    pub fn allows(&self, name: &str) -> bool {
        match self {
            AllowedSettings::Any => true,
            AllowedSettings::Only(s) => s.contains(name),
        }
    }
}

/// A set of names from the config: any (`["*"]`) or these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    Any,
    Only(BTreeSet<String>),
}

impl Names {
    fn from_config(names: &[String]) -> Names {
        if names.iter().any(|n| n == "*") {
            Names::Any
        } else {
            Names::Only(names.iter().cloned().collect())
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        match self {
            Names::Any => true,
            Names::Only(s) => s.contains(name),
        }
    }
}

/// A configured user.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    /// None: no password.
    pub password_sha256: Option<[u8; 32]>,
    pub networks: Vec<IpNet>,
    pub cluster: String,
    pub max_concurrency: usize,
    pub queue_size: usize,
    pub queue_max_wait: Duration,
    /// 0 = no limit.
    pub requests_per_second: u32,
    pub max_execution_time: Option<Duration>,
    pub allowed_settings: AllowedSettings,
    pub readonly: bool,
    /// Fixed settings, applied after (and so winning over) the client's.
    pub settings: Vec<(String, String)>,
    /// The operator statements the user may send (`operator_statements`; default none).
    pub operators: BTreeSet<Operator>,
    /// The databases whose tables the user may drop, detach, attach, rename, exchange,
    /// truncate or replace without [`Operator::Drop`] (`own_databases`; default none).
    pub own_databases: Names,
    /// Table functions, engines and dictionary sources that reach outside the server which a
    /// user with rules may still call, lowercased (`table_functions`; default none).
    pub table_functions: BTreeSet<String>,
    /// The ClickHouse user this user's queries run as on the replicas (`backend:`). None (the
    /// default): the cluster's login, shared with every other user without one.
    pub backend: Option<Login>,
    /// May read `/metrics` on the client port (when `metrics_listen` is not set) and see the
    /// replicas' URLs in `/replicas_status`. Default false.
    pub metrics: bool,
    /// Merging and caching of the user's reads (`cache:`). None (the default): neither.
    pub cache: Option<super::UserCache>,
}

/// The longest user name the gateway accepts, in a request or in the config: 128 bytes.
pub const MAX_USER_NAME: usize = 128;

/// Why `name` cannot be a user name (the same rule for the config and for requests): empty,
/// longer than [`MAX_USER_NAME`] bytes, or holding a control character.
pub fn check_user_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the user name is empty".into());
    }
    if name.len() > MAX_USER_NAME {
        return Err(format!("the user name is {} bytes long; at most {MAX_USER_NAME}", name.len()));
    }
    if name.chars().any(char::is_control) {
        return Err("the user name holds a control character".into());
    }
    Ok(())
}

/// A fixed setting's value as ClickHouse reads it (`true` is 1).
fn scalar(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(if *b { "1" } else { "0" }.into()),
        _ => None,
    }
}

/// Validates every user, in the file's order; at least one is needed.
pub(super) fn parse(
    ctx: &Ctx,
    raw: Vec<RawUser>,
    clusters: &BTreeMap<String, Cluster>,
) -> Result<BTreeMap<String, User>, ConfigError> {
    let mut users = BTreeMap::new();
    for (i, u) in raw.into_iter().enumerate() {
        let at = format!("name: {}", u.name);
        if let Err(why) = check_user_name(&u.name) {
            return Err(ctx.err(&at, format!("users[{i}].name: {why}")));
        }
        if u.name == crate::metrics::UNKNOWN_USER {
            return Err(ctx.err(
                &at,
                format!("users[{i}].name: '{}' is reserved: it is the metrics label of requests from unauthenticated or unknown users", u.name),
            ));
        }
        if users.contains_key(&u.name) {
            return Err(ctx.err(&at, format!("users[{i}].name: '{}' appears twice", u.name)));
        }
        if !clusters.contains_key(&u.cluster) {
            return Err(ctx.err(&at, format!("users[{i}].cluster: no cluster named '{}'", u.cluster)));
        }
        let user = user(ctx, i, &at, u)?;
        users.insert(user.name.clone(), user);
    }
    if users.is_empty() {
        return Err(ctx.err("users:", "users: at least one user is needed".into()));
    }
    Ok(users)
}

/// One user's password hash, networks, limits and settings (`at` finds its line).
fn user(ctx: &Ctx, i: usize, at: &str, u: RawUser) -> Result<User, ConfigError> {
    let password_sha256 = if u.password_sha256.is_empty() {
        None
    } else {
        let bytes =
            hex::decode(u.password_sha256.trim()).ok().and_then(|b| <[u8; 32]>::try_from(b).ok()).ok_or_else(|| {
                ctx.err(at, format!("users[{i}].password_sha256: not 64 hex digits (echo -n PASSWORD | sha256sum)"))
            })?;
        Some(bytes)
    };
    let mut networks = Vec::new();
    for n in &u.networks {
        let net = n.parse::<IpNet>().or_else(|_| n.parse::<std::net::IpAddr>().map(IpNet::from)).map_err(|_| {
            ctx.err(at, format!("users[{i}].networks: '{n}' is not an address or a network like 10.0.0.0/8"))
        })?;
        networks.push(net);
    }
    if u.max_concurrency == 0 {
        return Err(ctx.err(at, format!("users[{i}].max_concurrency: must be at least 1")));
    }
    let allowed_settings = if u.allowed_settings.iter().any(|s| s == "*") {
        AllowedSettings::Any
    } else {
        AllowedSettings::Only(u.allowed_settings.iter().cloned().collect())
    };
    let backend = match &u.backend {
        None => None,
        Some(b) => Some(login::backend(ctx, &login::Place { at, field: &format!("users[{i}].backend") }, b)?),
    };
    let mut settings = Vec::new();
    for (k, v) in &u.settings {
        let v =
            scalar(v).ok_or_else(|| ctx.err(at, format!("users[{i}].settings.{k}: expected a number or a string")))?;
        settings.push((k.clone(), v));
    }
    let mut operators = BTreeSet::new();
    for o in &u.operator_statements {
        if o == "*" {
            operators.extend(Operator::ALL);
            continue;
        }
        let op = Operator::from_name(o).ok_or_else(|| {
            let kinds: Vec<&str> = Operator::ALL.iter().map(|o| o.name()).collect();
            ctx.err(
                at,
                format!(
                    "users[{i}].operator_statements: '{o}' is no kind; the kinds are {}, or \"*\"",
                    kinds.join(", ")
                ),
            )
        })?;
        operators.insert(op);
    }
    let cache = u.cache.as_ref().map(|c| super::cache::user(ctx, i, at, c)).transpose()?;
    Ok(User {
        name: u.name,
        password_sha256,
        networks,
        cluster: u.cluster,
        max_concurrency: u.max_concurrency,
        queue_size: u.queue_size,
        queue_max_wait: u.queue_max_wait.0,
        requests_per_second: u.requests_per_second,
        max_execution_time: u.max_execution_time.map(|d| d.0),
        allowed_settings,
        readonly: u.readonly,
        settings,
        operators,
        own_databases: Names::from_config(&u.own_databases),
        table_functions: u.table_functions.iter().map(|f| f.to_ascii_lowercase()).collect(),
        backend,
        metrics: u.metrics,
        cache,
    })
}
