//! Settings in a Query packet at revision 54412 and below: the old *typed* format, where each
//! value is written in its setting's own binary type (numbers as VarUInt, signed numbers as
//! zig-zag VarInt, floats, enums and strings as strings). Revision 54429 (19.x) moved to strings
//! for all; the gateway speaks 54412, so it must know each setting's type to find where a value
//! ends, and to write the settings it sends to a backend.
//!
//! The table is ClickHouse 18.16's `Settings.h`: the settings `system.settings` lists on 18.16.1,
//! in its order (this crate's `tests/native.rs` checks the names and their order against the
//! live server, and sends every setting in its type to it, each read back as written). A name outside it is refused
//! as 18.16 refuses it (code 115, `Unknown setting`): its value's length cannot be known.
//! Settings that newer releases added cannot be sent over the gateway's native port, and a newer
//! client sends the ones it knows in its own types, which for the 18.16 settings are the same.

use crate::native::wire::put_varuint;

/// How a setting's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// VarUInt: UInt64, Bool, Seconds, Milliseconds, MaxThreads (0 = auto).
    UInt,
    /// Zig-zag VarInt: Int64.
    Int,
    /// A string: Float, String, Char and the enums (`load_balancing`, `*_overflow_mode`, ...).
    Str,
}

/// 18.16's settings whose value is not a VarUInt.
const NOT_UINT: &[(&str, Ty)] = &[
    ("load_balancing", Ty::Str),
    ("totals_mode", Ty::Str),
    ("totals_auto_threshold", Ty::Str),
    ("max_streams_to_max_threads_ratio", Ty::Str),
    ("network_compression_method", Ty::Str),
    ("network_zstd_compression_level", Ty::Int),
    ("distributed_product_mode", Ty::Str),
    ("memory_tracker_fault_probability", Ty::Str),
    ("http_zlib_compression_level", Ty::Int),
    ("count_distinct_implementation", Ty::Str),
    ("input_format_allow_errors_ratio", Ty::Str),
    ("join_default_strictness", Ty::Str),
    ("distributed_ddl_task_timeout", Ty::Int),
    ("format_schema", Ty::Str),
    ("read_overflow_mode", Ty::Str),
    ("group_by_overflow_mode", Ty::Str),
    ("sort_overflow_mode", Ty::Str),
    ("result_overflow_mode", Ty::Str),
    ("timeout_overflow_mode", Ty::Str),
    ("set_overflow_mode", Ty::Str),
    ("join_overflow_mode", Ty::Str),
    ("transfer_overflow_mode", Ty::Str),
    ("distinct_overflow_mode", Ty::Str),
    ("format_csv_delimiter", Ty::Str),
    ("date_time_input_format", Ty::Str),
    ("send_logs_level", Ty::Str),
];

/// Every setting of 18.16, in `Settings.h` order.
pub const NAMES_18_16: &[&str] = &[
    "min_compress_block_size",
    "max_compress_block_size",
    "max_block_size",
    "max_insert_block_size",
    "min_insert_block_size_rows",
    "min_insert_block_size_bytes",
    "max_threads",
    "max_read_buffer_size",
    "max_distributed_connections",
    "max_query_size",
    "interactive_delay",
    "connect_timeout",
    "connect_timeout_with_failover_ms",
    "receive_timeout",
    "send_timeout",
    "tcp_keep_alive_timeout",
    "queue_max_wait_ms",
    "poll_interval",
    "distributed_connections_pool_size",
    "connections_with_failover_max_tries",
    "extremes",
    "use_uncompressed_cache",
    "replace_running_query",
    "background_pool_size",
    "background_schedule_pool_size",
    "distributed_directory_monitor_sleep_time_ms",
    "distributed_directory_monitor_batch_inserts",
    "optimize_move_to_prewhere",
    "replication_alter_partitions_sync",
    "replication_alter_columns_timeout",
    "load_balancing",
    "totals_mode",
    "totals_auto_threshold",
    "compile",
    "compile_expressions",
    "min_count_to_compile",
    "group_by_two_level_threshold",
    "group_by_two_level_threshold_bytes",
    "distributed_aggregation_memory_efficient",
    "aggregation_memory_efficient_merge_threads",
    "max_parallel_replicas",
    "parallel_replicas_count",
    "parallel_replica_offset",
    "skip_unavailable_shards",
    "distributed_group_by_no_merge",
    "merge_tree_min_rows_for_concurrent_read",
    "merge_tree_min_rows_for_seek",
    "merge_tree_coarse_index_granularity",
    "merge_tree_max_rows_to_use_cache",
    "merge_tree_uniform_read_distribution",
    "mysql_max_rows_to_insert",
    "optimize_min_equality_disjunction_chain_length",
    "min_bytes_to_use_direct_io",
    "force_index_by_date",
    "force_primary_key",
    "mark_cache_min_lifetime",
    "max_streams_to_max_threads_ratio",
    "network_compression_method",
    "network_zstd_compression_level",
    "priority",
    "log_queries",
    "log_queries_cut_to_length",
    "distributed_product_mode",
    "max_concurrent_queries_for_user",
    "insert_deduplicate",
    "insert_sample_with_metadata",
    "insert_quorum",
    "insert_quorum_timeout",
    "select_sequential_consistency",
    "table_function_remote_max_addresses",
    "read_backoff_min_latency_ms",
    "read_backoff_max_throughput",
    "read_backoff_min_interval_between_events_ms",
    "read_backoff_min_events",
    "memory_tracker_fault_probability",
    "enable_http_compression",
    "http_zlib_compression_level",
    "http_native_compression_disable_checksumming_on_decompress",
    "count_distinct_implementation",
    "output_format_write_statistics",
    "add_http_cors_header",
    "input_format_skip_unknown_fields",
    "input_format_import_nested_json",
    "input_format_values_interpret_expressions",
    "output_format_json_quote_64bit_integers",
    "output_format_json_quote_denormals",
    "output_format_json_escape_forward_slashes",
    "output_format_pretty_max_rows",
    "output_format_pretty_max_column_pad_width",
    "output_format_pretty_color",
    "use_client_time_zone",
    "send_progress_in_http_headers",
    "http_headers_progress_interval_ms",
    "fsync_metadata",
    "input_format_allow_errors_num",
    "input_format_allow_errors_ratio",
    "join_use_nulls",
    "join_default_strictness",
    "preferred_block_size_bytes",
    "max_replica_delay_for_distributed_queries",
    "fallback_to_stale_replicas_for_distributed_queries",
    "preferred_max_column_in_block_size_bytes",
    "insert_distributed_sync",
    "insert_distributed_timeout",
    "distributed_ddl_task_timeout",
    "stream_flush_interval_ms",
    "format_schema",
    "insert_allow_materialized_columns",
    "http_connection_timeout",
    "http_send_timeout",
    "http_receive_timeout",
    "optimize_throw_if_noop",
    "use_index_for_in_with_subqueries",
    "empty_result_for_aggregation_by_empty_set",
    "allow_distributed_ddl",
    "odbc_max_field_size",
    "max_rows_to_read",
    "max_bytes_to_read",
    "read_overflow_mode",
    "max_rows_to_group_by",
    "group_by_overflow_mode",
    "max_bytes_before_external_group_by",
    "max_rows_to_sort",
    "max_bytes_to_sort",
    "sort_overflow_mode",
    "max_bytes_before_external_sort",
    "max_bytes_before_remerge_sort",
    "max_result_rows",
    "max_result_bytes",
    "result_overflow_mode",
    "max_execution_time",
    "timeout_overflow_mode",
    "min_execution_speed",
    "timeout_before_checking_execution_speed",
    "max_columns_to_read",
    "max_temporary_columns",
    "max_temporary_non_const_columns",
    "max_subquery_depth",
    "max_pipeline_depth",
    "max_ast_depth",
    "max_ast_elements",
    "max_expanded_ast_elements",
    "readonly",
    "max_rows_in_set",
    "max_bytes_in_set",
    "set_overflow_mode",
    "max_rows_in_join",
    "max_bytes_in_join",
    "join_overflow_mode",
    "max_rows_to_transfer",
    "max_bytes_to_transfer",
    "transfer_overflow_mode",
    "max_rows_in_distinct",
    "max_bytes_in_distinct",
    "distinct_overflow_mode",
    "max_memory_usage",
    "max_memory_usage_for_user",
    "max_memory_usage_for_all_queries",
    "max_network_bandwidth",
    "max_network_bytes",
    "max_network_bandwidth_for_user",
    "max_network_bandwidth_for_all_users",
    "format_csv_delimiter",
    "format_csv_allow_single_quotes",
    "format_csv_allow_double_quotes",
    "date_time_input_format",
    "log_profile_events",
    "log_query_settings",
    "log_query_threads",
    "send_logs_level",
    "enable_optimize_predicate_expression",
    "low_cardinality_max_dictionary_size",
    "low_cardinality_use_single_dictionary_for_part",
    "allow_experimental_low_cardinality_type",
    "decimal_check_overflow",
    "prefer_localhost_replica",
    "max_fetch_partition_retries_count",
    "asterisk_left_columns_only",
    "http_max_multipart_form_data_size",
    "calculate_text_stack_trace",
    "allow_ddl",
    "parallel_view_processing",
    "enable_debug_queries",
    "low_cardinality_allow_in_native_format",
];

/// The type of setting `name`; None for a name 18.16 does not know.
pub fn type_of(name: &str) -> Option<Ty> {
    if let Some((_, t)) = NOT_UINT.iter().find(|(n, _)| *n == name) {
        return Some(*t);
    }
    NAMES_18_16.contains(&name).then_some(Ty::UInt)
}

/// Why a setting could not be written for a backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("Unknown setting {0}")]
    Unknown(String),
    #[error("Cannot parse '{value}' as the value of setting {name}: a number is expected")]
    NotANumber { name: String, value: String },
}

/// Appends one setting in the typed format. The value is text (as the plan keeps settings):
/// numbers are parsed for the numeric types; `true`/`false` are 1/0 as ClickHouse reads them.
pub fn put_setting(out: &mut Vec<u8>, name: &str, value: &str) -> Result<(), SettingError> {
    let ty = type_of(name).ok_or_else(|| SettingError::Unknown(name.to_string()))?;
    let bad = || SettingError::NotANumber { name: name.to_string(), value: value.to_string() };
    let v = value.trim();
    crate::native::wire::put_str(out, name.as_bytes());
    match ty {
        Ty::UInt => {
            let n = match v {
                "true" => 1,
                "false" => 0,
                _ => v.parse::<u64>().map_err(|_| bad())?,
            };
            put_varuint(out, n);
        }
        Ty::Int => {
            let n = v.parse::<i64>().map_err(|_| bad())?;
            put_varuint(out, ((n << 1) ^ (n >> 63)) as u64);
        }
        Ty::Str => crate::native::wire::put_str(out, value.as_bytes()),
    }
    Ok(())
}

/// Appends one setting in the format of `revision`: below 54429 typed ([`put_setting`]); from
/// 54429 a string with `flags` (`BaseSettings::write`, `SettingsWriteFormat::STRINGS_WITH_FLAGS`),
/// any name (the server says whether it knows it).
pub fn put_setting_at(
    out: &mut Vec<u8>,
    name: &str,
    value: &str,
    flags: u64,
    revision: u64,
) -> Result<(), SettingError> {
    if revision < crate::native::packets::rev::SETTINGS_AS_STRINGS {
        return put_setting(out, name, value);
    }
    crate::native::wire::put_str(out, name.as_bytes());
    put_varuint(out, flags);
    crate::native::wire::put_str(out, value.as_bytes());
    Ok(())
}

/// Decodes a zig-zag VarInt's value from its VarUInt form.
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_encoding() {
        assert_eq!(type_of("max_threads"), Some(Ty::UInt));
        assert_eq!(type_of("load_balancing"), Some(Ty::Str));
        assert_eq!(type_of("distributed_ddl_task_timeout"), Some(Ty::Int));
        assert_eq!(type_of("no_such_setting"), None);
        assert!(NOT_UINT.iter().all(|(n, _)| NAMES_18_16.contains(n)), "every typed name is a setting");
        let mut out = Vec::new();
        put_setting(&mut out, "max_threads", "3").unwrap();
        assert_eq!(out, b"\x0bmax_threads\x03");
        out.clear();
        put_setting(&mut out, "distributed_ddl_task_timeout", "-1").unwrap();
        assert_eq!(out.last(), Some(&1u8));
        assert_eq!(unzigzag(1), -1);
        assert_eq!(unzigzag(360), 180);
        assert!(put_setting(&mut out, "max_threads", "auto").is_err());
        assert_eq!(put_setting(&mut out, "x_y", "1"), Err(SettingError::Unknown("x_y".into())));
    }
}
