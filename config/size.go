package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Size is a number of bytes. In YAML it is a plain non-negative integer of
// bytes, or an integer followed by a unit: B; binary KiB, MiB, GiB, TiB
// (powers of 1024); or decimal KB (also kB), MB, GB, TB (powers of 1000).
// Units are case-sensitive, fractions are not accepted, and one space may
// separate the number from the unit: 64MiB, 1GiB, "512 KB", 1048576.
type Size int64

// Units of Size.
const (
	Byte Size = 1
	KiB       = 1024 * Byte
	MiB       = 1024 * KiB
	GiB       = 1024 * MiB
	TiB       = 1024 * GiB
	KB        = 1000 * Byte
	MB        = 1000 * KB
	GB        = 1000 * MB
	TB        = 1000 * GB
)

// sizeUnits is ordered from the largest unit down, binary before decimal,
// which is the order String tries them in.
var sizeUnits = []struct {
	name string
	size Size
}{
	{"TiB", TiB}, {"TB", TB},
	{"GiB", GiB}, {"GB", GB},
	{"MiB", MiB}, {"MB", MB},
	{"KiB", KiB}, {"KB", KB},
}

var errSizeSyntax = errors.New("want a non-negative integer of bytes or an integer with a unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")

// ParseSize parses a size as accepted in YAML (see Size).
func ParseSize(s string) (Size, error) {
	num := strings.TrimRight(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
	unit := s[len(num):]
	if unit != "" {
		num = strings.TrimSuffix(num, " ")
	}
	mult := Byte
	switch unit {
	case "", "B":
	case "kB":
		mult = KB
	default:
		found := false
		for _, u := range sizeUnits {
			if u.name == unit {
				mult, found = u.size, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("size %q: unknown unit %q: %w", s, unit, errSizeSyntax)
		}
	}
	if num == "" || num[0] < '0' || num[0] > '9' {
		return 0, fmt.Errorf("size %q: %w", s, errSizeSyntax)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return 0, fmt.Errorf("size %q: %w", s, errSizeSyntax)
	}
	if n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return Size(n) * mult, nil
}

// String returns the size in the largest unit that divides it exactly,
// binary first (268435456 is "256MiB", 512000 is "500KB"), else in bytes
// ("1023B"). ParseSize(s.String()) == s for every non-negative s.
func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	if s > 0 {
		for _, u := range sizeUnits {
			if s%u.size == 0 {
				return strconv.FormatInt(int64(s/u.size), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// UnmarshalYAML accepts a plain integer or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a size must be a scalar such as 64MiB", n.Line)}}
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		// A TypeError lets the decoder go on and report other problems too.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*s = v
	return nil
}

// MarshalYAML returns the readable form of String.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }
