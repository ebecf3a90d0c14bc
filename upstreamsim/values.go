package upstreamsim

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"
)

// The value model. Every figure of a report is a pure function of (network,
// stream, timestamp) computed in O(1): a price is a level times one plus a
// sum of four sinusoids (periods from about nine days down to a quarter of
// an hour, phases and periods hashed from the stream) plus hashed
// per-second noise; rates and net asset values grow in daily steps; macro
// figures change once a month. Outside its market hours a stream's price
// stays at its value of the last trading second.

const (
	day  = 86400
	year = 365 * day
)

// growthEpoch is the reference day of rates and net asset values.
var growthEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

type model struct {
	kind      kind
	sched     schedule
	level     float64
	vol       float64 // scale of the relative moves of a price
	amp       float64 // absolute amplitude of a macro figure
	growth    float64 // yearly growth of a rate or NAV
	spreadBps float64 // typical bid-ask spread, basis points
	volume    float64 // typical size of each side of the book, units
	period    [4]float64
	phase     [4]float64
	seed      uint64
	digest    [32]byte // config digest, the first word of reportContext
	shares    float64  // V9: shares outstanding, for the assets under management
}

var (
	ampOf    = [4]float64{0.05, 0.015, 0.006, 0.0025}
	periodOf = [4]float64{9.3 * day, day, 3.1 * 3600, 17 * 60}
)

func newModel(network string, d def, id [32]byte) model {
	m := model{
		seed:  hash64("streamgate-simulator/values", network, hex.EncodeToString(id[:])),
		level: d.level,
		vol:   1,
		sched: scheduleOf(d.marketHours()),
	}
	for i := range m.period {
		u := unit(m.seed, uint64(2*i), 0)
		m.period[i] = periodOf[i] * (0.8 + 0.4*u)
		m.phase[i] = 2 * math.Pi * unit(m.seed, uint64(2*i+1), 0)
	}
	m.digest = configDigest(network, d.schema)

	m.spreadBps = 2
	m.volume = 50 + 950*unit(m.seed, 20, 0)
	m.shares = 5e7 + 2.5e8*unit(m.seed, 25, 0)
	switch {
	case d.attr == aRate:
		m.kind = kindRate
		m.growth = 0.025 + 0.015*unit(m.seed, 21, 0)
	case d.class == cMacro:
		m.kind = kindMacro
		m.amp = 0.03 * d.level
		if d.quote == "PCT" {
			m.amp = 0.25 * d.level
		}
		if d.base == "USGDP" {
			m.amp = 1.5 * d.level // growth turns negative now and then
		}
	case d.class == cRates:
		m.kind = kindNAV // a daily rate, no growth
	case d.class == cNAV || d.class == cTTreas || d.class == cTCLO || d.class == cTDebt || d.feedType == ftSmart:
		m.kind = kindNAV
		m.growth = 0.03 + 0.02*unit(m.seed, 22, 0)
	case d.class == cEquities:
		m.vol, m.spreadBps, m.volume = 0.5, 3, 100+4900*unit(m.seed, 23, 0)
	case d.class == cForex:
		m.vol, m.spreadBps, m.volume = 0.12, 0.8, 1e5+9e5*unit(m.seed, 24, 0)
	case d.class == cCommodity || d.class == cFutures:
		m.vol, m.spreadBps = 0.3, 2
	case d.class == cTAsset:
		m.vol, m.spreadBps = 0.2, 5
	case d.feedType == ftDatalink:
		m.vol = 0.15
	case d.level == 1: // stablecoins
		m.vol, m.spreadBps = 0.004, 0.5
	case d.attr == aDex:
		m.spreadBps = 8
	case d.attr == aTop:
		m.spreadBps = 1
	}
	return m
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// rnd is a pseudo-random 64-bit value of (seed, salt, t).
func rnd(seed, salt uint64, t int64) uint64 {
	return mix(seed ^ mix(salt+0x632be59bd9b4e019) ^ mix(uint64(t)*0xd1b54a32d192ed03))
}

// unit is a pseudo-random value in [0, 1) of (seed, salt, t).
func unit(seed, salt uint64, t int64) float64 {
	return float64(rnd(seed, salt, t)>>11) / (1 << 53)
}

// value returns the stream's value at second t (before rounding).
func (m *model) value(t int64) float64 {
	switch m.kind {
	case kindRate:
		days := float64(floorDiv(t-growthEpoch, day))
		return m.level * (1 + m.growth*days*day/year)
	case kindNAV:
		d := floorDiv(t-growthEpoch, day)
		noise := 0.0002 * (2*unit(m.seed, 30, d) - 1)
		return m.level * (1 + m.growth*float64(d)*day/year + noise)
	case kindMacro:
		y, mon, _ := time.Unix(t, 0).UTC().Date()
		mi := int64(y)*12 + int64(mon)
		wave := math.Sin(2*math.Pi*float64(mi)/37 + m.phase[0])
		return m.level + m.amp*(0.6*wave+0.4*(2*unit(m.seed, 31, mi)-1))
	}
	x := 0.0
	for i := range ampOf {
		x += float64(ampOf[i] * math.Sin(2*math.Pi*float64(t)/m.period[i]+m.phase[i]))
	}
	x += float64(0.0004 * (2*unit(m.seed, 32, t) - 1))
	return m.level * (1 + m.vol*x)
}

// nano rounds a value to nano-units (9 decimals).
func nano(v float64) int64 { return int64(math.Round(v * 1e9)) }

// reportValues are the fields of one report.
type reportValues struct {
	schema          Schema
	id              [32]byte
	ts              int64
	nativeFee       uint64
	linkFee         uint64
	price, bid, ask int64 // nano-units; price is the mid of V11 and the exchangeRate of V7
	bidVol, askVol  int64 // nano-units
	lastTraded      int64 // nano-units
	lastSeenNs      uint64
	marketStatus    uint32
	context         [3][32]byte

	// The fields of the other schemas (see blob).
	te            int64    // the trading second whose price applies
	prices        [5]int64 // V6: price to price5, nano-units
	nextPrice     int64    // V12: next NAV per share, nano-units
	aum           int64    // V9: assets under management, whole units
	rateTime      int64    // V5: when the rate took effect; V9, V12: the NAV's day
	block         uint64   // V1: the block of the observation
	blockTime     int64    // V1: its timestamp
	blockHash     [32]byte // V1
	multiplier    int64    // V10: current multiplier, nano-units
	tokenized     int64    // V10: tokenized price, nano-units
	bookVol       [2]uint64
	contract      futuresContract // V14
	goldman       int64           // V14: Goldman roll price, nano-units
	interpGoldman int64           // V14
}

// futuresContract is the front contract of a V14 stream at a second.
type futuresContract struct {
	expiry      string // YYYY-MM-DD
	firstNotice int64  // Unix nanoseconds
	month       uint32 // 1 to 12
	businessDay uint32 // business day of the month, 1 to 23
}

// expiry is how long after its observation a report may be verified.
const expiry = 30 * day

func (st *stream) values(ts int64) reportValues {
	m := &st.model
	te := m.sched.tradingTime(ts)
	v := reportValues{schema: st.schema, id: st.id, ts: ts}
	hour := floorDiv(ts, 3600)
	v.nativeFee = uint64(7.6e13 * (0.75 + 0.5*unit(m.seed, 40, hour)))
	v.linkFee = uint64(1.47e16 * (0.75 + 0.5*unit(m.seed, 41, hour)))

	v.price = nano(m.value(te))
	half := float64(v.price) * m.spreadBps / 2e4
	v.bid = v.price - max(1, int64(half*(0.5+unit(m.seed, 42, te))))
	v.ask = v.price + max(1, int64(half*(0.5+unit(m.seed, 43, te))))
	if st.schema == SchemaV11 {
		v.bidVol = nano(m.volume * (0.2 + unit(m.seed, 44, ts)))
		v.askVol = nano(m.volume * (0.2 + unit(m.seed, 45, ts)))
		v.lastTraded = v.bid + int64(float64(v.ask-v.bid)*unit(m.seed, 46, te))
		v.lastSeenNs = uint64(te)*1e9 - rnd(m.seed, 47, te)%1e9
		v.marketStatus = m.sched.status(ts)
	}
	st.otherValues(&v, te)

	v.context[0] = m.digest
	binary.BigEndian.PutUint64(v.context[1][24:], uint64(ts)<<8|rnd(m.seed, 50, ts)&0xff)
	fillRandom(v.context[2][:], m.seed, 51, ts)
	return v
}

func fillRandom(b []byte, seed, salt uint64, ts int64) {
	for i := 0; i < len(b); i += 8 {
		binary.BigEndian.PutUint64(b[i:], rnd(seed, salt<<8|uint64(i), ts))
	}
}

// maxBlobWords is the length of the largest blob (V14), in words.
const maxBlobWords = 17 + v14StringWords

// maxFullReport is the size of the largest fullReport (V14).
const maxFullReport = (7 + 1 + maxBlobWords + 1 + DONSigners + 1 + DONSigners) * word

// blob writes the reportBlob of v into b, which has the schema's length.
func (v *reportValues) blob(b []byte) {
	copy(b, v.id[:])
	w := func(i int) []byte { return b[i*word : (i+1)*word] }
	putUint(w(1), uint64(v.ts))
	putUint(w(2), uint64(v.ts))
	putUint(w(3), v.nativeFee)
	putUint(w(4), v.linkFee)
	putUint(w(5), uint64(v.ts+expiry))
	switch v.schema {
	case SchemaV3:
		putInt(w(6), scaled(v.price))
		putInt(w(7), scaled(v.bid))
		putInt(w(8), scaled(v.ask))
	case SchemaV7:
		putInt(w(6), scaled(v.price))
	case SchemaV11:
		putInt(w(6), scaled(v.price))
		putUint(w(7), v.lastSeenNs)
		putInt(w(8), scaled(v.bid))
		putInt(w(9), scaled(v.bidVol))
		putInt(w(10), scaled(v.ask))
		putInt(w(11), scaled(v.askVol))
		putInt(w(12), scaled(v.lastTraded))
		putUint(w(13), uint64(v.marketStatus))
	default:
		v.otherBlob(b)
	}
}

// appendReportJSON appends the JSON report record of st at ts to dst,
// signed by d (falsified as forge says, "" for none); decoy is the other
// stream's ID the duplicate-key forgeries add.
func (st *stream) appendReportJSON(dst []byte, ts int64, d *don, forge Forgery, decoy string) []byte {
	label := ts
	if forge == ForgeRelabel {
		ts -= RelabelAge
	}
	v := st.values(ts)
	var blob [maxBlobWords * word]byte
	n := v.schema.blobWords() * word
	v.blob(blob[:n])
	full := FullReport{ReportContext: v.context, ReportBlob: blob[:n]}
	d.sign(&full, ts, forge)
	var buf [maxFullReport]byte
	enc := full.AppendEncode(buf[:0])

	dst = append(dst, '{')
	if forge == ForgeDuplicateKey {
		dst = append(dst, `"feedID":"`+decoy+`",`...)
	}
	dst = append(dst, `"feedID":"`...)
	dst = append(dst, st.idHex...)
	dst = append(dst, `","validFromTimestamp":`...)
	dst = strconv.AppendInt(dst, label, 10)
	dst = append(dst, `,"observationsTimestamp":`...)
	dst = strconv.AppendInt(dst, label, 10)
	dst = append(dst, `,"fullReport":"0x`...)
	dst = hex.AppendEncode(dst, enc)
	switch forge {
	case ForgeTrailing:
		dst = append(dst, strings.Repeat("00", word)...)
	case ForgeOversize:
		dst = append(dst, strings.Repeat("00", OversizeBytes)...)
	}
	dst = append(dst, '"')
	if forge == ForgeDuplicateKeyLast {
		dst = append(dst, `,"feedID":"`+decoy+`"`...)
	}
	return append(dst, '}')
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// schedule is a market hours schedule, in UTC.
type schedule uint8

const (
	sched247       schedule = iota // always trading, status regular
	schedRegular                   // US equities, regular session only
	schedExtended                  // US equities, pre-market to post-market
	schedOvernight                 // US equities, around the clock on weekdays
	schedForex                     // Sunday 22:00 to Friday 22:00
	schedCME                       // metals and commodities: Sunday 23:00 to Friday 22:00, a break 22:00-23:00 Monday to Thursday
)

func scheduleOf(hours string) schedule {
	switch hours {
	case hoursNYSE:
		return schedRegular
	case hoursNYSEExt:
		return schedExtended
	case hoursNYSENight:
		return schedOvernight
	case hoursForex:
		return schedForex
	case hoursCME:
		return schedCME
	}
	return sched247
}

// Market statuses of V11.
const (
	statusUnknown   uint32 = 0
	statusPre       uint32 = 1
	statusRegular   uint32 = 2
	statusPost      uint32 = 3
	statusOvernight uint32 = 4
	statusClosed    uint32 = 5
)

// session returns the trading interval [start, end) in seconds of the day
// of the given weekday (0 Sunday), if any.
func (s schedule) session(weekday int64) (start, end int64, ok bool) {
	weekend := weekday == 0 || weekday == 6
	switch s {
	case schedRegular:
		return 48600, 72000, !weekend
	case schedExtended:
		return 28800, day, !weekend
	case schedOvernight:
		return 0, day, !weekend
	case schedForex:
		switch weekday {
		case 0:
			return 79200, day, true
		case 5:
			return 0, 79200, true
		case 6:
			return 0, 0, false
		}
		return 0, day, true
	}
	return 0, day, true
}

// cmeOpen reports whether a metals or commodities market trades at t.
func cmeOpen(t int64) bool {
	d := floorDiv(t, day)
	sod, wd := t-d*day, ((d+4)%7+7)%7
	switch wd {
	case 6:
		return false
	case 0:
		return sod >= 82800
	case 5:
		return sod < 79200
	}
	return sod < 79200 || sod >= 82800
}

// status returns the V11 market status at t.
func (s schedule) status(t int64) uint32 {
	d := floorDiv(t, day)
	sod, wd := t-d*day, ((d+4)%7+7)%7 // 1970-01-01 was a Thursday
	switch s {
	case schedCME:
		if cmeOpen(t) {
			return statusRegular
		}
		return statusClosed
	case sched247:
		return statusRegular
	case schedForex:
		if start, end, ok := s.session(wd); ok && sod >= start && sod < end {
			return statusRegular
		}
		return statusClosed
	}
	if s == schedRegular { // a standard-hours stream: open or closed, never pre, post or overnight
		if wd == 0 || wd == 6 || sod < 48600 || sod >= 72000 {
			return statusClosed
		}
		return statusRegular
	}
	switch {
	case wd == 0 || wd == 6:
		return statusClosed
	case sod < 28800:
		return statusOvernight
	case sod < 48600:
		return statusPre
	case sod < 72000:
		return statusRegular
	}
	return statusPost
}

// tradingTime returns t when the market trades at t, else the last second
// at which it traded.
func (s schedule) tradingTime(t int64) int64 {
	d := floorDiv(t, day)
	sod := t - d*day
	if s == schedCME {
		if cmeOpen(t) {
			return t
		}
		wd := ((d+4)%7 + 7) % 7
		switch {
		case wd >= 1 && wd <= 5 && sod >= 79200: // the daily break, or Friday's close
			return d*day + 79199
		case wd == 6:
			return (d-1)*day + 79199
		default: // Sunday before the open
			return (d-2)*day + 79199
		}
	}
	for back := int64(0); back < 8; back++ {
		start, end, ok := s.session(((d-back+4)%7 + 7) % 7)
		if !ok || (back == 0 && sod < start) {
			continue
		}
		if back == 0 && sod < end {
			return t
		}
		return (d-back)*day + end - 1
	}
	return t
}
