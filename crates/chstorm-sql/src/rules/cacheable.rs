//! What keeps a read's answer from being reused: a function whose value is not fixed by the
//! query's text and the data (`now()`, `rand()`, `dictGet()`, `hostName()`, ...), or a
//! system table (`system.processes` changes from one moment to the next).
//!
//! Followed: ClickHouse's query cache, which refuses both by default
//! (`query_cache_nondeterministic_function_handling` and `query_cache_system_table_handling`,
//! both `throw`): `src/Interpreters/Cache/QueryResultCache.cpp` (`QueryCache.cpp` before
//! 25.x), `astContainsNonDeterministicFunctions` (every function of the statement whose
//! `IFunctionOverloadResolver::isDeterministic()` is false, looked up by name in the
//! `FunctionFactory`) and `astContainsSystemTables` (a table of a predefined database:
//! `system`, `information_schema`, `INFORMATION_SCHEMA`, also named in a string as
//! `clusterAllReplicas`'s argument). The list below is the one ClickHouse 26.9's query cache
//! itself refuses: every function of its `system.functions` asked with `WITH f() AS x SELECT 1
//! SETTINGS use_query_cache = 1` (an unused alias is never analysed, so no arguments are needed),
//! keeping those that answer Code 704 (QUERY_CACHE_USED_WITH_NONDETERMINISTIC_FUNCTIONS), on
//! chdb-core 26.9; and those it could not be asked about there (they need a setting, a server's
//! embedded dictionaries or transactions) whose `system.functions.deterministic` is not 1:
//! `fuzzQuery`, `getClientHTTPHeader`, `transaction*Snapshot`, `region*`. 18.16's
//! functions are a subset of 26.9's names. Names are compared ignoring case (more are refused
//! than the server's case rules would, never fewer).
//!
//! The reading is looser than a parser: any name followed by `(` counts as a call (a column or
//! alias named `now` followed by a bracket does too), and any string literal that starts with
//! `system.` or `information_schema.` counts as a system table: when in doubt, not reused.

use crate::lexer::{Token, TokenKind};

/// The functions ClickHouse's query cache refuses to cache (see the module doc), sorted
/// ignoring case.
pub const NONDETERMINISTIC_FUNCTIONS: &[&str] = &[
    "__applyFilter",
    "addressToLine",
    "addressToLineWithInlines",
    "addressToSymbol",
    "AIClassify",
    "AIExtract",
    "AIFilter",
    "AIGenerate",
    "AIRedact",
    "AITranslate",
    "arrayJoin",
    "arrayPartialReverseSort",
    "arrayPartialShuffle",
    "arrayPartialSort",
    "arrayRandomSample",
    "arrayShuffle",
    "assignCentroid",
    "authenticatedUser",
    "connection_id",
    "curdate",
    "current_database",
    "current_date",
    "current_query_id",
    "current_schemas",
    "current_timestamp",
    "current_user",
    "currentDatabase",
    "currentHandler",
    "currentProfiles",
    "currentQueryID",
    "currentRequestURL",
    "currentRoles",
    "currentSchemas",
    "currentUser",
    "DATABASE",
    "dateTimeToUUIDv7",
    "defaultProfiles",
    "defaultRoles",
    "dictGet",
    "dictGetAll",
    "dictGetChildren",
    "dictGetDate",
    "dictGetDateOrDefault",
    "dictGetDateTime",
    "dictGetDateTimeOrDefault",
    "dictGetDescendants",
    "dictGetFloat32",
    "dictGetFloat32OrDefault",
    "dictGetFloat64",
    "dictGetFloat64OrDefault",
    "dictGetHierarchy",
    "dictGetInt16",
    "dictGetInt16OrDefault",
    "dictGetInt32",
    "dictGetInt32OrDefault",
    "dictGetInt64",
    "dictGetInt64OrDefault",
    "dictGetInt8",
    "dictGetInt8OrDefault",
    "dictGetIPv4",
    "dictGetIPv4OrDefault",
    "dictGetIPv6",
    "dictGetIPv6OrDefault",
    "dictGetKeys",
    "dictGetOrDefault",
    "dictGetOrNull",
    "dictGetRoot",
    "dictGetString",
    "dictGetStringOrDefault",
    "dictGetUInt16",
    "dictGetUInt16OrDefault",
    "dictGetUInt32",
    "dictGetUInt32OrDefault",
    "dictGetUInt64",
    "dictGetUInt64OrDefault",
    "dictGetUInt8",
    "dictGetUInt8OrDefault",
    "dictGetUUID",
    "dictGetUUIDOrDefault",
    "dictHas",
    "dictIsIn",
    "displayName",
    "dumpColumnStructure",
    "enabledProfiles",
    "enabledRoles",
    "file",
    "filesystemAvailable",
    "filesystemCapacity",
    "filesystemUnreserved",
    "financialNetPresentValueExtended",
    "FQDN",
    "fullHostName",
    "fuzzBits",
    "fuzzQuery",
    "generateRandomStructure",
    "generateSerialID",
    "generateSnowflakeID",
    "generateUUIDv4",
    "generateUUIDv7",
    "getClientHTTPHeader",
    "getMacro",
    "getMergeTreeSetting",
    "getOSKernelVersion",
    "getServerPort",
    "getServerSetting",
    "getSetting",
    "getSettingOrDefault",
    "hasColumnInTable",
    "hostName",
    "initial_query_id",
    "initial_query_start_time",
    "initialQueryID",
    "initialQueryStartTime",
    "isConstant",
    "joinGet",
    "joinGetOrNull",
    "localtime",
    "localtimestamp",
    "lowCardinalityIndices",
    "lowCardinalityKeys",
    "naiveBayesClassifier",
    "naiveBayesClassifierWithAllProbs",
    "naiveBayesClassifierWithProb",
    "neighbor",
    "now",
    "now64",
    "nowInBlock",
    "nowInBlock64",
    "obfuscateQuery",
    "pg_get_userbyid",
    "pgGetUserById",
    "query_id",
    "queryID",
    "rand",
    "rand32",
    "rand64",
    "randBernoulli",
    "randBinomial",
    "randCanonical",
    "randChiSquared",
    "randConstant",
    "randExponential",
    "randFisherF",
    "randLogNormal",
    "randNegativeBinomial",
    "randNormal",
    "randomFixedString",
    "randomPrintableASCII",
    "randomString",
    "randomStringUTF8",
    "randPoisson",
    "randStudentT",
    "randUniform",
    "regionHierarchy",
    "regionIn",
    "regionToArea",
    "regionToCity",
    "regionToContinent",
    "regionToCountry",
    "regionToDistrict",
    "regionToName",
    "regionToPopulation",
    "regionToTopContinent",
    "revision",
    "rowNumberInAllBlocks",
    "rowNumberInBlock",
    "runningAccumulate",
    "runningConcurrency",
    "runningDifference",
    "runningDifferenceStartingWithFirstValue",
    "SCHEMA",
    "serverTimeZone",
    "serverUUID",
    "session_user",
    "shardCount",
    "shardNum",
    "showCertificate",
    "tcpPort",
    "timeSeriesCopyTag",
    "timeSeriesCopyTags",
    "timeSeriesExtractTag",
    "timeSeriesGroupToSamplingKey",
    "timeSeriesGroupToTags",
    "timeSeriesIdToGroup",
    "timeSeriesIdToTags",
    "timeSeriesIdToTagsGroup",
    "timeSeriesJoinTags",
    "timeSeriesRemoveAllTagsExcept",
    "timeSeriesRemoveTag",
    "timeSeriesRemoveTags",
    "timeSeriesReplaceTag",
    "timeSeriesTagsGroupToTags",
    "timeSeriesTagsToGroup",
    "timeSeriesThrowDuplicateSeriesIf",
    "timeZone",
    "toColumnTypeName",
    "today",
    "transactionID",
    "transactionLatestSnapshot",
    "transactionOldestSnapshot",
    "unnest",
    "uptime",
    "user",
    "UTC_timestamp",
    "UTCTimestamp",
    "version",
    "yesterday",
    "zookeeperSessionUptime",
];

/// The predefined databases whose tables the query cache refuses (`DatabaseCatalog::isPredefinedDatabase`).
pub const SYSTEM_DATABASES: &[&str] = &["system", "information_schema", "INFORMATION_SCHEMA"];

/// Why a read's answer may not be reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Volatile {
    /// It calls this non-deterministic function.
    Function(String),
    /// It reads a table of this predefined database.
    SystemTable(String),
}

impl std::fmt::Display for Volatile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Volatile::Function(n) => write!(f, "it calls {n}(), whose value the query's text does not fix"),
            Volatile::SystemTable(d) => write!(f, "it reads a table of {d}, which changes from one moment to the next"),
        }
    }
}

/// True when `name` is one of [`NONDETERMINISTIC_FUNCTIONS`] (ignoring case).
pub fn is_nondeterministic(name: &str) -> bool {
    NONDETERMINISTIC_FUNCTIONS.binary_search_by(|f| cmp_ignoring_case(f, name)).is_ok()
}

fn cmp_ignoring_case(a: &str, b: &str) -> std::cmp::Ordering {
    a.bytes().map(|c| c.to_ascii_lowercase()).cmp(b.bytes().map(|c| c.to_ascii_lowercase()))
}

/// The first thing in a statement's tokens that keeps its answer from being reused, if any:
/// a call of a non-deterministic function, a name `db.` of a predefined database, or a string
/// naming one of its tables.
pub fn volatile(toks: &[Token<'_>]) -> Option<Volatile> {
    for (i, t) in toks.iter().enumerate() {
        let next = toks.get(i + 1);
        match t.kind {
            TokenKind::Word | TokenKind::QuotedIdent => {
                let Some(name) = t.ident() else { continue };
                if next.is_some_and(|n| n.is_punct("(")) && is_nondeterministic(&name) {
                    return Some(Volatile::Function(name));
                }
                if next.is_some_and(|n| n.is_punct(".")) && SYSTEM_DATABASES.contains(&name.as_str()) {
                    return Some(Volatile::SystemTable(name));
                }
            }
            TokenKind::Str => {
                let Some(s) = t.string_value() else { continue };
                if let Some(db) = SYSTEM_DATABASES
                    .iter()
                    .find(|d| s.trim_start().strip_prefix(**d).is_some_and(|r| r.starts_with('.')))
                {
                    return Some(Volatile::SystemTable(db.to_string()));
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::Grammar;
    use crate::statement::sql_tokens;

    fn v(sql: &str) -> Option<Volatile> {
        volatile(&sql_tokens(sql, Grammar::Current).0)
    }

    #[test]
    fn the_list_is_sorted_ignoring_case_and_has_no_twice() {
        for w in NONDETERMINISTIC_FUNCTIONS.windows(2) {
            assert_eq!(cmp_ignoring_case(w[0], w[1]), std::cmp::Ordering::Less, "{w:?}");
        }
    }

    #[test]
    fn non_deterministic_calls_and_system_tables_are_found_wherever_they_are() {
        let f = |n: &str| Some(Volatile::Function(n.into()));
        assert_eq!(v("SELECT now()"), f("now"));
        assert_eq!(v("SELECT count() FROM t WHERE d = TODAY ( )"), f("TODAY"));
        assert_eq!(v("SELECT * FROM t WHERE x IN (SELECT rand() FROM u)"), f("rand"));
        assert_eq!(v("SELECT `randConstant`(1)"), f("randConstant"));
        assert_eq!(v("SELECT dictGetString('d', 'a', toUInt64(1))"), f("dictGetString"));
        assert_eq!(v("SELECT * FROM items WHERE shop_id = 1 AND d < yesterday()"), f("yesterday"));
        assert_eq!(v("SELECT * FROM system.processes"), Some(Volatile::SystemTable("system".into())));
        assert_eq!(v("SELECT * FROM `system`.one"), Some(Volatile::SystemTable("system".into())));
        assert_eq!(
            v("SELECT * FROM INFORMATION_SCHEMA.TABLES"),
            Some(Volatile::SystemTable("INFORMATION_SCHEMA".into()))
        );
        assert_eq!(
            v("SELECT * FROM clusterAllReplicas('c', 'system.one')"),
            Some(Volatile::SystemTable("system".into()))
        );
        for fine in [
            "SELECT * FROM items FINAL WHERE shop_id = 42 AND item_id = 7",
            "SELECT 'now()', now_ FROM t -- now()",
            "SELECT /* rand() */ 1",
            "SELECT count() FROM numbers(10)",
            "SELECT abs(-1), toDate('2024-01-01'), sum(x) FROM t GROUP BY y",
            "SELECT systematic.x FROM systematic",
        ] {
            assert_eq!(v(fine), None, "{fine}");
        }
    }
}
