package otel

import "go.opentelemetry.io/otel/trace"

// ParseTraceContext is parseTraceContext, for the tests.
func ParseTraceContext(md map[string]string) trace.SpanContext { return parseTraceContext(md) }
