//! The ClickHouse logins the gateway uses on the replicas: a cluster's own (`clusters.*.user`
//! with `password` or `password_env`: health checks aside, the gateway's own work) and a user's
//! (`users[*].backend`: the ClickHouse user that gateway user's queries run as).
//!
//! A password comes inline (`password`) or from an environment variable of the gateway's process
//! (`password_env`), read when the config is loaded: at start and at each reload (a reload reads
//! the file again, not a new environment).

use super::{ConfigError, Ctx};
use serde::Deserialize;

/// A ClickHouse user name and password. Its `Debug` hides the password.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Login {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let password = if self.password.is_empty() { "" } else { "***" };
        f.debug_struct("Login").field("user", &self.user).field("password", &password).finish()
    }
}

/// `users[*].backend` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackend {
    user: String,
    password: Option<String>,
    password_env: Option<String>,
}

/// Where a login's fields are in the file, for its errors: `at` finds the line, `field` names
/// the key (`users[2].backend`, `clusters.storm`).
pub(super) struct Place<'a> {
    pub at: &'a str,
    pub field: &'a str,
}

/// The login of `users[*].backend`.
pub(super) fn backend(ctx: &Ctx, place: &Place, raw: &RawBackend) -> Result<Login, ConfigError> {
    if let Err(why) = super::check_user_name(&raw.user) {
        return Err(ctx.err(place.at, format!("{}.user: {why}", place.field)));
    }
    let password = password(ctx, place, raw.password.as_deref(), raw.password_env.as_deref())?;
    Ok(Login { user: raw.user.clone(), password })
}

/// A password given inline, from the environment variable `env`, or neither (empty); not both.
pub(super) fn password(
    ctx: &Ctx,
    place: &Place,
    inline: Option<&str>,
    env: Option<&str>,
) -> Result<String, ConfigError> {
    let field = place.field;
    match (inline, env) {
        (Some(_), Some(_)) => {
            Err(ctx.err(place.at, format!("{field}: both password and password_env are set; keep one")))
        }
        (Some(p), None) => Ok(p.to_string()),
        (None, None) => Ok(String::new()),
        (None, Some(var)) => {
            let bad_name = var.is_empty() || var.contains(['=', '\0']);
            if bad_name {
                return Err(ctx.err(place.at, format!("{field}.password_env: '{var}' is not a variable name")));
            }
            (ctx.env)(var).ok_or_else(|| {
                ctx.err(
                    place.at,
                    format!(
                        "{field}.password_env: the environment variable {var} is not set (set it in the \
                         gateway's environment, e.g. systemd's EnvironmentFile=, or give the password inline)"
                    ),
                )
            })
        }
    }
}
