// chgo runs one query with clickhouse-go v2, as an application built on it would, and prints its
// rows as tab-separated text, or its error as `ERROR <code>: <message>`; the gateway's tests run
// it straight at a server and through the gateway and compare the two.
//
//	chgo -protocol native|http -addr 127.0.0.1:9000 [-setting k=v]... [-param k=v]... -query SQL
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(map[string]string(p)) }
func (p pairs) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q is not name=value", v)
	}
	p[k] = val
	return nil
}

func main() {
	protocol := flag.String("protocol", "native", "native or http")
	addr := flag.String("addr", "127.0.0.1:9000", "host:port")
	query := flag.String("query", "SELECT 1", "the query")
	settings, params := pairs{}, pairs{}
	flag.Var(settings, "setting", "a setting, name=value (repeatable)")
	flag.Var(params, "param", "a query parameter, name=value (repeatable)")
	flag.Parse()

	opts := &clickhouse.Options{
		Addr:        []string{*addr},
		Auth:        clickhouse.Auth{Username: "default"},
		DialTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second,
	}
	if *protocol == "http" {
		opts.Protocol = clickhouse.HTTP
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if len(settings) > 0 {
		s := clickhouse.Settings{}
		for k, v := range settings {
			s[k] = v
		}
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(s))
	}
	if len(params) > 0 {
		ctx = clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters(params)))
	}
	rows, err := conn.Query(ctx, *query)
	if err != nil {
		fail(err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	for rows.Next() {
		values := make([]any, len(types))
		for i, t := range types {
			values[i] = newOf(t.ScanType())
		}
		if err := rows.Scan(values...); err != nil {
			fail(err)
		}
		cells := make([]string, len(values))
		for i, v := range values {
			cells[i] = fmt.Sprint(deref(v))
		}
		fmt.Println(strings.Join(cells, "\t"))
	}
	if err := rows.Err(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		fmt.Printf("ERROR %d\n", ex.Code)
		fmt.Fprintln(os.Stderr, ex.Message)
	} else {
		fmt.Printf("ERROR %v\n", err)
	}
	os.Exit(1)
}
