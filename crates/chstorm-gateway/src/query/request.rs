//! `request`: a query as the core sees it, whichever front it came through. The HTTP front
//! (`crate::http::service`) fills a [`QueryRequest`] from the URL, headers and body; the native
//! front (`crate::native::query`) from the Query packet, the session's settings and database.
//! What only HTTP has (a GET, the gateway's headers) becomes plain fields here, so the plan never
//! sees a method or a header map.

/// A new query_id for a query whose client set none: `chgw-` and 24 random hex digits.
pub fn new_query_id() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let r = rand::random::<u128>() >> 32;
    let mut id = *b"chgw-000000000000000000000000";
    for (i, d) in id[5..].iter_mut().rev().enumerate() {
        *d = HEX[((r >> (4 * i)) & 15) as usize];
    }
    String::from_utf8(id.to_vec()).expect("ASCII")
}

/// Largest body held whole (1 MiB), after decompression. Bigger bodies stream.
pub const MAX_HELD_BODY: usize = 1 << 20;

/// The request body as the reader found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyShape {
    /// Read whole (at most [`MAX_HELD_BODY`]), decompressed when it was
    /// compressed. A native query's external tables are always held.
    Held,
    /// Too big to hold: its head was read to classify the statement, the rest streams through.
    Streamed,
    /// Compressed in a way the gateway cannot read (`decompress=1`, ClickHouse's own block
    /// format; or an unknown `Content-Encoding`): passed through unread.
    Opaque,
}

/// What the plan is made from.
#[derive(Debug, Clone)]
pub struct QueryRequest<'a> {
    /// The backend URL's path: the client's for HTTP; empty for native, which sends settings
    /// and makes no URL.
    pub path: &'a str,
    /// The parameters, decoded, in order: the URL's (and a read form's fields) for HTTP; the
    /// session's and the Query packet's settings, `database` and `query_id` for native.
    pub params: Vec<(String, String)>,
    /// The statement as ClickHouse will read it: the `query` parameter joined with the body
    /// (its head when streamed). None when the body is opaque and there is no `query` parameter.
    pub sql: Option<&'a str>,
    pub body: BodyShape,
    /// The body is multipart/form-data (18.16 reads its plain fields as URL parameters and its
    /// `query` fields as the statement).
    pub multipart: bool,
    /// A multipart/form-data body read by the HTTP front (its fields are in `params`, its
    /// statement in `sql`); a multipart body not read so is refused for users with rules.
    pub form_read: bool,
    /// The statement goes in the URL, not the body (an HTTP GET: it stays read-only on the
    /// server, and its body is not read).
    pub statement_in_url: bool,
    /// The shard key the client gave apart from the URL (HTTP's `X-ChStorm-Shard-Key`).
    pub shard_key: Option<&'a str>,
    /// The database the client gave apart from the parameters (HTTP's
    /// `X-ClickHouse-Database`).
    pub database: Option<&'a str>,
    /// `limits.max_query_depth`: a statement nesting deeper is refused (Code 167).
    pub max_depth: usize,
    /// The grammars of the cluster's replicas, which every rule reads the statement under
    /// ([`chstorm_sql::reading`]); both until the replicas' versions are known.
    pub grammars: chstorm_sql::reading::Grammars,
    /// The client asked for no cached answer (HTTP's `Cache-Control: no-cache`; the `no_cache=1`
    /// parameter is read by the plan).
    pub no_cache: bool,
}

impl<'a> QueryRequest<'a> {
    /// A request of statement `sql` with `params`, held, to `/`, with nothing else: the native
    /// front's shape.
    pub fn held(params: Vec<(String, String)>, sql: &'a str, max_depth: usize) -> QueryRequest<'a> {
        QueryRequest {
            path: "/",
            params,
            sql: Some(sql),
            body: BodyShape::Held,
            multipart: false,
            form_read: false,
            statement_in_url: false,
            shard_key: None,
            database: None,
            max_depth,
            grammars: chstorm_sql::reading::Grammars::ALL,
            no_cache: false,
        }
    }

    /// A native query's: [`QueryRequest::held`] with no URL path (its settings go in the Query
    /// packet, so no URL is made).
    pub fn native(params: Vec<(String, String)>, sql: &'a str, max_depth: usize) -> QueryRequest<'a> {
        QueryRequest { path: "", ..QueryRequest::held(params, sql, max_depth) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_ids_are_the_prefix_and_24_hex_digits() {
        let ids: Vec<String> = (0..200).map(|_| super::new_query_id()).collect();
        for id in &ids {
            let hex = id.strip_prefix("chgw-").expect("the prefix");
            assert_eq!(hex.len(), 24, "{id}");
            assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{id}");
        }
        // Every hex digit's place takes more than one value (no digit is stuck).
        for i in 0..24 {
            let at: std::collections::HashSet<u8> = ids.iter().map(|id| id.as_bytes()[5 + i]).collect();
            assert!(at.len() > 1, "place {i} is always {at:?}");
        }
    }
}
