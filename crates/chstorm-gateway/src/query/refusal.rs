//! `refusal`: the one form of "the gateway will not run this query", for both fronts. A
//! [`Refusal`] has a [`Kind`], which gives the HTTP status (the HTTP front's answer) and the
//! ClickHouse error code (the native front's Exception packet), and a one-line message.

use http::StatusCode;

/// Why a query is refused; each kind has one HTTP status and one ClickHouse error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No such user, a wrong password, or a name no user could have: 401, Code 193
    /// (WRONG_PASSWORD; the gateway does not tell an unknown user from a wrong password).
    Unauthorized,
    /// The user may not connect from the client's address: 403, Code 195
    /// (IP_ADDRESS_NOT_ALLOWED).
    Network,
    /// The user's rules forbid it: 403, Code 497 (ACCESS_DENIED).
    Forbidden,
    /// A read-only user's write, SET or table function: 403, Code 164 (READONLY).
    ReadOnly,
    /// The gateway-wide limit and its queue are full: 503, Code 202
    /// (TOO_MANY_SIMULTANEOUS_QUERIES).
    Overloaded,
    /// The user's rate or concurrency limit: 429, Code 202.
    TooMany,
    /// The request body or statement is too big to hold: 413, Code 1002.
    TooLarge,
    /// The request cannot be read: 400, Code 1002.
    BadRequest,
    /// The statement cannot be read as every server of the cluster reads it: 400, Code 62
    /// (SYNTAX_ERROR).
    Syntax,
    /// The client's HTTP session is gone with its replica and cannot be carried to another:
    /// 500, Code 372 (SESSION_NOT_FOUND), as the server answers a session it does not have.
    SessionLost,
    /// The gateway's own state cannot serve it (a user's cluster gone by a reload): 500, Code 1002.
    Internal,
    /// ClickHouse's own error, worded as ClickHouse words it (`Code: N, e.displayText() = ...`):
    /// 400, Code N.
    ClickHouse(i32),
}

impl Kind {
    /// The HTTP status of the answer.
    pub fn status(self) -> StatusCode {
        match self {
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::Network | Kind::Forbidden | Kind::ReadOnly => StatusCode::FORBIDDEN,
            Kind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Kind::TooMany => StatusCode::TOO_MANY_REQUESTS,
            Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Kind::BadRequest | Kind::Syntax | Kind::ClickHouse(_) => StatusCode::BAD_REQUEST,
            Kind::Internal | Kind::SessionLost => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The ClickHouse error code of the native Exception packet.
    pub fn code(self) -> i32 {
        match self {
            Kind::Unauthorized => 193,
            Kind::Network => 195,
            Kind::Forbidden => 497,
            Kind::ReadOnly => 164,
            Kind::Syntax => 62,
            Kind::SessionLost => 372,
            Kind::Overloaded | Kind::TooMany => 202,
            Kind::TooLarge | Kind::BadRequest | Kind::Internal => 1002,
            Kind::ClickHouse(code) => code,
        }
    }
}

/// The gateway's own prefix of its one-line messages.
const PREFIX: &str = "chstorm gateway: ";

/// A query the gateway refuses, with the one-line reason sent to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub kind: Kind,
    /// The whole line, as the HTTP front sends it.
    pub message: String,
}

impl Refusal {
    /// A refusal in the gateway's words: `message` after `chstorm gateway: `.
    pub fn new(kind: Kind, message: impl Into<String>) -> Refusal {
        Refusal { kind, message: format!("{PREFIX}{}", message.into()) }
    }

    /// A refusal in ClickHouse's words (`Code: N, e.displayText() = DB::Exception: ...`), sent
    /// as it is.
    pub fn clickhouse(code: i32, message: String) -> Refusal {
        Refusal { kind: Kind::ClickHouse(code), message }
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The text of the native Exception packet, which carries the code itself: without the
    /// gateway's prefix, and only the display text of ClickHouse's wording.
    pub fn native_text(&self) -> &str {
        let text = self.message.strip_prefix(PREFIX).unwrap_or(&self.message);
        let text = text.split_once("e.displayText() = DB::Exception: ").map_or(text, |(_, t)| t);
        text.trim_end_matches(", e.what() = DB::Exception")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_a_status_and_a_code() {
        let r = Refusal::new(Kind::ReadOnly, "user 'u' is read-only: only SELECT ...");
        assert_eq!((r.status(), r.kind.code()), (StatusCode::FORBIDDEN, 164));
        assert_eq!(r.native_text(), "user 'u' is read-only: only SELECT ...");
        // A user whose name says read-only is still refused for a setting with ACCESS_DENIED.
        let r = Refusal::new(Kind::Forbidden, "setting 'x' is not allowed for user 'read-only'");
        assert_eq!((r.status(), r.kind.code()), (StatusCode::FORBIDDEN, 497));
        let r = Refusal::clickhouse(
            167,
            "Code: 167, e.displayText() = DB::Exception: Query is too deep: 9 levels, e.what() = DB::Exception".into(),
        );
        assert_eq!((r.status(), r.kind.code()), (StatusCode::BAD_REQUEST, 167));
        assert_eq!(r.native_text(), "Query is too deep: 9 levels");
        assert_eq!((Kind::Overloaded.status().as_u16(), Kind::Overloaded.code()), (503, 202));
        assert_eq!((Kind::TooMany.status().as_u16(), Kind::TooMany.code()), (429, 202));
        assert_eq!((Kind::Unauthorized.code(), Kind::Network.code()), (193, 195));
        assert_eq!((Kind::Internal.status().as_u16(), Kind::TooLarge.status().as_u16()), (500, 413));
    }
}
