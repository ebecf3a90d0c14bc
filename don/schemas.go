package don

import (
	"strconv"

	"github.com/ethereum/go-ethereum/accounts/abi"
)

// The schema table: every report schema the official SDKs decode (V1 to
// V13: the Go SDK's report/vN packages, the TypeScript SDK's decoder) and
// V14, which the documentation describes (Futures, in beta). Field names,
// types and order are the documentation's report schema pages where they
// exist; where an SDK spells a field otherwise the documentation wins:
//
//   - V1, V2, V3, V4: "price" (the Go SDK's benchmarkPrice; the TypeScript
//     SDK and the documentation say price). V1 has no documentation page;
//     its price follows the other schemas'.
//   - V4: marketStatus is a uint8 as the documentation and the TypeScript
//     SDK have it (the Go SDK reads a uint32: the same word for 0 to 255).
//   - V14: the documentation names midPrice, bidPrice, askPrice,
//     expiryTime, firstDayOfNotice, lastSeenTimestampNs, marketStatus,
//     contractMonth, goldmanRollPrice, currentBusinessDay and
//     interpolatedGoldmanRollPrice; the layout is the one that carries those
//     fields (uint64 timestamps in the header, expiryTime a "YYYY-MM-DD"
//     string, contractMonth 1 to 12). Earlier V14 layouts (without the roll
//     prices) do not decode under it and are shown as a decode error.
//
// Scaled (18 decimals): every price, rate, volume of int192, net asset
// value, assets under management, multiplier and the two fees. Not scaled:
// timestamps, block numbers, statuses, ripcord, counts, V13's uint64
// volumes (whole units, as the SDKs give them).

type field struct {
	name, typ string
	scaled    bool
}

type schema struct {
	fields  []field
	args    abi.Arguments
	dynamic bool // a member of dynamic size (string): no fixed length
}

// The schemas decoded.
const (
	SchemaV1  Schema = 0x0001
	SchemaV2  Schema = 0x0002
	SchemaV3  Schema = 0x0003
	SchemaV4  Schema = 0x0004
	SchemaV5  Schema = 0x0005
	SchemaV6  Schema = 0x0006
	SchemaV7  Schema = 0x0007
	SchemaV8  Schema = 0x0008
	SchemaV9  Schema = 0x0009
	SchemaV10 Schema = 0x000a
	SchemaV11 Schema = 0x000b
	SchemaV12 Schema = 0x000c
	SchemaV13 Schema = 0x000d
	SchemaV14 Schema = 0x000e
)

// Schemas lists every schema decoded, in order.
var Schemas = []Schema{SchemaV1, SchemaV2, SchemaV3, SchemaV4, SchemaV5, SchemaV6, SchemaV7,
	SchemaV8, SchemaV9, SchemaV10, SchemaV11, SchemaV12, SchemaV13, SchemaV14}

func f(name, typ string) field  { return field{name: name, typ: typ} }
func sc(name, typ string) field { return field{name: name, typ: typ, scaled: true} }

// header is the header of V2 to V13.
var header = []field{
	f("feedId", "bytes32"), f("validFromTimestamp", "uint32"), f("observationsTimestamp", "uint32"),
	sc("nativeFee", "uint192"), sc("linkFee", "uint192"), f("expiresAt", "uint32"),
}

var schemaFields = map[Schema][]field{
	SchemaV1: {f("feedId", "bytes32"), f("observationsTimestamp", "uint32"),
		sc("price", "int192"), sc("bid", "int192"), sc("ask", "int192"),
		f("currentBlockNum", "uint64"), f("currentBlockHash", "bytes32"),
		f("validFromBlockNum", "uint64"), f("currentBlockTimestamp", "uint64")},
	SchemaV2: withCommon(sc("price", "int192")),
	SchemaV3: withCommon(sc("price", "int192"), sc("bid", "int192"), sc("ask", "int192")),
	SchemaV4: withCommon(sc("price", "int192"), f("marketStatus", "uint8")),
	SchemaV5: withCommon(sc("rate", "int192"), f("timestamp", "uint32"), f("duration", "uint32")),
	SchemaV6: withCommon(sc("price", "int192"), sc("price2", "int192"), sc("price3", "int192"),
		sc("price4", "int192"), sc("price5", "int192")),
	SchemaV7: withCommon(sc("exchangeRate", "int192")),
	SchemaV8: withCommon(f("lastUpdateTimestamp", "uint64"), sc("midPrice", "int192"), f("marketStatus", "uint32")),
	SchemaV9: withCommon(sc("navPerShare", "int192"), f("navDate", "uint64"), sc("aum", "int192"), f("ripcord", "uint32")),
	SchemaV10: withCommon(f("lastUpdateTimestamp", "uint64"), sc("price", "int192"), f("marketStatus", "uint32"),
		sc("currentMultiplier", "int192"), sc("newMultiplier", "int192"), f("activationDateTime", "uint32"),
		sc("tokenizedPrice", "int192")),
	SchemaV11: withCommon(sc("mid", "int192"), f("lastSeenTimestampNs", "uint64"), sc("bid", "int192"),
		sc("bidVolume", "int192"), sc("ask", "int192"), sc("askVolume", "int192"), sc("lastTradedPrice", "int192"),
		f("marketStatus", "uint32")),
	SchemaV12: withCommon(sc("navPerShare", "int192"), sc("nextNavPerShare", "int192"), f("navDate", "uint64"),
		f("ripcord", "uint32")),
	SchemaV13: withCommon(sc("bestAsk", "int192"), sc("bestBid", "int192"), f("askVolume", "uint64"),
		f("bidVolume", "uint64"), sc("lastTradedPrice", "int192")),
	SchemaV14: {f("feedId", "bytes32"), f("validFromTimestamp", "uint64"), f("observationsTimestamp", "uint64"),
		sc("nativeFee", "uint192"), sc("linkFee", "uint192"), f("expiresAt", "uint64"),
		sc("midPrice", "int192"), sc("bidPrice", "int192"), sc("askPrice", "int192"),
		f("expiryTime", "string"), f("firstDayOfNotice", "uint64"), f("lastSeenTimestampNs", "uint64"),
		f("marketStatus", "uint32"), f("contractMonth", "uint32"), sc("goldmanRollPrice", "int192"),
		f("currentBusinessDay", "uint32"), sc("interpolatedGoldmanRollPrice", "int192")},
}

func withCommon(own ...field) []field { return append(append([]field(nil), header...), own...) }

var schemas = map[Schema]*schema{}

func init() {
	for s, fs := range schemaFields {
		types := make([]string, len(fs))
		dyn := false
		for i, fd := range fs {
			types[i] = fd.typ
			dyn = dyn || fd.typ == "string"
		}
		schemas[s] = &schema{fields: fs, args: args(types...), dynamic: dyn}
	}
}

// FieldNames returns the names of a schema's fields in order, nil for an
// unknown schema.
func FieldNames(s Schema) []string {
	sc, ok := schemas[s]
	if !ok {
		return nil
	}
	out := make([]string, len(sc.fields))
	for i, fd := range sc.fields {
		out[i] = fd.name
	}
	return out
}

// MarketStatusName names the marketStatus value of a report of schema s,
// as the documentation maps it:
//
//   - V4, V8, V10 and V14: 0 unknown, 1 closed, 2 open. Every stream of these
//     schemas may take all three (closed outside its market's hours:
//     weekends, holidays, the daily break of metals and commodities).
//   - V11: 0 unknown, 1 pre-market, 2 regular, 3 post-market, 4 overnight,
//     5 closed. Which values a stream takes depends on its market hours: a
//     24/5 US equities stream takes all six (pre-market 4:00-9:30, regular
//     9:30-16:00, post-market 16:00-20:00, overnight 20:00-4:00 ET, closed
//     at weekends and holidays); a standard-hours stream (APAC equities,
//     regular-session US equities, FX and metals on V11) only 0, 2 and 5,
//     where 5 also covers lunch breaks and closing auctions; 1, 3 and 4
//     never appear on it.
//
// A value outside the mapping is named "status-N".
func MarketStatusName(s Schema, v uint32) string {
	switch s {
	case SchemaV4, SchemaV8, SchemaV10, SchemaV14:
		switch v {
		case 0:
			return "unknown"
		case 1:
			return "closed"
		case 2:
			return "open"
		}
	case SchemaV11:
		switch v {
		case 0:
			return "unknown"
		case 1:
			return "pre-market"
		case 2:
			return "regular"
		case 3:
			return "post-market"
		case 4:
			return "overnight"
		case 5:
			return "closed"
		}
	}
	return "status-" + strconv.FormatUint(uint64(v), 10)
}

// RipcordName names the ripcord of a V9 or V12 report: 0 normal, 1
// paused (the data provider flags a pause: do not consume the NAV).
func RipcordName(v uint32) string {
	switch v {
	case 0:
		return "normal"
	case 1:
		return "paused"
	}
	return "ripcord-" + strconv.FormatUint(uint64(v), 10)
}
