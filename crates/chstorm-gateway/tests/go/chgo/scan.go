package main

import "reflect"

// newOf is a pointer to a new value of type t, for rows.Scan.
func newOf(t reflect.Type) any { return reflect.New(t).Interface() }

// deref is the value a pointer from newOf points to.
func deref(v any) any { return reflect.ValueOf(v).Elem().Interface() }
