package config

import (
	"math"
	"net/url"
)

func validateTracing(ck check, c *Config) Problems {
	v, t := ck.validator(), &c.Tracing
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
			v.add(&t.OTLPEndpoint, "want the collector's base URL, http:// or https:// with a host, such as http://otel-collector:4318")
		case u.User != nil:
			v.add(&t.OTLPEndpoint, "must not hold user information")
		case t.Protocol == TracingGRPC && u.Path != "" && u.Path != "/":
			v.add(&t.OTLPEndpoint, "a grpc endpoint has no path: give scheme, host and port")
		}
	}
	if t.Protocol != TracingHTTP && t.Protocol != TracingGRPC {
		v.add(&t.Protocol, "%q: want http/protobuf or grpc", t.Protocol)
	}
	if math.IsNaN(t.SampleRatio) || t.SampleRatio < 0 || t.SampleRatio > 1 {
		v.add(&t.SampleRatio, "must be between 0 and 1")
	}
	return v.problems
}
